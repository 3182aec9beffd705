import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("portable bundle")
struct BundleRoundTripTests {
    private func export(
        _ checkpoint: URL, to output: URL, compression: CompressionChoice = .automatic,
        precision: ComputePrecision = .float16,
        overwrite: Bool = false, faults: FaultInjector? = nil
    ) throws -> ExportResult {
        let plan = try Fixtures.plan(checkpoint, compression: compression, precision: precision)
        var settings = ExportSettings(outputDirectory: output)
        settings.overwrite = overwrite
        settings.faults = faults
        return try ExportRunner.run(plan, settings: settings)
    }

    private func sqnr(_ source: [Float], _ decoded: [Float]) -> Double {
        var signal = 0.0
        var noise = 0.0
        for (a, b) in zip(source, decoded) {
            let reference = Double(Float(Float16(a)))
            signal += reference * reference
            noise += (reference - Double(b)) * (reference - Double(b))
        }
        return noise == 0 ? .infinity : 10 * log10(signal / noise)
    }

    @Test("every tensor reads back within the SQNR the manifest claims")
    func roundTrip() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let output = try Fixtures.temporaryDirectory()
        let result = try export(checkpoint, to: output)
        #expect(result.bundleURL.path == output.path + "/tiny/Tiny.aimodel")
        let reader = try BundleReader(url: result.bundleURL)
        let weights = try CheckpointWeights(directory: checkpoint)
        #expect(reader.manifest.tensors.count == 1 + 2 * 12 + 1)
        for tensor in reader.manifest.tensors {
            var source = [Float](repeating: 0, count: tensor.shape.reduce(1, *))
            try source.withUnsafeMutableBufferPointer { try weights.readFloat(tensor.name, into: $0) }
            let decoded = try reader.dequantize(tensor.name)
            let measured = sqnr(source, decoded)
            if let claimed = tensor.sqnrDB {
                #expect(measured >= claimed - 0.01, "\(tensor.name): \(measured) dB < claimed \(claimed) dB")
                #expect(claimed > 5)
            } else {
                #expect(tensor.compression.mode == .keep)
                #expect(measured == .infinity, "\(tensor.name) should be exact")
            }
        }
        let manifest = reader.manifest
        #expect(manifest.kind == "bundle")
        #expect(manifest.model.weights == "checkpoint")
        #expect(manifest.model.source.kind == "directory")
        #expect(manifest.model.source.files.map(\.name) == ["model.safetensors"])
        #expect(manifest.tokenizer?.reasoningMarker == "<think>")
        #expect(manifest.tokenizer?.defaultResponseTokens == 2048)
        #expect(manifest.tokenizer?.files == ["tokenizer/tokenizer.json"])
        #expect(manifest.files.map(\.path) == ["config.json", "graph.json", "tokenizer/tokenizer.json", "weights.bin"])
        // The checkpoint's config, byte for byte.
        #expect(
            try Data(contentsOf: result.bundleURL.appendingPathComponent("config.json"))
                == (try Data(contentsOf: checkpoint.appendingPathComponent("config.json"))))
        let weightsFile = try #require(manifest.files.first { $0.path == "weights.bin" })
        #expect(weightsFile.bytes == manifest.sizes.estimatedBundleBytes)
        #expect(reader.graph.architecture == "qwen2")
        #expect(reader.graph.attention.qkvBias)
        #expect(reader.graph.shapes.kvCachePerLayer == [2, 512, 16])
    }

    @Test("LUT and indices sit where FORMAT.md says, packed as it says")
    func layoutAsSpecified() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        let output = try Fixtures.temporaryDirectory()
        let result = try export(checkpoint, to: output, compression: .named("4bit_weight_palettized_group8"))
        let manifest = result.manifest
        let tensor = try #require(manifest.tensors.first { $0.name == "model.layers.1.mlp.down_proj.weight" })
        #expect(tensor.compression == .palettize(bits: 4, groupSize: 8))
        #expect(tensor.parts.map(\.kind) == ["lut", "indices"])
        let file = try Data(contentsOf: result.bundleURL.appendingPathComponent("weights.bin"))
        #expect(Array(file.prefix(8)) == Array("EXWEIGHT".utf8))
        #expect(file.count % 64 == 0)
        let lutPart = tensor.parts[0]
        let indexPart = tensor.parts[1]
        #expect(lutPart.offset % 64 == 0 && indexPart.offset % 64 == 0)
        #expect(lutPart.bytes == 8 * 16 * 2)  // 64 rows / group 8 = 8 groups of 16 float16 entries
        #expect(indexPart.bytes == 64 * 128 / 2)
        // Recompute the palette from the checkpoint and compare the stored bytes.
        let weights = try CheckpointWeights(directory: checkpoint)
        var values = [Float16](repeating: 0, count: 64 * 128)
        try values.withUnsafeMutableBufferPointer { _ = try weights.readFloat16(tensor.name, into: $0) }
        let palette = try values.withUnsafeBufferPointer {
            try Palettizer.palettize(
                $0, rows: 64, columns: 128, spec: PaletteSpec(bits: 4, granularity: .perGroupedChannel(groupSize: 8)))
        }
        let storedLUT = Array(file[lutPart.offset..<lutPart.offset + lutPart.bytes])
        #expect(storedLUT == palette.lut.withUnsafeBytes { Array($0) })
        let storedIndices = Array(file[indexPart.offset..<indexPart.offset + indexPart.bytes])
        #expect(storedIndices == palette.packedIndices)
        // Element 1 of row 9 (group 1): high nibble of byte (9·128 + 1) / 2.
        let index = Int(storedIndices[(9 * 128 + 1) / 2] >> 4)
        let entry = palette.lut[1 * 16 + index]
        let decoded = try BundleReader(url: result.bundleURL).dequantize(tensor.name)
        #expect(decoded[9 * 128 + 1] == Float(entry))
    }

    @Test("an index stream ending mid-byte keeps its last byte: parts sized as the stored bytes, each 64-aligned")
    func indexStreamEndingMidByte() {
        let spec = TensorSpec(name: "w", shape: [3, 5], role: .mlp, layer: 0)
        let scheme = CompressionScheme.palettize(bits: 3, groupSize: nil)
        let tensor = PlannedTensor(
            spec: spec, scheme: scheme, rule: "default", storedBytes: scheme.storedBytes(for: spec, precision: .float16)
        )
        // One LUT of 8 float16 entries, and 15 indices of 3 bits (45 bits) in 6 bytes.
        #expect(tensor.storedBytes == 16 + 6)
        let layout = WeightsFileLayout(tensors: [tensor, tensor], precision: .float16)
        #expect(layout.parts.map { $0.map(\.kind) } == [["lut", "indices"], ["lut", "indices"]])
        #expect(layout.parts.map { $0.map(\.dtype) } == [["float16", "uint3"], ["float16", "uint3"]])
        #expect(layout.parts.map { $0.map(\.bytes) } == [[16, 6], [16, 6]])
        #expect(layout.parts.map { $0.map(\.offset) } == [[64, 128], [192, 256]])
        #expect(layout.fileBytes == 320)
    }

    @Test("the same inputs give byte-identical bundles")
    func reproducible() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let first = try export(checkpoint, to: try Fixtures.temporaryDirectory())
        let second = try export(checkpoint, to: try Fixtures.temporaryDirectory())
        for path in ["manifest.json", "graph.json", "weights.bin", "tokenizer/tokenizer.json"] {
            let a = try Data(contentsOf: first.bundleURL.appendingPathComponent(path))
            let b = try Data(contentsOf: second.bundleURL.appendingPathComponent(path))
            #expect(a == b, "\(path) differs")
        }
        let manifest = try String(contentsOf: first.bundleURL.appendingPathComponent("manifest.json"), encoding: .utf8)
        #expect(!manifest.contains(checkpoint.path))
        #expect(!manifest.contains(NSTemporaryDirectory()))
    }

    @Test("a manifest written before 0.5.0, without the 'conversion' key, still opens")
    func manifestWithoutConversion() throws {
        let result = try export(try Fixtures.syntheticCheckpoint(), to: try Fixtures.temporaryDirectory())
        let url = result.bundleURL.appendingPathComponent("manifest.json")
        let text = try String(contentsOf: url, encoding: .utf8)
        let line = "  \"conversion\" : null,\n"
        #expect(text.components(separatedBy: line).count == 2)
        try Data(text.replacingOccurrences(of: line, with: "").utf8).write(to: url)
        let reader = try BundleReader(url: result.bundleURL)
        #expect(reader.manifest == result.manifest)
        #expect(reader.manifest.conversion == nil)
    }

    @Test("sharded and single-file checkpoints export identically")
    func sharded() throws {
        let single = try Fixtures.syntheticCheckpoint(seed: 3)
        let sharded = try Fixtures.syntheticCheckpoint(seed: 3, shardBytes: 40_000)
        #expect(
            FileManager.default.fileExists(atPath: sharded.appendingPathComponent("model.safetensors.index.json").path))
        let a = try export(single, to: try Fixtures.temporaryDirectory())
        let b = try export(sharded, to: try Fixtures.temporaryDirectory())
        let weightsA = try Data(contentsOf: a.bundleURL.appendingPathComponent("weights.bin"))
        let weightsB = try Data(contentsOf: b.bundleURL.appendingPathComponent("weights.bin"))
        #expect(weightsA == weightsB)
        #expect(b.manifest.model.source.files.count > 1)
        // The source files by name, each with its size.
        let names = b.manifest.model.source.files.map(\.name)
        #expect(names == names.sorted())
        for file in b.manifest.model.source.files {
            let attributes = try FileManager.default.attributesOfItem(
                atPath: sharded.appendingPathComponent(file.name).path)
            #expect(file.bytes == attributes[.size] as? Int)
        }
    }

    @Test(
        "float16 and float32 checkpoints, counted as float16 patterns (the int8 embedding streamed), give the same bytes"
    )
    func float16Patterns() throws {
        let half = try Fixtures.syntheticCheckpoint(seed: 5, dtype: .f16)
        let single = try Fixtures.syntheticCheckpoint(seed: 5, dtype: .f32)
        let plan = try Fixtures.plan(half)
        let halfSource = CheckpointWeightSource(weights: try CheckpointWeights(directory: half), outOfRange: .refuse)
        let singleSource = CheckpointWeightSource(
            weights: try CheckpointWeights(directory: single), outOfRange: .refuse)
        #expect(plan.tensors.allSatisfy { halfSource.storedPatterns($0.spec) == .float16 })
        // float32: converted to float16 patterns as it is read, never held whole.
        #expect(plan.tensors.allSatisfy { singleSource.storedPatterns($0.spec) == .float16 })
        #expect(
            plan.tensors.allSatisfy { singleSource.mayExceedFloat16($0.spec) && !halfSource.mayExceedFloat16($0.spec) })
        let embedding = try #require(plan.tensors.first { $0.spec.name == "model.embed_tokens.weight" })
        #expect(embedding.scheme == .int8PerTensor && TensorEncoder.streams(embedding, precision: .float16))
        for compression in [CompressionChoice.automatic, .named("4bit_weight_palettized_group8")] {
            let a = try export(half, to: try Fixtures.temporaryDirectory(), compression: compression)
            let b = try export(single, to: try Fixtures.temporaryDirectory(), compression: compression)
            let weightsA = try Data(contentsOf: a.bundleURL.appendingPathComponent("weights.bin"))
            let weightsB = try Data(contentsOf: b.bundleURL.appendingPathComponent("weights.bin"))
            #expect(weightsA == weightsB, "\(compression)")
            #expect(a.manifest.tensors.map(\.sqnrDB) == b.manifest.tensors.map(\.sqnrDB))
        }
    }

    @Test("--allow-clamp: values beyond float16 are clamped, streamed or not, and the manifest says where")
    func clamping() throws {
        for dtype in [TensorDType.bf16, .f32] {
            let checkpoint = try Fixtures.syntheticCheckpoint(seed: 9, dtype: dtype)
            try Fixtures.setValues([(0, 70_000), (5, -98_304)], of: "model.embed_tokens.weight", in: checkpoint)
            try Fixtures.setValues([(7, 1e5)], of: "model.layers.0.mlp.up_proj.weight", in: checkpoint)
            let plan = try Fixtures.plan(checkpoint)
            var settings = ExportSettings(outputDirectory: try Fixtures.temporaryDirectory())
            #expect(throws: CheckpointError.self) { try ExportRunner.run(plan, settings: settings) }
            settings.allowClamp = true
            let result = try ExportRunner.run(plan, settings: settings)
            #expect(
                result.manifest.warnings.filter { $0.contains("clamped") } == [
                    "tensor 'model.embed_tokens.weight': 2 values clamped to the float16 range (--allow-clamp)",
                    "tensor 'model.layers.0.mlp.up_proj.weight': 1 value clamped to the float16 range (--allow-clamp)",
                ], "\(dtype)")
            let reader = try BundleReader(url: result.bundleURL)
            let embedding = try reader.dequantize("model.embed_tokens.weight")
            // int8 per tensor: the scale is 65,504 / 127, the clamped values its extreme codes.
            #expect(embedding[0] == 127 * (65_504 / Float(127)) && embedding[5] == -embedding[0], "\(dtype)")
            let upProj = try reader.dequantize("model.layers.0.mlp.up_proj.weight")
            #expect(upProj[7] == upProj.max(), "\(dtype)")
        }
    }

    @Test("float32 and bfloat16 precisions store kept tensors exactly")
    func precisions() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        for precision in [ComputePrecision.float32, .bfloat16] {
            let result = try export(
                checkpoint, to: try Fixtures.temporaryDirectory(), compression: .named("none"), precision: precision)
            let reader = try BundleReader(url: result.bundleURL)
            let weights = try CheckpointWeights(directory: checkpoint)
            let name = "model.layers.0.mlp.up_proj.weight"
            var source = [Float](repeating: 0, count: 128 * 64)
            try source.withUnsafeMutableBufferPointer { try weights.readFloat(name, into: $0) }
            #expect(try reader.dequantize(name) == source)  // BF16 source: exact in float32 and bfloat16
            #expect(reader.manifest.kvCache.bytes == 2 * 2 * 2 * 16 * 512 * precision.bytesPerElement)
        }
    }

    @Test("an existing bundle is refused without overwrite, replaced with it")
    func overwrite() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let first = try export(checkpoint, to: output)
        #expect(throws: BundleError.outputExists(path: first.bundleURL.path)) { try export(checkpoint, to: output) }
        let second = try export(checkpoint, to: output, overwrite: true)
        #expect(second.bundleURL == first.bundleURL)
        _ = try BundleReader(url: second.bundleURL)
        let leftovers = try FileManager.default.contentsOfDirectory(
            atPath: first.bundleURL.deletingLastPathComponent().path)
        #expect(leftovers == ["Tiny.aimodel"])
    }

    @Test("a write failing at any step leaves no bundle, keeps the previous one, and cleans up")
    func faultSweep() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let good = try export(checkpoint, to: output)
        // Counted on a replacement, as every failing run below is one.
        let counter = FaultInjector(failAtOperation: Int.max)
        _ = try export(checkpoint, to: output, overwrite: true, faults: counter)
        let goodManifest = try Data(contentsOf: good.bundleURL.appendingPathComponent("manifest.json"))
        let operations = counter.operations
        #expect(operations > 5)
        for failing in 1...operations {
            let faults = FaultInjector(failAtOperation: failing)
            #expect(throws: BundleError.self) { try export(checkpoint, to: output, overwrite: true, faults: faults) }
            let folder = good.bundleURL.deletingLastPathComponent()
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: folder.path) == ["Tiny.aimodel"],
                "operation \(failing)")
            #expect(try Data(contentsOf: good.bundleURL.appendingPathComponent("manifest.json")) == goodManifest)
            _ = try BundleReader(url: good.bundleURL)
        }
        let fresh = try Fixtures.temporaryDirectory()
        // A first export creates the model's folder, and has nothing to move aside.
        let freshCounter = FaultInjector(failAtOperation: Int.max)
        _ = try export(checkpoint, to: fresh, faults: freshCounter)
        try FileManager.default.removeItem(at: fresh.appendingPathComponent("tiny"))
        for failing in 1...freshCounter.operations {
            #expect(throws: BundleError.self) {
                try export(checkpoint, to: fresh, faults: FaultInjector(failAtOperation: failing))
            }
            let children =
                (try? FileManager.default.contentsOfDirectory(atPath: fresh.appendingPathComponent("tiny").path)) ?? []
            #expect(children.isEmpty, "operation \(failing) left \(children)")
            try? FileManager.default.removeItem(at: fresh.appendingPathComponent("tiny"))
        }
    }

    @Test("a corrupted weights file fails the reader's checks, naming the file")
    func corruption() throws {
        let result = try export(try Fixtures.syntheticCheckpoint(), to: try Fixtures.temporaryDirectory())
        let weightsURL = result.bundleURL.appendingPathComponent("weights.bin")
        var bytes = try Data(contentsOf: weightsURL)
        bytes[200] ^= 0xFF
        try bytes.write(to: weightsURL)
        #expect(throws: BundleError.self) { try BundleReader(url: result.bundleURL) }
        do {
            _ = try BundleReader(url: result.bundleURL)
        } catch let error as BundleError {
            #expect(error.description.hasPrefix("'weights.bin': CRC-32 is "))
        }
        try bytes.prefix(bytes.count - 64).write(to: weightsURL)
        do {
            _ = try BundleReader(url: result.bundleURL)
        } catch let error as BundleError {
            #expect(error.description.hasPrefix("'weights.bin': size is "))
        }
    }

    @Test("a last part of 80 bytes: the weights file is zero-padded to the alignment, and its header says so")
    func paddedWeightsFile() throws {
        // hidden_size 40: the final norm, the last tensor (the head is tied), holds 40 float16.
        let checkpoint = try Fixtures.syntheticCheckpoint(overrides: ["hidden_size": 40])
        let plan = try Fixtures.plan(checkpoint)
        let layout = plan.weightsLayout
        let last = try #require(layout.parts.last?.last)
        #expect(plan.tensors.last?.spec.name == "model.norm.weight")
        #expect(last.bytes == 80)
        #expect(last.offset % 64 == 0)
        #expect(layout.fileBytes == last.offset + 128)
        let bundle = try ExportRunner.run(
            plan, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory())
        )
        .bundleURL
        let bytes = [UInt8](try Data(contentsOf: bundle.appendingPathComponent("weights.bin")))
        #expect(bytes.count == layout.fileBytes)
        let declared = bytes[24..<32].enumerated().reduce(0) { $0 | Int($1.element) << (8 * $1.offset) }
        #expect(declared == layout.fileBytes)
        #expect(bytes[(last.offset + 80)...].allSatisfy { $0 == 0 })
        let reader = try BundleReader(url: bundle)
        #expect(reader.manifest.files.first { $0.path == "weights.bin" }?.bytes == layout.fileBytes)
    }

    @Test("the free-space check: weights, config and tokenizer, 64 KiB and 1 KiB a tensor; one byte less is refused")
    func diskBoundary() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let plan = try Fixtures.plan(checkpoint)
        let tokenizer = try TokenizerFiles(directory: checkpoint)
        let copiedBytes = try ["config.json", "tokenizer.json"].map {
            try #require(
                try FileManager.default.attributesOfItem(atPath: checkpoint.appendingPathComponent($0).path)[.size]
                    as? Int)
        }
        .reduce(0, +)
        #expect(ExportRunner.copiedFileBytes(of: plan, tokenizer: tokenizer) == copiedBytes)
        let needed = plan.estimatedBundleBytes(copiedFileBytes: copiedBytes)
        #expect(needed == plan.weightsLayout.fileBytes + copiedBytes + 65_536 + plan.tensors.count * 1024)
        let output = try Fixtures.temporaryDirectory()
        try ExportRunner.checkDisk(plan, tokenizer: tokenizer, outputDirectory: output, available: needed)
        #expect(
            throws: ResourceError.notEnoughDisk(
                directory: output.standardizedFileURL.path, neededBytes: needed, availableBytes: needed - 1)
        ) { try ExportRunner.checkDisk(plan, tokenizer: tokenizer, outputDirectory: output, available: needed - 1) }
    }
}
