import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("Checkpoint: synthetic weights")
struct CheckpointSyntheticWeightsTests {
    let generator = SyntheticWeights(seed: 2024)
    let name = "model.layers.0.mlp.up_proj.weight"
    let shape = [256, 1536]

    func values(_ generator: SyntheticWeights, _ name: String, _ shape: [Int]) -> [Float] {
        var values = [Float](repeating: 0, count: shape.reduce(1, *))
        values.withUnsafeMutableBufferPointer {
            generator.generate(name: name, shape: shape, elements: 0..<$0.count, into: $0)
        }
        return values
    }

    @Test("values do not depend on the chunking, and the float16 and bfloat16 forms round the same values")
    func chunkingIndependence() {
        let whole = values(generator, name, [16, 1536])
        for chunk in [1, 7, 1000, 65_536] {
            var pieces = [Float](repeating: 0, count: whole.count)
            pieces.withUnsafeMutableBufferPointer { buffer in
                var start = 0
                while start < buffer.count {
                    let end = min(start + chunk, buffer.count)
                    generator.generate(
                        name: name, shape: [16, 1536], elements: start..<end,
                        into: UnsafeMutableBufferPointer(rebasing: buffer[start..<end]))
                    start = end
                }
            }
            #expect(pieces.map(\.bitPattern) == whole.map(\.bitPattern), "chunk \(chunk)")
        }
        var halves = [Float16](repeating: 0, count: 5000)
        halves.withUnsafeMutableBufferPointer {
            generator.generate(name: name, shape: [16, 1536], elements: 1000..<6000, into: $0)
        }
        #expect(halves == whole[1000..<6000].map { Float16($0) })
        var bits = [UInt16](repeating: 0, count: 5000)
        bits.withUnsafeMutableBufferPointer {
            generator.generateBFloat16Bits(name: name, shape: [16, 1536], elements: 1000..<6000, into: $0)
        }
        #expect(bits == whole[1000..<6000].map { PrecisionConversion.bfloat16Bits($0) })
        #expect(generator.value(name: name, shape: [16, 1536], index: 4321) == whole[4321])
    }

    @Test("known answers: the values are pinned, so checkpoints reproduce across versions and platforms")
    func knownAnswers() {
        let first = (0..<4).map { generator.value(name: name, shape: shape, index: $0) }
        #expect(first.map(\.bitPattern) == KnownAnswers.upProj)
        #expect(SyntheticWeights.fnv1a("") == 0xCBF2_9CE4_8422_2325)
        #expect(SyntheticWeights.fnv1a("a") == 0xAF63_DC4C_8601_EC8C)
        #expect(SyntheticWeights.mix(0) == 0)
        #expect(SyntheticWeights.mix(1) == 0x5692_161D_100B_05E5)
    }

    @Test("a whole tensor is pinned, outliers included, and each element is the same alone as in a range")
    func wholeTensorPinned() {
        let whole = values(generator, name, shape)
        let checksum = whole.withUnsafeBytes { CRC32.checksum($0) }
        #expect(checksum == KnownAnswers.upProjChecksum, "\(checksum)")
        let outliers = whole.indices.filter { abs(whole[$0]) >= 1 }
        #expect(outliers.contains { $0 % 2 == 0 } && outliers.contains { $0 % 2 == 1 })
        for index in outliers + [0, 1, whole.count - 1] {
            // Alone, first and last of a range.
            for elements in [index..<(index + 1), index..<min(index + 2, whole.count), max(index - 1, 0)..<(index + 1)]
            {
                var part = [Float](repeating: 0, count: elements.count)
                part.withUnsafeMutableBufferPointer {
                    generator.generate(name: name, shape: shape, elements: elements, into: $0)
                }
                #expect(
                    part[index - elements.lowerBound].bitPattern == whole[index].bitPattern,
                    "element \(index) of \(elements)")
            }
        }
    }

    @Test("batches of every width and start give each element's own value, outliers included")
    func batchesEqualElements() {
        let profile = generator.profile(name: name, shape: shape)
        // Three batches, off their alignment, around the tensor's first outlier.
        let firstOutlier = (0..<(1 << 20)).first { abs(profile.value(at: $0)) >= 1 } ?? 0
        let start = max(0, firstOutlier - SyntheticWeights.batch - 17)
        let reference = (start..<(start + 3 * SyntheticWeights.batch)).map { Float(profile.value(at: $0)) }
        #expect(reference.contains { abs($0) >= 1 }, "the range holds an outlier")
        for width in [1, 2, 3, 5, 1023, SyntheticWeights.batch, reference.count] {
            var batched = [Float](repeating: .nan, count: reference.count)
            batched.withUnsafeMutableBufferPointer { buffer in
                for offset in stride(from: 0, to: buffer.count, by: width) {
                    let end = min(offset + width, buffer.count)
                    profile.fill(UnsafeMutableBufferPointer(rebasing: buffer[offset..<end]), from: start + offset)
                }
            }
            let mismatch = reference.indices.first { batched[$0].bitPattern != reference[$0].bitPattern }
            #expect(mismatch == nil, "width \(width): element \(start + (mismatch ?? 0))")
        }
    }

    @Test("--synthetic's source stores what torch_dtype (or dtype, newer transformers) says: bfloat16, else float16")
    func sourceStorage() throws {
        func storage(_ field: String) throws -> SourcePatterns {
            let json =
                #"{"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "#
                + #""num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "#
                + #""max_position_embeddings": 512"# + field + "}"
            return SyntheticWeightSource.storage(for: try ModelConfig(bytes: Array(json.utf8), path: "config.json"))
        }
        #expect(try storage(#", "torch_dtype": "bfloat16""#) == .bfloat16)
        #expect(try storage(#", "dtype": "bfloat16""#) == .bfloat16)
        #expect(try storage(#", "torch_dtype": "float16""#) == .float16)
        #expect(try storage(#", "torch_dtype": "float32""#) == .float16)
        #expect(try storage("") == .float16)
        // Every read agrees with the patterns: the float16 of a bfloat16 pattern, its float32.
        let source = SyntheticWeightSource(seed: 3, storage: .bfloat16)
        let spec = TensorSpec(name: name, shape: [16, 64], role: .mlp, layer: 0)
        var patterns = [UInt16](repeating: 0, count: 1024)
        var halves = [Float16](repeating: 0, count: 1024)
        var floats = [Float](repeating: 0, count: 1024)
        try patterns.withUnsafeMutableBufferPointer {
            try source.readStoredPatterns(spec, elements: 0..<1024, into: $0)
        }
        try halves.withUnsafeMutableBufferPointer { try source.readFloat16(spec, into: $0) }
        try floats.withUnsafeMutableBufferPointer { try source.readFloat(spec, into: $0) }
        #expect(source.storedPatterns(spec) == .bfloat16)
        #expect(patterns.map { Float16(PrecisionConversion.float(bfloat16Bits: $0)) } == halves)
        #expect(patterns.map { PrecisionConversion.float(bfloat16Bits: $0) } == floats)
        let expected = (0..<1024).map {
            PrecisionConversion.bfloat16Bits(SyntheticWeights(seed: 3).value(name: name, shape: [16, 64], index: $0))
        }
        #expect(patterns == expected)
    }

    @Test("the own logarithm agrees with libm")
    func logarithm() {
        for x in [1.0, 0.5, 1e-16, 0x1p-53, 0.999_999, 0.3, 0.70710678, 0.7071068] {
            #expect(
                abs(SyntheticWeights.naturalLogarithm(x) - Foundation.log(x)) <= 1e-11 * max(1, abs(Foundation.log(x))))
        }
    }

    @Test("the integer-to-double conversion without conversion instructions is exact below 2^53")
    func exactDouble() {
        var values: [UInt64] = [0, 1, 2, 0x000F_FFFF_FFFF_FFFF, 1 << 52, (1 << 52) + 1, (1 << 53) - 1, 2047]
        var state: UInt64 = 7
        for _ in 0..<1000 {
            state = SyntheticWeights.mix(state &+ 0x9E37_79B9_7F4A_7C15)
            values.append(state >> 11)
        }
        for value in values {
            #expect(SyntheticWeights.exactDouble(value) == Double(value), "\(value)")
        }
    }

    @Test("matrices are heavy-tailed with outliers, like real weights")
    func heavyTail() {
        let values = values(generator, name, shape).map(Double.init)
        let count = Double(values.count)
        let mean = values.reduce(0, +) / count
        let variance = values.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / count
        let fourth =
            values.reduce(0) { sum, value in
                let squared = (value - mean) * (value - mean)
                return sum + squared * squared
            } / count
        let kurtosis = fourth / (variance * variance)
        let outliers = values.filter { abs($0) > 1 }.count
        let medianMagnitude = values.map(abs).sorted()[values.count / 2]
        #expect(kurtosis > 30, "kurtosis \(kurtosis)")
        #expect((10...80).contains(outliers), "outliers \(outliers)")  // 1e-4 of 393,216 ≈ 39
        #expect(values.allSatisfy { abs($0) < 10 })
        // Laplace median |x| = b ln 2 with b = 0.8 / sqrt(1536) / sqrt(2).
        #expect(
            abs(medianMagnitude - 0.8 / 1536.0.squareRoot() / 2.0.squareRoot() * 0.6931) < 0.001, "\(medianMagnitude)")
    }

    @Test("norm weights sit near 1, biases are small, tensors and seeds differ")
    func kinds() {
        let norm = values(generator, "model.layers.0.input_layernorm.weight", [1536])
        #expect(abs(norm.reduce(0, +) / 1536 - 1) < 0.01)
        #expect(norm.allSatisfy { (0.5...1.5).contains($0) })
        let bias = values(generator, "model.layers.0.self_attn.q_proj.bias", [1536])
        #expect(bias.allSatisfy { abs($0) < 0.2 })
        #expect(values(generator, "a", [64, 64]) != values(generator, "b", [64, 64]))
        #expect(values(generator, "a", [64, 64]) != values(SyntheticWeights(seed: 2025), "a", [64, 64]))
        #expect(values(generator, "a", [64, 64]) == values(SyntheticWeights(seed: 2024), "a", [64, 64]))
    }
}

@Suite("Checkpoint: synthetic checkpoints")
struct CheckpointSyntheticCheckpointTests {
    let tensors: [(name: String, shape: [Int])] = [
        ("model.embed_tokens.weight", [64, 32]),
        ("model.layers.0.self_attn.q_proj.weight", [32, 32]),
        ("model.layers.0.self_attn.q_proj.bias", [32]),
        ("model.layers.0.input_layernorm.weight", [32]),
        ("model.norm.weight", [32]),
    ]

    @Test("writing a checkpoint takes its folder's lock exclusively: not while an export reads it")
    func writerLock() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try CheckpointFolderLock.holding(directory, .reading) {
            #expect(
                throws: CheckpointError.writeFailed(
                    path: directory.path, reason: "an export is reading the checkpoint there; wait for it to end")
            ) { try SyntheticCheckpoint.write(tensors: tensors, seed: 9, to: directory) }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    @Test("sharded and single-file synthetic checkpoints hold the same generated values")
    func shardedEqualsSingle() throws {
        let single = try Fixtures.temporaryDirectory()
        let sharded = try Fixtures.temporaryDirectory()
        defer {
            try? FileManager.default.removeItem(at: single)
            try? FileManager.default.removeItem(at: sharded)
        }
        let one = try SyntheticCheckpoint.write(tensors: tensors, seed: 9, to: single)
        #expect(one.files.map(\.lastPathComponent) == ["model.safetensors"])
        #expect(one.indexURL == nil)
        #expect(one.totalTensorBytes == 2 * (64 * 32 + 32 * 32 + 3 * 32))
        let many = try SyntheticCheckpoint.write(tensors: tensors, seed: 9, to: sharded, shardBytes: 3000)
        #expect(
            many.files.map(\.lastPathComponent)
                == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"])
        #expect(many.indexURL?.lastPathComponent == "model.safetensors.index.json")

        let a = try CheckpointWeights(directory: single)
        let b = try CheckpointWeights(directory: sharded)
        #expect(b.declaredTotalSize == one.totalTensorBytes)
        #expect(b.fileMetadata.values.allSatisfy { $0 == ["format": "pt"] })
        let values = try allValues(a)
        #expect(try allValues(b) == values)
        let generator = SyntheticWeights(seed: 9)
        for (name, shape) in tensors {
            let expected = (0..<shape.reduce(1, *)).map {
                PrecisionConversion.float(
                    bfloat16Bits: PrecisionConversion.bfloat16Bits(generator.value(name: name, shape: shape, index: $0))
                )
            }
            #expect(values[name] == expected, "\(name)")
        }
        // Same inputs, same bytes.
        let again = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: again) }
        try SyntheticCheckpoint.write(tensors: tensors, seed: 9, to: again, shardBytes: 3000)
        for file in many.files + [many.indexURL].compactMap({ $0 }) {
            #expect(
                try Data(contentsOf: file) == Data(contentsOf: again.appendingPathComponent(file.lastPathComponent)))
        }
    }

    @Test("a shard holds tensors up to exactly the shard size; the next tensor starts a new one")
    func shardBoundary() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // Three bf16 tensors of 8 bytes in shards of 16: a and b fill the first exactly.
        let result = try SyntheticCheckpoint.write(
            tensors: [("a", [4]), ("b", [4]), ("c", [4])], seed: 1, to: directory, shardBytes: 16)
        #expect(
            result.files.map(\.lastPathComponent)
                == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"])
        #expect(try SafetensorsFile(url: result.files[0]).tensorNames == ["a", "b"])
        #expect(try SafetensorsFile(url: result.files[1]).tensorNames == ["c"])
    }

    @Test("writes F16 and F32 too, and refuses other dtypes, bad shard sizes and earlier weights")
    func options() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try SyntheticCheckpoint.write(tensors: tensors, dtype: .f32, seed: 1, to: directory)
        let f32 = try CheckpointWeights(directory: directory)
        #expect(try f32.tensor(named: "model.norm.weight").dtype == .f32)
        var norm = [Float](repeating: 0, count: 32)
        try norm.withUnsafeMutableBufferPointer { try f32.readFloat("model.norm.weight", into: $0) }
        #expect(norm[5] == SyntheticWeights(seed: 1).value(name: "model.norm.weight", shape: [32], index: 5))

        let existing = directory.appendingPathComponent("model.safetensors").path
        #expect(throws: BundleError.outputExists(path: existing)) {
            try SyntheticCheckpoint.write(tensors: tensors, dtype: .f16, seed: 1, to: directory)
        }
        try SyntheticCheckpoint.write(tensors: tensors, dtype: .f16, seed: 1, to: directory, replacingExisting: true)
        #expect(try CheckpointWeights(directory: directory).tensor(named: "model.norm.weight").dtype == .f16)

        #expect(throws: CheckpointError.unsupportedSyntheticDType(.i8)) {
            try SyntheticCheckpoint.write(tensors: tensors, dtype: .i8, seed: 1, to: directory)
        }
        #expect(
            throws: CheckpointError.invalidTensorEntry(
                path: directory.path, tensor: "x", reason: "invalid shape [2, -1]")
        ) { try SyntheticCheckpoint.write(tensors: [("x", [2, -1])], seed: 1, to: directory, replacingExisting: true) }
        #expect(
            throws: CheckpointError.invalidTensorEntry(
                path: directory.path, tensor: "x", reason: "the checkpoint's size overflows")
        ) {
            try SyntheticCheckpoint.write(
                tensors: [("x", [1 << 61])], seed: 1, to: directory, replacingExisting: true)
        }
        #expect(throws: CheckpointError.invalidShardSize(0)) {
            try SyntheticCheckpoint.write(tensors: tensors, seed: 1, to: directory, shardBytes: 0)
        }
        #expect(
            CheckpointError.unsupportedSyntheticDType(.i8).description
                == "synthetic weights can be BF16, F16 or F32, not I8")
        #expect(CheckpointError.invalidShardSize(0).description == "shard size must be positive, got 0")
    }

    /// A folder where a writer's temporary file goes: its `open` fails, as a run killed there stops.
    private func blockTemporary(of name: String, in directory: URL) throws {
        try FileManager.default.createDirectory(
            at: directory.appendingPathComponent(".\(name).partial-\(getpid())"), withIntermediateDirectories: false)
    }

    @Test("a killed run's temporary files are removed by the next run; one a running writer holds is not")
    func abandonedTemporariesRemoved() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // What SIGKILL leaves: a temporary no process holds.
        let abandoned = directory.appendingPathComponent(".model.safetensors.partial-99999")
        try Data(repeating: 7, count: 100).write(to: abandoned)
        // One a running writer (another process) holds: locked.
        let held = directory.appendingPathComponent(".model-00001-of-00002.safetensors.partial-88888")
        try Data(repeating: 7, count: 100).write(to: held)
        let descriptor = open(held.path, O_RDONLY)
        defer { close(descriptor) }
        #expect(flock(descriptor, LOCK_EX | LOCK_NB) == 0)

        try SyntheticCheckpoint.write(tensors: tensors, seed: 1, to: directory)
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
                == [held.lastPathComponent, "model.safetensors"])
    }

    @Test("an interrupted sharded run publishes no shard, so the re-run needs no --overwrite")
    func interruptedShardsNotPublished() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try blockTemporary(of: "model-00002-of-00002.safetensors", in: directory)
        #expect(throws: CheckpointError.self) {
            try SyntheticCheckpoint.write(tensors: tensors, seed: 9, to: directory, shardBytes: 3000)
        }
        // Nothing but the obstacle: the first shard's temporary was removed, and never published.
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: directory.path)
                == [".model-00002-of-00002.safetensors.partial-\(getpid())"])
        try FileManager.default.removeItem(
            at: directory.appendingPathComponent(".model-00002-of-00002.safetensors.partial-\(getpid())"))
        let result = try SyntheticCheckpoint.write(tensors: tensors, seed: 9, to: directory, shardBytes: 3000)
        #expect(result.files.count == 2)
        #expect(try CheckpointWeights(directory: directory).tensorNames.count == tensors.count)
    }

    @Test("an interrupted --overwrite leaves the earlier weights as they were")
    func interruptedOverwriteKeepsEarlier() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try SyntheticCheckpoint.write(tensors: tensors, seed: 1, to: directory)
        let earlier = try Data(contentsOf: directory.appendingPathComponent("model.safetensors"))
        try blockTemporary(of: "model.safetensors", in: directory)
        #expect(throws: CheckpointError.self) {
            try SyntheticCheckpoint.write(tensors: tensors, seed: 2, to: directory, replacingExisting: true)
        }
        #expect(try Data(contentsOf: directory.appendingPathComponent("model.safetensors")) == earlier)
    }

    @Test("weights under any name are earlier weights: refused without replacing, all removed with it")
    func earlierWeightsUnderOtherNames() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // Mistral's name, another name, one name in two Unicode forms, and an index.
        let weightNames = [
            "consolidated.safetensors", "weights-a.safetensors", "\u{E9}.safetensors", "e\u{301}.safetensors",
            "model.safetensors.index.json",
        ]
        for name in weightNames { try Data("x".utf8).write(to: directory.appendingPathComponent(name)) }
        // Neither hidden files (temporaries) nor other files are weights the reader takes.
        let others = [".kept.safetensors", "notes.txt", "config.json"]
        for name in others { try Data("y".utf8).write(to: directory.appendingPathComponent(name)) }
        #expect(
            throws: BundleError.outputExists(path: directory.appendingPathComponent("consolidated.safetensors").path)
        ) {
            try SyntheticCheckpoint.write(tensors: tensors, seed: 1, to: directory)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).count == 8)
        try SyntheticCheckpoint.write(tensors: tensors, seed: 1, to: directory, replacingExisting: true)
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
                == [".kept.safetensors", "config.json", "model.safetensors", "notes.txt"])
        #expect(try CheckpointWeights(directory: directory).tensorNames.count == tensors.count)
        // A folder named like weights is never removed, even when replacing, and nothing is written.
        let folder = directory.appendingPathComponent("shards.safetensors")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
        let before = try Data(contentsOf: directory.appendingPathComponent("model.safetensors"))
        #expect(
            throws: CheckpointError.writeFailed(
                path: folder.path, reason: "a folder is there, not a weight file; move it away")
        ) { try SyntheticCheckpoint.write(tensors: tensors, seed: 2, to: directory, replacingExisting: true) }
        #expect(try Data(contentsOf: directory.appendingPathComponent("model.safetensors")) == before)
        #expect(FileManager.default.fileExists(atPath: folder.path))
    }
}

/// Pinned outputs of the generator; a change here changes every synthetic checkpoint.
enum KnownAnswers {
    static let upProj: [UInt32] = [3_156_320_054, 977_483_442, 3_154_487_532, 3_114_350_708]
    /// CRC-32 of the float32 bytes of the whole 256×1536 up_proj (seed 2024).
    static let upProjChecksum: UInt32 = 3_784_993_867
}
