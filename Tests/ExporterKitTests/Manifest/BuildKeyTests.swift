import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("build key: file fingerprints and key inputs")
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

    @Test("a file the bundle copies is fingerprinted whole: a byte between the windows counts; a small one as sampled")
    func wholeFile() throws {
        let size = BuildKey.sampleCount * BuildKey.sampleBytes * 2 + 333
        var bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let url = try Fixtures.temporaryDirectory().appendingPathComponent("tokenizer.json")
        try Data(bytes).write(to: url)
        var expected = CRC32()
        bytes.withUnsafeBytes { expected.update($0) }
        #expect(try BuildKey.fingerprint(of: url, whole: true) == "\(size):\(BundleWriter.hex(expected.value))")
        let sampled = try BuildKey.fingerprint(of: url)
        bytes[BuildKey.sampleBytes + 10] ^= 0xFF
        try Data(bytes).write(to: url)
        #expect(try BuildKey.fingerprint(of: url) == sampled)
        #expect(try BuildKey.fingerprint(of: url, whole: true) != "\(size):\(BundleWriter.hex(expected.value))")
        // Within one window's reach, whole or sampled is the same digest: keys of small files stay as they were.
        let small = try Fixtures.temporaryDirectory().appendingPathComponent("vocab.json")
        try Data(bytes.prefix(BuildKey.sampleCount * BuildKey.sampleBytes)).write(to: small)
        #expect(try BuildKey.fingerprint(of: small, whole: true) == BuildKey.fingerprint(of: small))
        // An export's inputs: its tokenizer files whole, one token renamed at the same size counts.
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let padding = String(repeating: "x", count: BuildKey.sampleCount * BuildKey.sampleBytes * 2)
        let tokenizer = checkpoint.appendingPathComponent("tokenizer.json")
        func fingerprint(_ token: String) throws -> String? {
            try Data(#"{"pad": "\#(padding)", "model": {"vocab": {"\#(token)": 0}}, "end": "\#(padding)"}"#.utf8)
                .write(to: tokenizer)
            let weights = try CheckpointWeights(directory: checkpoint)
            return try ExportRunner.inputFingerprints(directory: checkpoint, weights: weights).first {
                $0.name == "tokenizer.json"
            }?.fingerprint
        }
        #expect(try fingerprint("<think>") != fingerprint("<thonk>"))
    }

    @Test("a weights index is fingerprinted whole: one byte changed between the sampled windows changes its key input")
    func wholeIndex() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(shardBytes: 4096)
        let index = checkpoint.appendingPathComponent("model.safetensors.index.json")
        var object = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: index)) as? [String: Any])
        var metadata = object["metadata"] as? [String: Any] ?? [:]
        // Sorted keys put this note first, past the first window and over the gaps of the sampled ones.
        metadata["note"] = String(repeating: "x", count: BuildKey.sampleCount * BuildKey.sampleBytes * 2)
        object["metadata"] = metadata
        var bytes = [UInt8](try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
        func fingerprint() throws -> String? {
            try Data(bytes).write(to: index)
            let weights = try CheckpointWeights(directory: checkpoint)
            return try ExportRunner.inputFingerprints(directory: checkpoint, weights: weights).first {
                $0.name == "model.safetensors.index.json"
            }?.fingerprint
        }
        let before = try fingerprint()
        let offset = BuildKey.sampleBytes + 10
        #expect(bytes[offset] == UInt8(ascii: "x"))
        bytes[offset] = UInt8(ascii: "y")
        #expect(try fingerprint() != before)
    }

    @Test("a missing file is a read error naming it")
    func missingFile() throws {
        let url = try Fixtures.temporaryDirectory().appendingPathComponent("absent.safetensors")
        #expect(throws: BundleError.readFailed(path: url.path, reason: "no such file or directory")) {
            try BuildKey.fingerprint(of: url)
        }
    }

    /// The plan of a tiny qwen2 config, with `configure` applied to its options.
    private func tinyPlan(_ configure: (inout ExportOptions) -> Void = { _ in }) throws -> ExportPlan {
        var options = ExportOptions(model: try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig()).path)
        options.experimental = true
        options.computePrecision = .float16
        options.compression = .named("4bit_weight_palettized_group32")
        configure(&options)
        return try ExportPlan.make(options: options, resolver: try Fixtures.resolver())
    }

    @Test("every input of the export key changes it; the files' order does not")
    func exportKeyInputs() throws {
        let files: [(name: String, fingerprint: String)] = [("a.safetensors", "10:0000000a"), ("b.json", "2:0000000b")]
        func key(
            _ plan: ExportPlan, files: [(name: String, fingerprint: String)] = files, seed: UInt64? = nil,
            clamp: Bool = false, calibration: String? = nil
        ) -> String {
            BuildKey.export(
                plan: plan, fileFingerprints: files, syntheticSeed: seed, allowClamp: clamp, calibration: calibration)
        }
        let plan = try tinyPlan()
        let base = key(plan)
        #expect(base.count == 64)
        #expect(key(try tinyPlan()) == base)
        #expect(key(plan, files: files.reversed()) == base)

        let compression = try Fixtures.temporaryDirectory().appendingPathComponent("six.json")
        try Data(
            #"""
            {"schema": "exporter.compression/1", "name": "4bit_weight_palettized_group32",
             "rules": [{"match": "*norm.weight", "mode": "keep"}],
             "default": {"mode": "palettize", "bits": 6, "granularity": "per_grouped_channel", "group_size": 32}}
            """#.utf8
        ).write(to: compression)
        // The shipped config under another name: the same schemes, but the manifest records the name.
        let renamed = compression.deletingLastPathComponent().appendingPathComponent("renamed.json")
        let shipped = try String(
            contentsOf: Fixtures.presetsDirectory.appendingPathComponent(
                "compression/4bit_weight_palettized_group32.json"),
            encoding: .utf8)
        try Data(
            shipped.replacingOccurrences(
                of: #""name": "4bit_weight_palettized_group32""#, with: #""name": "renamed""#
            ).utf8
        ).write(to: renamed)
        let variants: [(String, String)] = [
            ("config name", key(try tinyPlan { $0.compression = .file(renamed) })),
            ("context", key(try tinyPlan { $0.contextLength = 256 })),
            ("precision", key(try tinyPlan { $0.computePrecision = .float32 })),
            ("platform", key(try tinyPlan { $0.platform = .macOS })),
            ("output name", key(try tinyPlan { $0.outputName = "Other" })),
            ("group size", key(try tinyPlan { $0.compression = .named("4bit_weight_palettized_group8") })),
            ("bits", key(try tinyPlan { $0.compression = .file(compression) })),
            ("search", key(try tinyPlan { $0.paletteSearch = .thorough })),
            ("clamp", key(plan, clamp: true)),
            ("calibration", key(plan, calibration: "1024:89abcdef")),
            ("synthetic", key(plan, seed: 7)),
            ("file", key(plan, files: [files[0], ("b.json", "2:0000000c")])),
        ]
        for (input, changed) in variants { #expect(changed != base, "\(input) leaves the key unchanged") }
        #expect(key(plan, seed: 7) != key(plan, seed: 8))
        #expect(Set(variants.map(\.1)).count == variants.count)
    }

    @Test("every field of the device entry and the deployment version change the compiled key")
    func compiledKeyInputs() throws {
        let device = CompileFixture.wide
        func key(_ edit: (inout DeviceArchitecture) -> Void = { _ in }, bundle: String = "k", version: String = "18.0")
            -> String
        {
            var changed = device
            edit(&changed)
            return BuildKey.compiled(bundleKey: bundle, device: changed, minimumDeploymentVersion: version)
        }
        let base = key()
        #expect(key() == base)
        let variants: [(String, String)] = [
            ("bundle", key(bundle: "other")),
            ("version", key(version: "18.1")),
            ("id", key { $0.id = "t1b" }),
            ("platform", key { $0.platform = .visionOS }),
            ("chip", key { $0.chip = "Test B" }),
            ("ahead of time", key { $0.aheadOfTime = false }),
            ("RAM", key { $0.ramBytes = 2 << 30 }),
            ("app limit", key { $0.appMemoryLimitBytes = 2_000_001 }),
            ("increased limit", key { $0.increasedMemoryLimitBytes = nil }),
            ("entitlements", key { $0.entitlements = [] }),
            ("region budget", key { $0.regionBudgetBytes = 1_600_001 }),
            ("page size", key { $0.pageSize = 16_384 }),
            // Not read by the compiler, but recorded in the artifact's manifest.
            ("products", key { $0.products = ["Another phone"] }),
            ("estimates", key { $0.estimates = ["page_size"] }),
        ]
        for (input, changed) in variants { #expect(changed != base, "\(input) leaves the key unchanged") }
        #expect(Set(variants.map(\.1)).count == variants.count)
    }
}
