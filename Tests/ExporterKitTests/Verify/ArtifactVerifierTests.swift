import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("artifact verifier")
struct ArtifactVerifierTests {
    /// A fresh 4-bit bundle of a tiny qwen3 (group 8), with its checkpoint.
    private func bundle() throws -> (bundle: URL, checkpoint: URL) {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        let plan = try Fixtures.plan(checkpoint, compression: .named("4bit_weight_palettized_group8"))
        let result = try ExportRunner.run(
            plan, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory()))
        return (result.bundleURL, checkpoint)
    }

    private func manifest(_ bundle: URL) throws -> Manifest {
        let url = bundle.appendingPathComponent("manifest.json")
        return try Manifest.decoded(from: Data(contentsOf: url), path: url.path)
    }

    /// Rewrites `weights.bin` through `edit` and records its new CRC-32, so only the format checks can object.
    private func editWeights(_ bundle: URL, _ edit: (inout [UInt8], Manifest) throws -> Void) throws {
        let url = bundle.appendingPathComponent("weights.bin")
        var bytes = [UInt8](try Data(contentsOf: url))
        var manifest = try manifest(bundle)
        try edit(&bytes, manifest)
        try Data(bytes).write(to: url)
        let index = try #require(manifest.files.firstIndex { $0.path == "weights.bin" })
        manifest.files[index].crc32 = BundleWriter.hex(bytes.withUnsafeBytes { CRC32.checksum($0) })
        try Data(try manifest.canonicalJSON()).write(to: bundle.appendingPathComponent("manifest.json"))
    }

    @Test("a fresh bundle passes every check and matches its checkpoint")
    func clean() throws {
        let (bundle, checkpoint) = try bundle()
        let report = ArtifactVerifier.verify(
            try LoadedArtifact(url: bundle), against: try CheckpointWeights(directory: checkpoint))
        #expect(report.failures == [])
        #expect(report.filesChecked == 4)
        #expect(report.tensorsDecoded == 1 + 2 * 11 + 1)
        #expect(report.tensorsCompared == report.tensorsDecoded)
        #expect(report.measuredSQNR["model.norm.weight"] == .infinity)
        let tensor = try #require(try manifest(bundle).tensors.first { $0.name == "model.layers.0.mlp.up_proj.weight" })
        #expect(abs((report.measuredSQNR[tensor.name] ?? 0) - (tensor.sqnrDB ?? 0)) < 0.01)
        // A missing file fails, and had nothing to recompute: not counted as checked.
        try FileManager.default.removeItem(at: bundle.appendingPathComponent("weights.bin"))
        let missing = ArtifactVerifier.verify(try LoadedArtifact(url: bundle))
        #expect(missing.failures.first == VerificationFailure("'weights.bin'", "missing"))
        #expect(missing.filesChecked == 3)
    }

    @Test("an artifact exchanged while it is verified is told apart from a broken one: its manifest changed")
    func replacedWhileVerified() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(overrides: ["num_hidden_layers": 2])
        let bundleURL = try Fixtures.export(checkpoint, contextLength: 512)
        let newer = try Fixtures.export(checkpoint, contextLength: 256)
        let loaded = try LoadedArtifact(url: bundleURL)
        #expect(!loaded.wasReplaced)
        // Exported again to the same bytes (reproducible): other files, which an export between
        // may have exchanged in and out while they were read.
        var settings = ExportSettings(
            outputDirectory: bundleURL.deletingLastPathComponent().deletingLastPathComponent())
        settings.overwrite = true
        _ = try ExportRunner.run(try Fixtures.plan(checkpoint, contextLength: 512), settings: settings)
        #expect(try Data(contentsOf: loaded.manifestURL) == loaded.manifestData)
        #expect(loaded.wasReplaced)
        let reloaded = try LoadedArtifact(url: bundleURL)
        #expect(!reloaded.wasReplaced)
        try Fixtures.exchange(bundleURL, newer)
        // The old manifest against the new files: failures that are not the artifact's.
        #expect(!ArtifactVerifier.verify(loaded).passed)
        #expect(loaded.wasReplaced)
        #expect(ArtifactVerifier.verify(try LoadedArtifact(url: bundleURL)).passed)
        try FileManager.default.removeItem(at: bundleURL)
        #expect(loaded.wasReplaced)
    }

    @Test("a manifest that contradicts its graph: a renamed tensor, a reshaped one, an unknown platform or kind")
    func contradictions() throws {
        let (bundle, _) = try bundle()
        let original = try manifest(bundle)
        func failures(_ edit: (inout Manifest) -> Void) throws -> [String] {
            var edited = original
            edit(&edited)
            try Data(try edited.canonicalJSON()).write(to: bundle.appendingPathComponent("manifest.json"))
            return ArtifactVerifier.verify(try LoadedArtifact(url: bundle)).failures.map(\.description)
        }
        let kProj = "model.layers.0.self_attn.k_proj.weight"
        #expect(
            try failures { m in
                let index = m.tensors.firstIndex { $0.name == kProj }!
                m.tensors[index].name = "model.layers.0.self_attn.k_prj.weight"
            } == [
                "tensor '\(kProj)': missing from the manifest; the graph's qwen3 layout has it",
                "tensor 'model.layers.0.self_attn.k_prj.weight': not in the graph's qwen3 layout",
            ])
        // The same element count under another shape.
        #expect(
            try failures { m in m.tensors[0].shape = [128, 128] }
                == ["tensor 'model.embed_tokens.weight': shape [128, 128], the graph's qwen3 layout implies [256, 64]"])
        #expect(
            try failures { m in m.platform = "android" } == [
                "'manifest.json': platform is 'android', expected one of: iOS, macOS"
            ])
        #expect(
            try failures { m in m.kind = "compiled" } == [
                "'manifest.json': kind is 'compiled' but there is no compiled section"
            ])

        // A record's own fields: its last group and its parts' dtypes.
        #expect(
            try failures { m in
                let index = m.tensors.firstIndex { $0.name == kProj }!
                m.tensors[index].lastGroupRows = 3
                m.tensors[index].parts[0].dtype = "float32"
            } == [
                "tensor '\(kProj)': last_group_rows is 3, expected null",
                "tensor '\(kProj)': lut has dtype float32, expected float16",
            ])
        #expect(try failures { _ in } == [])

        #expect(ArtifactVerifier.verify(try LoadedArtifact(url: bundle)).tensorListChecked)
    }

    @Test("tensors read in blocks of any size give the whole-tensor report, faults named by their element")
    func blocks() throws {
        let (bundle, checkpointURL) = try bundle()
        let embedding = "model.embed_tokens.weight"
        var corrupted = 0
        try editWeights(bundle) { bytes, manifest in
            let tensor = try #require(manifest.tensors.first { $0.name == embedding })
            #expect(tensor.compression == .int8PerTensor)
            let values = try #require(tensor.parts.first { $0.kind == "values" })
            corrupted = values.bytes - 3
            bytes[values.offset + corrupted] = 0x80
        }
        let artifact = try LoadedArtifact(url: bundle)
        let checkpoint = try CheckpointWeights(directory: checkpointURL)
        let whole = ArtifactVerifier.verify(artifact, against: checkpoint, blockElements: 1 << 30)
        let failures = whole.failures.map(\.description)
        #expect(failures.first == "tensor '\(embedding)': int8 value \(corrupted) is -128, outside [-127, 127]")
        #expect(failures.count == 2 && failures[1].hasPrefix("tensor '\(embedding)': SQNR "))
        #expect(whole.tensorsCompared == whole.tensorsDecoded)
        for blockElements in [1, 5, 100, ArtifactVerifier.blockElements] {
            let blocks = ArtifactVerifier.verify(artifact, against: checkpoint, blockElements: blockElements)
            #expect(blocks.failures == whole.failures, "blocks of \(blockElements)")
            #expect(blocks.measuredSQNR == whole.measuredSQNR, "blocks of \(blockElements)")
            #expect(blocks.tensorsDecoded == whole.tensorsDecoded)
        }
    }

    @Test("tensors checked by any number of workers give the same report, failures in manifest order")
    func workers() throws {
        let (bundle, checkpointURL) = try bundle()
        let names = [
            "model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight", "model.layers.1.self_attn.o_proj.weight",
        ]
        try editWeights(bundle) { bytes, manifest in
            // An int8 -128, and two LUTs out of order: faults found while decoding.
            let values = try #require(
                manifest.tensors.first { $0.name == names[0] }?.parts.first { $0.kind == "values" })
            bytes[values.offset + 7] = 0x80
            for name in names.dropFirst() {
                let lut = try #require(manifest.tensors.first { $0.name == name }?.parts[0])
                for k in 0..<2 { bytes.swapAt(lut.offset + k, lut.offset + 2 + k) }
            }
        }
        let artifact = try LoadedArtifact(url: bundle)
        let checkpoint = try CheckpointWeights(directory: checkpointURL)
        let one = ArtifactVerifier.verify(artifact, against: checkpoint, workers: 1)
        let failed = one.failures.map(\.subject)
        #expect(failed.first == "tensor '\(names[0])'" && failed.last == "tensor '\(names[2])'", "\(failed)")
        let order = try manifest(bundle).tensors.map { "tensor '\($0.name)'" }
        #expect(failed.map { order.firstIndex(of: $0) ?? -1 } == failed.map { order.firstIndex(of: $0) ?? -1 }.sorted())
        #expect(one.structuralFailures == 3)
        for workers in [2, 3, 8] {
            let many = ArtifactVerifier.verify(artifact, against: checkpoint, workers: workers)
            #expect(many.failures == one.failures, "\(workers) workers")
            #expect(many.structuralFailures == one.structuralFailures)
            #expect(many.measuredSQNR == one.measuredSQNR)
            #expect(many.tensorsDecoded == one.tensorsDecoded && many.tensorsCompared == one.tensorsCompared)
        }
    }

    @Test("format rules the checksums cannot see: header, padding, LUT order")
    func formatRules() throws {
        let (bundle, _) = try bundle()
        let name = "model.layers.0.mlp.up_proj.weight"
        try editWeights(bundle) { bytes, manifest in
            let tensor = try #require(manifest.tensors.first { $0.name == name })
            let lut = tensor.parts[0]
            // Swap the first two float16 entries of group 0: no longer ascending.
            for k in 0..<2 { bytes.swapAt(lut.offset + k, lut.offset + 2 + k) }
            // A non-zero byte in the padding after q_norm (32 bytes, padded to 64).
            let norm = try #require(
                manifest.tensors.first { $0.name == "model.layers.0.self_attn.q_norm.weight" }?.parts[0])
            #expect(norm.bytes == 32)
            bytes[norm.offset + norm.bytes + 5] = 1
            // The header's alignment, and the first of its reserved bytes.
            bytes[12] = 128
            bytes[32] = 7
        }
        let report = ArtifactVerifier.verify(try LoadedArtifact(url: bundle))
        #expect(
            report.failures.map(\.description) == [
                "'weights.bin': header alignment is 128, expected 64",
                "'weights.bin': header bytes 32..<64 are not zero",
                "'weights.bin': padding before model.layers.0.self_attn.k_norm.weight values (bytes \(try partEnd(bundle, qNorm))..<"
                    + "\(try partEnd(bundle, qNorm) + 32)) is not zero",
                "tensor '\(name)': LUT of group 0 is not sorted ascending",
            ])
    }

    private let qNorm = "model.layers.0.self_attn.q_norm.weight"

    private func partEnd(_ bundle: URL, _ name: String) throws -> Int {
        let part = try #require(try manifest(bundle).tensors.first { $0.name == name }?.parts[0])
        return part.offset + part.bytes
    }

    @Test("a part moved out of its place or past the end is named with its tensor")
    func placement() throws {
        let (bundle, _) = try bundle()
        var manifest = try manifest(bundle)
        let index = try #require(manifest.tensors.firstIndex { $0.name == "model.layers.1.mlp.down_proj.weight" })
        manifest.tensors[index].parts[1].offset += 64
        let last = manifest.tensors.count - 1
        manifest.tensors[last].parts[0].offset = 1 << 30
        try Data(try manifest.canonicalJSON()).write(to: bundle.appendingPathComponent("manifest.json"))
        let failures = ArtifactVerifier.verify(try LoadedArtifact(url: bundle)).failures.map(\.description)
        let moved = manifest.tensors[index].parts[1].offset
        #expect(
            failures.contains(
                "tensor 'model.layers.1.mlp.down_proj.weight': indices at offset \(moved), expected \(moved - 64): parts follow "
                    + "each other in manifest order, each at the next multiple of 64"))
        #expect(
            failures.contains {
                $0.hasPrefix(
                    "tensor 'model.norm.weight': values at offset 1073741824, 128 bytes, runs past the end of 'weights.bin'"
                )
            })
    }

    @Test("a weights file that is a FIFO or missing is one failure, not one per part")
    func unusableWeightsFile() throws {
        for makeUnusable in [
            { (url: URL) in try FIFOFixture.make(at: url) },
            { (url: URL) in try FileManager.default.removeItem(at: url) },
        ] {
            let (bundle, _) = try bundle()
            try makeUnusable(bundle.appendingPathComponent("weights.bin"))
            let failures = ArtifactVerifier.verify(try LoadedArtifact(url: bundle)).failures.map(\.description)
            #expect(failures.count == 1)
            #expect(failures.first?.hasPrefix("'weights.bin': ") == true)
        }
    }

    @Test("a short weights file names its first part past the end and counts the others")
    func shortWeightsFile() throws {
        let (bundle, _) = try bundle()
        let manifest = try manifest(bundle)
        let url = bundle.appendingPathComponent("weights.bin")
        // Cut inside the last two tensors' parts: model.norm.weight and down_proj's indices.
        let norm = try #require(manifest.tensors.last?.parts[0])
        let down = try #require(manifest.tensors.dropLast().last?.parts.last)
        try Data(try Data(contentsOf: url).prefix(down.offset + 1)).write(to: url)
        let failures = ArtifactVerifier.verify(try LoadedArtifact(url: bundle)).failures.map(\.description)
        let pastEnd = failures.filter { $0.contains("past") }
        #expect(
            pastEnd == [
                "tensor '\(manifest.tensors.dropLast().last!.name)': indices at offset \(down.offset), \(down.bytes) bytes, "
                    + "runs past the end of 'weights.bin' (\(down.offset + 1) bytes)",
                "'weights.bin': 1 more part(s) run past its end",
            ])
        #expect(norm.offset > down.offset)
        // Nothing else about its size: measured over the parts that fit, the end of the parts
        // would name a size below the file's ("its parts end at …, so the file should be …").
        let size = try #require(manifest.files.first { $0.path == "weights.bin" }?.bytes)
        #expect(
            failures.filter { $0.hasPrefix("'weights.bin'") } == [
                "'weights.bin': size is \(down.offset + 1) bytes, the manifest says \(size)",
                "'weights.bin': header says \(size) bytes, the file has \(down.offset + 1)",
                "'weights.bin': 1 more part(s) run past its end",
            ])
    }

    @Test("int8 values of -128 and non-positive scales break the linear scheme's rules")
    func linearRules() {
        let tensor = Manifest.Tensor(
            name: "t", shape: [2, 2], role: "embedding", layer: nil, compression: .int8PerTensor, lastGroupRows: nil,
            rule: "ios-embedding", storedBytes: 8, parts: [], sqnrDB: nil)
        let problems = ArtifactVerifier.storedValueProblems(
            tensor, stored: ["scales": [0, 0, 0, 0], "values": [1, 0x80, 2, 3]])
        #expect(
            problems == [
                "scale 0 is 0.0, expected a positive finite number", "int8 value 1 is -128, outside [-127, 127]",
            ])
        let palette = Manifest.Tensor(
            name: "p", shape: [1, 3], role: "mlp", layer: 0, compression: .palettize(bits: 4, groupSize: nil),
            lastGroupRows: nil, rule: "default", storedBytes: 34, parts: [], sqnrDB: nil)
        #expect(
            ArtifactVerifier.storedValueProblems(palette, stored: ["indices": [0x21, 0x13]])
                == ["the unused high bits of the last index byte are not zero"])
        #expect(ArtifactVerifier.storedValueProblems(palette, stored: ["indices": [0x21, 0x03]]) == [])
    }
}
