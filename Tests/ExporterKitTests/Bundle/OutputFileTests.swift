import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("output files under injected faults")
struct OutputFileTests {
    @Test("a short write is detected and reported, with the bytes that did land")
    func shortWrite() throws {
        let folder = try Fixtures.temporaryDirectory()
        let url = folder.appendingPathComponent("data.bin")
        let file = try OutputFile(url: url, faults: FaultInjector(failAtOperation: 1, kind: .shortWrite))
        try file.write([UInt8](repeating: 7, count: 1000))
        #expect(throws: BundleError.writeFailed(path: url.path, reason: "short write (500 of 1000 bytes written)")) {
            try file.finish()
        }
        #expect(try Data(contentsOf: url).count == 500)
    }

    @Test("each kind fails with the system's message and names the path", arguments: FaultKind.allCases)
    func kinds(_ kind: FaultKind) throws {
        let folder = try Fixtures.temporaryDirectory()
        let url = folder.appendingPathComponent("data.bin")
        let expected: String
        switch kind {
        case .noSpace: expected = "no space left on device"
        case .ioError: expected = "input/output error"
        case .permissionDenied: expected = "permission denied"
        case .shortWrite: expected = "short write"
        }
        #expect(FaultInjector(failAtOperation: 1, kind: kind).reason == expected)
        if kind.canFail(.createFile) {
            #expect(throws: BundleError.writeFailed(path: url.path, reason: expected)) {
                _ = try OutputFile(url: url, faults: FaultInjector(failAtOperation: 1, kind: kind))
            }
        }
        #expect(kind.canFail(.write) == (kind != .permissionDenied))
    }

    @Test("a staged buffer whose write fails is reported when its buffer is needed again, and by finish")
    func failedStagedWrite() throws {
        let url = try Fixtures.temporaryDirectory().appendingPathComponent("data.bin")
        // Operation 1 creates the file; operation 2 is the first write, of the first 4 MiB buffer.
        let file = try OutputFile(url: url, faults: FaultInjector(failAtOperation: 2, kind: .ioError))
        let chunk = [UInt8](repeating: 1, count: 1 << 20)
        var failedAt: Int?
        for index in 0..<12 {
            do {
                try file.write(chunk)
            } catch {
                #expect(error as? BundleError == .writeFailed(path: url.path, reason: "input/output error"))
                failedAt = index
                break
            }
        }
        // The fourth MiB fills the first buffer, which is written while the second fills; the
        // eighth fills the second, which must wait for the first and meets its failure.
        #expect(failedAt == 7)
        #expect(throws: BundleError.writeFailed(path: url.path, reason: "input/output error")) { try file.finish() }
    }

    @Test("a reported path replaces the real one in every message")
    func reportedPath() throws {
        let folder = try Fixtures.temporaryDirectory()
        let file = try OutputFile(
            url: folder.appendingPathComponent("x"), faults: FaultInjector(failAtOperation: 2, kind: .noSpace),
            reportedPath: "/where/it/goes/x")
        try file.write([1, 2, 3])
        #expect(throws: BundleError.writeFailed(path: "/where/it/goes/x", reason: "no space left on device")) {
            try file.finish()
        }
    }

    @Test(
        "bypassing the page cache writes the same bytes, size and CRC, whatever the tail",
        arguments: [0, 1, 4095, 4096, 4097, (4 << 20) + 3, 9 << 20])
    func directWrites(tail: Int) throws {
        let folder = try Fixtures.temporaryDirectory()
        // Small, unaligned, exactly-one-buffer and larger-than-the-buffer writes, then the tail.
        let sizes = [1, 4095, 100, 4 << 20, 5 << 20, 7, tail]
        var expected: [UInt8] = []
        for (index, size) in sizes.enumerated() {
            expected += (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) }
        }
        for bypass in [true, false] {
            let url = folder.appendingPathComponent("data-\(bypass).bin")
            let file = try OutputFile(url: url, bypassPageCache: bypass)
            var offset = 0
            for size in sizes {
                try expected[offset..<(offset + size)].withUnsafeBytes { try file.write($0) }
                offset += size
            }
            try file.finish()
            #expect(file.size == expected.count)
            #expect(file.crc.value == expected.withUnsafeBytes { CRC32.checksum($0) })
            #expect(try Data(contentsOf: url) == Data(expected))
        }
    }
}
