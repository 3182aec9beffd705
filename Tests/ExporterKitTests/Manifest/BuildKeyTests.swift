import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("build key: file fingerprints")
struct BuildKeyTests {
    @Test("a small file is its size and the CRC-32 of all of it")
    func smallFile() throws {
        let url = try Fixtures.temporaryDirectory().appendingPathComponent("check.txt")
        try Data("123456789".utf8).write(to: url)
        #expect(try BuildKey.fingerprint(of: url) == "9:cbf43926")
    }

    @Test("an empty file is fingerprinted, not refused")
    func emptyFile() throws {
        let url = try Fixtures.temporaryDirectory().appendingPathComponent("empty.bin")
        try Data().write(to: url)
        #expect(try BuildKey.fingerprint(of: url) == "0:00000000")
    }

    @Test("a large file is its size and the CRC-32 of 64 evenly spaced 64 KiB windows from its first byte")
    func largeFile() throws {
        let size = BuildKey.sampleCount * BuildKey.sampleBytes + 1_001
        var bytes = [UInt8](repeating: 0, count: size)
        var state: UInt32 = 12_345
        for index in bytes.indices {
            state = state &* 1_664_525 &+ 1_013_904_223
            bytes[index] = UInt8(truncatingIfNeeded: state >> 24)
        }
        let url = try Fixtures.temporaryDirectory().appendingPathComponent("large.bin")
        try Data(bytes).write(to: url)
        let step = (size - BuildKey.sampleBytes) / (BuildKey.sampleCount - 1)
        var expected = CRC32()
        for window in 0..<BuildKey.sampleCount {
            let start = window * step
            bytes[start..<(start + BuildKey.sampleBytes)].withUnsafeBytes { expected.update($0) }
        }
        #expect(try BuildKey.fingerprint(of: url) == "\(size):\(BundleWriter.hex(expected.value))")

        // A byte outside every window does not change the fingerprint; one inside does.
        let outside = BuildKey.sampleBytes + 10
        #expect(outside < step)
        bytes[outside] ^= 0xFF
        try Data(bytes).write(to: url)
        #expect(try BuildKey.fingerprint(of: url) == "\(size):\(BundleWriter.hex(expected.value))")
        bytes[step + 5] ^= 0xFF
        try Data(bytes).write(to: url)
        #expect(try BuildKey.fingerprint(of: url) != "\(size):\(BundleWriter.hex(expected.value))")
    }

    @Test(
        "every tensor adds windows at its start, middle and end (a small one whole): a tensor between the file's windows counts"
    )
    func tensorWindows() throws {
        let size = 20 << 20
        var bytes = [UInt8](repeating: 7, count: size)
        let url = try Fixtures.temporaryDirectory().appendingPathComponent("model.safetensors")
        try Data(bytes).write(to: url)
        let step = (size - BuildKey.sampleBytes) / (BuildKey.sampleCount - 1)
        // Both between the file's first two windows.
        let large = (BuildKey.sampleBytes + 1_000)..<(BuildKey.sampleBytes + 101_000)
        let small = (step - 9_000)..<(step - 1_000)
        #expect(large.upperBound < small.lowerBound && small.upperBound < step)
        let ranges = [large, small]
        let before = (try BuildKey.fingerprint(of: url), try BuildKey.fingerprint(of: url, tensorRanges: ranges))
        let middle = large.lowerBound + (large.count - BuildKey.tensorSampleBytes) / 2
        for changed in [large.lowerBound, middle + 7, large.upperBound - 1, small.lowerBound + 4_000] {
            bytes[changed] ^= 0xFF
            try Data(bytes).write(to: url)
            // The file's windows alone miss it; the tensor's see it.
            #expect(try BuildKey.fingerprint(of: url) == before.0)
            #expect(try BuildKey.fingerprint(of: url, tensorRanges: ranges) != before.1, "byte \(changed)")
            bytes[changed] ^= 0xFF
        }
    }

    @Test("a missing file is a read error naming it")
    func missingFile() throws {
        let url = try Fixtures.temporaryDirectory().appendingPathComponent("absent.safetensors")
        #expect(throws: BundleError.readFailed(path: url.path, reason: "cannot open")) {
            try BuildKey.fingerprint(of: url)
        }
    }
}
