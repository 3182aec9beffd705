import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("conversion memory estimate")
struct ConversionMemoryTests {
    private let mebibyte = 1 << 20

    private func qwen(_ configure: (inout ExportOptions) -> Void = { _ in }) throws -> ExportPlan {
        var options = ExportOptions(model: "Qwen2.5-1.5B")
        configure(&options)
        return try ExportPlan.make(options: options, resolver: try Fixtures.resolver())
    }

    private func tensor(_ plan: ExportPlan, _ name: String) throws -> PlannedTensor {
        try #require(plan.tensors.first { $0.spec.name == name })
    }

    /// Every tensor read as `stored` patterns (nil: read as float16 whole).
    private func conditions(stored: SourcePatterns?, allowClamp: Bool = false, calibrated: Bool = false)
        -> ConversionMemoryConditions
    {
        var conditions = ConversionMemoryConditions()
        conditions.workers = 2
        conditions.storedPatterns = { _ in stored }
        conditions.allowClamp = allowClamp
        conditions.calibrated = calibrated
        return conditions
    }

    @Test("an int8 per-tensor embedding stored as bfloat16 is streamed: blocks, never the tensor")
    func streamedEmbedding() throws {
        let plan = try qwen()
        let embedding = try tensor(plan, "model.embed_tokens.weight")
        let elements = 151_936 * 1_536
        #expect(embedding.storedBytes == elements + 4)

        let streamed = TensorMemory(
            embedding, precision: .float16, conditions: conditions(stored: .bfloat16), workers: 2)
        #expect(streamed.loaded == 0)
        // Each worker counts a block of 2^21 bfloat16 patterns with 65,536 counters.
        #expect(streamed.working == 2 * ((1 << 22) + (1 << 19)))
        // The writer codes a block at a time: its patterns and codes, and the 65,536 codes.
        #expect(streamed.held == 3 * (1 << 21) + (1 << 16))
        #expect(streamed.stored == elements + 4)
        #expect(streamed.lookAheadBytes == 2 * elements)

        // Stored as float16 patterns: streamed the same way.
        let half = TensorMemory(embedding, precision: .float16, conditions: conditions(stored: .float16), workers: 2)
        #expect((half.loaded, half.working, half.held) == (streamed.loaded, streamed.working, streamed.held))
        // Read whole: the float16 copy, then the int8 values and the scale.
        let converted = TensorMemory(embedding, precision: .float16, conditions: conditions(stored: nil), workers: 2)
        #expect(converted.loaded == 2 * elements)
        #expect(converted.working == 3 * elements + 4)
        #expect(converted.held == elements + 4)

        // With --allow-clamp, values beyond float16 send it through the float16 copy after all.
        let clamped = TensorMemory(
            embedding, precision: .float16, conditions: conditions(stored: .bfloat16, allowClamp: true), workers: 2)
        #expect(clamped.working == 3 * elements + 2 * ((1 << 22) + (1 << 19)))
        // float32 read as float16 patterns can hold such values too; stored float16 cannot.
        var float32 = conditions(stored: .float16, allowClamp: true)
        float32.mayExceedFloat16 = { _ in true }
        #expect(
            TensorMemory(embedding, precision: .float16, conditions: float32, workers: 2).working == clamped.working)
        #expect(
            TensorMemory(
                embedding, precision: .float16, conditions: conditions(stored: .float16, allowClamp: true), workers: 2
            )
            .working == streamed.working)
    }

    @Test(
        "a palettised tensor holds its read values and packed indices; calibrated, the tiled palettiser's buffers too")
    func palettized() throws {
        let plan = try qwen()
        let up = try tensor(plan, "model.layers.0.mlp.up_proj.weight")
        let elements = 8_960 * 1_536
        // 4-bit indices and a 16-entry float16 LUT per group of 8 rows.
        #expect(up.storedBytes == elements / 2 + (8_960 / 8) * 32)
        // Stored as 16-bit patterns: each worker reads ten groups at a time (the most within
        // 2^17 weights: 80 rows) into a buffer of its own; the LUTs and indices are the output.
        let plain = TensorMemory(up, precision: .float16, conditions: conditions(stored: .bfloat16), workers: 2)
        let buffer = 80 * 1_536 * 2
        #expect((plain.loaded, plain.working, plain.held) == (0, up.storedBytes + 2 * buffer, up.storedBytes))
        // Read whole as float16: the copy, then the packed output, counted twice for what the
        // allocator keeps of the tensors before.
        let whole = TensorMemory(up, precision: .float16, conditions: conditions(stored: nil), workers: 2)
        #expect(
            (whole.loaded, whole.working, whole.held)
                == (2 * elements, 2 * elements + 2 * up.storedBytes, up.storedBytes))

        let calibrated = TensorMemory(
            up, precision: .float16, conditions: conditions(stored: .bfloat16, calibrated: true), workers: 2)
        // The float16 copy, an outlier mark and an index byte per weight, the packed output,
        // and each worker's importance per float16 pattern (65,536 Doubles).
        #expect(calibrated.working == 4 * elements + up.storedBytes + 2 * (1 << 19))
    }

    @Test(
        "a bfloat16 tensor palettised per grouped channel is read a few groups at a time by each worker, per tensor whole"
    )
    func streamedPalette() throws {
        let plan = try qwen { $0.platform = .macOS }
        let embedding = try tensor(plan, "model.embed_tokens.weight")
        let up = try tensor(plan, "model.layers.0.mlp.up_proj.weight")
        #expect(TensorEncoder.streams(embedding, precision: .float16))
        #expect(!TensorEncoder.streams(embedding, precision: .float16, calibrated: true))
        // Any size: 27.5 MB too.
        #expect(TensorEncoder.streams(up, precision: .float16))
        let config = try Fixtures.temporaryDirectory().appendingPathComponent("per_tensor.json")
        try Data(
            (#"{"schema": "exporter.compression/1", "name": "per_tensor", "rules": [], "default": "#
                + #"{"mode": "palettize", "bits": 4, "granularity": "per_tensor"}}"#).utf8
        ).write(to: config)
        let perTensor = try tensor(try qwen { $0.compression = .file(config) }, "model.layers.0.mlp.up_proj.weight")
        #expect(!TensorEncoder.streams(perTensor, precision: .float16))
        // 4-bit indices and one 16-entry LUT per 8 rows.
        #expect(embedding.storedBytes == 151_936 * 1_536 / 2 + 18_992 * 32)
        let streamed = TensorMemory(
            embedding, precision: .float16, conditions: conditions(stored: .bfloat16), workers: 2)
        // Each of the two workers reads ten groups of eight rows at a time.
        let buffer = 80 * 1_536 * 2
        #expect(streamed.loaded == 0)
        #expect(streamed.working == embedding.storedBytes + 2 * buffer)
        #expect(
            TensorMemory(embedding, precision: .float16, conditions: conditions(stored: .bfloat16), workers: 4).working
                == embedding.storedBytes + 4 * buffer)
        #expect(streamed.held == embedding.storedBytes)
        // Stored as float32: converted to float16 whole, then palettised.
        let whole = TensorMemory(embedding, precision: .float16, conditions: conditions(stored: nil), workers: 2)
        #expect(whole.working == 2 * 151_936 * 1_536 + 2 * embedding.storedBytes)
    }

    @Test(
        "kept tensors: a float16 copy, a float32 one, or a float32 copy and its bfloat16 result; a large one in float16 streamed"
    )
    func kept() throws {
        let uncompressed = try qwen {
            $0.compression = .named("none")
            $0.quantizeIOSEmbedding = false
        }
        let embedding = try tensor(uncompressed, "model.embed_tokens.weight")
        #expect(TensorEncoder.streams(embedding, precision: .float16))
        #expect(!TensorEncoder.streams(embedding, precision: .float32))
        // Scanned a block of 2^21 patterns at a time, then converted as written: patterns and float16 values.
        let streamed = TensorMemory(
            embedding, precision: .float16, conditions: conditions(stored: .bfloat16), workers: 2)
        #expect((streamed.loaded, streamed.working, streamed.held) == (0, 1 << 22, 1 << 23))
        // With --allow-clamp, values beyond float16 send it through the float16 copy after all.
        let clamped = TensorMemory(
            embedding, precision: .float16, conditions: conditions(stored: .bfloat16, allowClamp: true), workers: 2)
        let halfBytes = 2 * 151_936 * 1_536
        #expect((clamped.working, clamped.held) == (halfBytes + (1 << 22), halfBytes + (1 << 23)))
        let whole = TensorMemory(embedding, precision: .float16, conditions: conditions(stored: nil), workers: 2)
        #expect((whole.loaded, whole.working, whole.held) == (halfBytes, halfBytes, halfBytes))
        // Peak measured for this export from bfloat16 on two cores: 251–269 MiB (661 MiB when
        // the embedding was held whole).
        let estimate = uncompressed.conversionMemory(conditions(stored: .bfloat16))
        #expect(estimate.totalBytes == 332_048_896)
        #expect(estimate.peakTensor == "model.layers.2.mlp.up_proj.weight")

        let norm = try tensor(try qwen(), "model.norm.weight")
        let half = TensorMemory(norm, precision: .float16, conditions: conditions(stored: .bfloat16), workers: 2)
        #expect((half.loaded, half.working, half.held) == (3_072, 3_072, 3_072))
        let bfloatNorm = try tensor(try qwen { $0.computePrecision = .bfloat16 }, "model.norm.weight")
        let bfloat = TensorMemory(
            bfloatNorm, precision: .bfloat16, conditions: conditions(stored: .bfloat16), workers: 2)
        #expect((bfloat.loaded, bfloat.working, bfloat.held) == (6_144, 9_216, 3_072))
    }

    @Test("the peak adds the tensors read ahead to the one compressed and those waiting to be written")
    func pipeline() {
        let small = TensorMemory(loaded: 10, lookAheadBytes: 10, working: 20, held: 5, stored: 5)
        // First tensor: its 20, both others read ahead (10 + 10), nothing written yet.
        // Second: 20, the third read ahead, the first waiting: 35. Third: 20 and two waiting: 30.
        let peak = ExportPlan.peak(of: [small, small, small])
        #expect(peak.index == 0)
        #expect(peak.bytes == 40)
    }

    @Test("beyond the next tensor, reading ahead stops at the look-ahead budget (counted in float16 bytes)")
    func readAheadBudget() {
        let tiny = TensorMemory(loaded: 0, lookAheadBytes: 0, working: 1, held: 0, stored: 0)
        let next = TensorMemory(loaded: 40 * mebibyte, lookAheadBytes: 40 * mebibyte, working: 1, held: 0, stored: 0)
        let after = TensorMemory(loaded: mebibyte, lookAheadBytes: mebibyte, working: 1, held: 0, stored: 0)
        // The next tensor is read whatever its size; the one after would pass 32 MiB.
        #expect(ExportPlan.peak(of: [tiny, next, after]).bytes == 1 + 40 * mebibyte)
        // A float32 read of 40 MiB counts as its 20 MiB float16 size: the one after fits.
        let wide = TensorMemory(loaded: 40 * mebibyte, lookAheadBytes: 20 * mebibyte, working: 1, held: 0, stored: 0)
        #expect(ExportPlan.peak(of: [tiny, wide, after]).bytes == 1 + 41 * mebibyte)
    }

    @Test("the tensors waiting to be written stay within the write queue's limit behind the one being written")
    func writeQueueLimit() {
        let limit = TensorWriteQueue.pendingByteLimit
        #expect(limit == 128 * mebibyte)
        let large = TensorMemory(loaded: 0, lookAheadBytes: 0, working: 0, held: 300 * mebibyte, stored: 300 * mebibyte)
        let last = TensorMemory(loaded: 0, lookAheadBytes: 0, working: 0, held: 0, stored: 0)
        // Behind a tensor of 300 MiB, one of 100 MiB fits the queue: both wait while the third is compressed.
        let fits = TensorMemory(loaded: 0, lookAheadBytes: 0, working: 0, held: 100 * mebibyte, stored: 100 * mebibyte)
        #expect(ExportPlan.peak(of: [large, fits, last]).bytes == 400 * mebibyte)
        // One that stores more than the limit waits until the queue is empty: never both.
        let over = TensorMemory(loaded: 0, lookAheadBytes: 0, working: 0, held: 100 * mebibyte, stored: limit + 1)
        #expect(ExportPlan.peak(of: [large, over, last]).bytes == 300 * mebibyte)
        // The limit is inclusive: one that stores exactly the limit still queues behind the large one.
        let exact = TensorMemory(loaded: 0, lookAheadBytes: 0, working: 0, held: 100 * mebibyte, stored: limit)
        #expect(ExportPlan.peak(of: [large, exact, last]).bytes == 400 * mebibyte)
    }

    @Test("Qwen2.5-1.5B's preset from bfloat16 weights: a bound above the measured peak, far below the float16 path")
    func qwenPreset() throws {
        let plan = try qwen()
        let streamed = plan.conversionMemory(conditions(stored: .bfloat16))
        // Peak resident memory measured for this export on two cores: 85–107 MiB (181–274 MiB
        // when palettes under 64 MiB were read whole; the estimate was then 323,814,912, then
        // 271,517,184 with blocks of 2^21 weights read by one thread).
        // 8 KiB of it for each of its 338 tensors.
        #expect(streamed.totalBytes == 266_520_064)
        #expect(streamed.totalBytes > 107 * mebibyte)
        #expect(streamed.peakTensor == "model.layers.6.mlp.up_proj.weight")
        // From float16 weights, the same; from weights read whole as float16 (a dtype stored
        // otherwise) the embedding is converted whole: its copy and its int8 values.
        #expect(plan.conversionMemory(conditions(stored: .float16)) == streamed)
        let converted = plan.conversionMemory(conditions(stored: nil))
        #expect(converted.peakTensor == "model.embed_tokens.weight")
        #expect(converted.totalBytes == 829_253_636)
        #expect(converted.tensorBytes == 3 * 151_936 * 1_536 + 4)
    }

    @Test("a config's torch_dtype tells how weights not yet read are stored")
    func torchDTypeConditions() throws {
        let spec = try tensor(try qwen(), "model.norm.weight").spec
        let cases: [(String?, SourcePatterns?, Bool)] = [
            ("bfloat16", .bfloat16, true), ("float16", .float16, false), ("float32", .float16, true),
            (nil, nil, false), ("int8", nil, false),
        ]
        for (dtype, patterns, exceeds) in cases {
            let conditions = ConversionMemoryConditions(torchDType: dtype, allowClamp: true, calibrated: true)
            #expect(conditions.storedPatterns(spec) == patterns, "\(dtype ?? "nil")")
            #expect(conditions.mayExceedFloat16?(spec) == exceeds, "\(dtype ?? "nil")")
            #expect(conditions.allowClamp && conditions.calibrated)
        }
    }

    @Test("a plan's forecast reads the storage from the checkpoint's headers when its weights are here")
    func forecastStorage() throws {
        // float32 weights under a config that says float16: only the headers tell that values
        // may lie beyond float16's range, which --allow-clamp then converts whole.
        let checkpoint = try Fixtures.syntheticCheckpoint(overrides: ["torch_dtype": "float16"], dtype: .f32)
        let plan = try Fixtures.plan(checkpoint)
        let read = ExportRunner.conversionForecast(plan, allowClamp: true, availableBytes: 42)
        let source = CheckpointWeightSource(weights: try CheckpointWeights(directory: checkpoint), outOfRange: .clamp)
        let fromSource = plan.conversionMemory(
            ConversionMemoryConditions(source: source, allowClamp: true, calibrated: false))
        #expect(
            read
                == Manifest.Conversion(
                    peakBytes: fromSource.totalBytes, peakTensor: fromSource.peakTensor,
                    workers: SystemResources.activeCores,
                    storageFrom: "checkpoint", availableBytes: 42))

        // The same config without weights: float16 as the config says, no clamped copies.
        let configOnly = try Fixtures.checkpointDirectory(
            config: Fixtures.tinyConfig(overrides: ["torch_dtype": "float16"]))
        let assumed = ExportRunner.conversionForecast(
            try Fixtures.plan(configOnly), allowClamp: true, availableBytes: nil)
        #expect(assumed.storageFrom == "torch_dtype")
        #expect(assumed.availableBytes == nil)
        // At the peak, the int8 embedding (256 × 64): its float16 copy and its int8 values.
        #expect(read.peakTensor == "model.embed_tokens.weight")
        #expect(read.peakBytes - assumed.peakBytes == 256 * 64 * 3)
        // --synthetic generates the config's dtype, whatever the checkpoint holds.
        let synthetic = ExportRunner.conversionForecast(plan, synthetic: true, allowClamp: true, availableBytes: nil)
        #expect(synthetic.storageFrom == "synthetic")
        #expect((synthetic.peakBytes, synthetic.peakTensor) == (assumed.peakBytes, assumed.peakTensor))
        // Without a torch_dtype: read whole as float16 from the checkpoint, generated as float16 patterns.
        let untyped = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(overrides: ["torch_dtype": nil]))
        let untypedPlan = try Fixtures.plan(untyped)
        var readWhole = ConversionMemoryConditions()
        readWhole.storedPatterns = { _ in nil }
        var asFloat16 = ConversionMemoryConditions()
        asFloat16.storedPatterns = { _ in .float16 }
        let whole = ExportRunner.conversionForecast(untypedPlan, availableBytes: nil)
        #expect(whole.peakBytes == untypedPlan.conversionMemory(readWhole).totalBytes)
        let generated = ExportRunner.conversionForecast(untypedPlan, synthetic: true, availableBytes: nil)
        #expect(generated.peakBytes == untypedPlan.conversionMemory(asFloat16).totalBytes)
        // (In a model this small, the blocks of streaming outweigh whole tensors.)
        #expect(whole.peakBytes != generated.peakBytes)
    }
}

@Suite("conversion memory estimate: the pipeline's sliding windows")
struct ConversionPeakTests {
    /// The peak as the pipeline's rule states it, rescanning both windows for every tensor.
    private func scannedPeak(_ costs: [TensorMemory]) -> (index: Int, bytes: Int) {
        var peak = (index: 0, bytes: 0)
        var readFrontier = -1
        for index in costs.indices {
            var aheadBytes = 0
            var ahead = index + 1
            while ahead < costs.count {
                aheadBytes += costs[ahead].lookAheadBytes
                guard ahead == index + 1 || aheadBytes <= TensorPrefetcher.lookAheadBytes else { break }
                ahead += 1
            }
            readFrontier = max(readFrontier, ahead - 1)
            let readAhead = index < readFrontier ? costs[(index + 1)...readFrontier].map(\.loaded).reduce(0, +) : 0
            var held = 0
            var queued = 0
            var first = index - 1
            while first >= 0 {
                held += costs[first].held
                queued += costs[first].stored
                guard queued <= TensorWriteQueue.pendingByteLimit else { break }
                first -= 1
            }
            let bytes = costs[index].working + readAhead + held
            if bytes > peak.bytes { peak = (index, bytes) }
        }
        return peak
    }

    @Test("the sliding windows give the peak a scan of every tensor's windows gives")
    func slidesAsScans() {
        var generator = SplitMix64(seed: 3)
        func next(_ bound: Int) -> Int { Int.random(in: 0..<bound, using: &generator) }
        let mebibyte = 1 << 20
        for trial in 0..<60 {
            // Small tensors (many in a window), large ones (alone in it), and some of neither.
            let scale = [1 << 12, mebibyte, 40 * mebibyte][trial % 3]
            let costs = (0..<(5 + next(300))).map { _ -> TensorMemory in
                let size = next(3 * scale)
                return TensorMemory(
                    loaded: next(2) == 0 ? 0 : size, lookAheadBytes: size, working: size + next(scale),
                    held: next(size + 1), stored: next(size + 1))
            }
            let expected = scannedPeak(costs)
            let slid = ExportPlan.peak(of: costs)
            #expect(slid.index == expected.index && slid.bytes == expected.bytes, "trial \(trial)")
        }
        // A hostile config's sizes saturate instead of trapping.
        let huge = TensorMemory(
            loaded: Int.max, lookAheadBytes: Int.max, working: Int.max, held: Int.max, stored: Int.max)
        #expect(ExportPlan.peak(of: [huge, huge, huge]).bytes == Int.max)
    }
}
