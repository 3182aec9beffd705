import Foundation
import TestSupport
import Testing

@testable import ExporterKit

/// Weights from the formula of `Tests/reference/forward.py`, reproduced exactly.
struct FormulaWeights: ReferenceWeights {
    func referenceTensor(_ name: String, shape: [Int]) throws -> [Float] {
        let key = name.utf8.enumerated().reduce(UInt64(0)) {
            ($0 + UInt64($1.offset + 1) * UInt64($1.element)) % (1 << 32)
        }
        let offset = (key + 1) * 2_246_822_519 % (1 << 32)
        let columns = Double(shape.last ?? 1)
        return (0..<shape.reduce(1, *)).map { index in
            let u = Double((UInt64(index + 1) * 2_654_435_761 + offset) % (1 << 32)) / 4_294_967_296
            if name.hasSuffix("norm.weight") { return Float(1 + 0.2 * (u - 0.5)) }
            if name.hasSuffix("bias") { return Float(0.2 * (u - 0.5)) }
            return Float((u - 0.5) * 2 * 1.7 / columns.squareRoot())
        }
    }
}

@Suite("reference forward pass")
struct ReferenceModelTests {
    struct KnownAnswers {
        let tokens: [Int]
        let models: [String: (ReferenceArchitecture, [[Float]])]
    }

    static func knownAnswers() throws -> KnownAnswers {
        let url = Fixtures.repositoryRoot.appendingPathComponent("Tests/reference/known_logits.json")
        let root = try #require(try JSONParser.parse([UInt8](Data(contentsOf: url))).objectValue)
        let tokens = try #require(root["tokens"]?.arrayValue).compactMap(\.intValue)
        var models: [String: (ReferenceArchitecture, [[Float]])] = [:]
        for (family, value) in try #require(root["models"]?.objectValue).members {
            let model = try #require(value.objectValue)
            let c = try #require(model["config"]?.objectValue)
            func int(_ key: String) throws -> Int { try #require(c[key]?.intValue) }
            let architecture = ReferenceArchitecture(
                family: family, layers: try int("layers"), hiddenSize: try int("hidden"),
                intermediateSize: try int("intermediate"), vocabularySize: try int("vocab"), heads: try int("heads"),
                kvHeads: try int("kv_heads"), headDim: try int("head_dim"), contextLength: 16,
                ropeTheta: try #require(c["theta"]?.doubleValue), rmsNormEpsilon: try #require(c["eps"]?.doubleValue),
                qkvBias: try #require(c["qkv_bias"]?.boolValue as Bool?),
                qkNorm: try #require(c["qk_norm"]?.boolValue as Bool?),
                tiedEmbeddings: try #require(c["tied"]?.boolValue as Bool?), slidingWindow: c["window"]?.intValue)
            let logits = try #require(model["logits"]?.arrayValue).map { row in
                (row.arrayValue ?? []).compactMap { $0.doubleValue.map(Float.init) }
            }
            models[family] = (architecture, logits)
        }
        return KnownAnswers(tokens: tokens, models: models)
    }

    @Test(
        "logits match the NumPy transcription of the published equations to 1e-4",
        arguments: ["qwen2", "qwen3", "mistral"])
    func knownAnswers(family: String) throws {
        let answers = try Self.knownAnswers()
        let (architecture, expected) = try #require(answers.models[family])
        let logits = try ReferenceModel(architecture: architecture, weights: FormulaWeights()).logits(
            tokens: answers.tokens)
        #expect(logits.count == expected.count)
        var largest: Float = 0
        for (row, expectedRow) in zip(logits, expected) {
            #expect(row.count == expectedRow.count)
            for (a, b) in zip(row, expectedRow) { largest = max(largest, abs(a - b)) }
        }
        #expect(largest < 1e-4, "\(family): max |Δlogit| = \(largest)")
    }

    @Test("a rerun is bit-identical, and a prefix gives the first positions exactly (causal, cached)")
    func deterministicAndCausal() throws {
        let answers = try Self.knownAnswers()
        let (architecture, _) = try #require(answers.models["qwen3"])
        let model = ReferenceModel(architecture: architecture, weights: FormulaWeights())
        let first = try model.logits(tokens: answers.tokens)
        #expect(try model.logits(tokens: answers.tokens) == first)
        let prefix = try model.logits(tokens: Array(answers.tokens.prefix(3)))
        #expect(prefix == Array(first.prefix(3)))
    }

    @Test(
        "rows read alone, and the head read in blocks of rows, give what the whole tensors give",
        arguments: [true, false])
    func rowsAndHeadBlocks(tied: Bool) throws {
        let checkpointURL = try Fixtures.syntheticCheckpoint(
            modelType: "qwen3", overrides: ["tie_word_embeddings": tied])
        let plan = try Fixtures.plan(checkpointURL, compression: .named("4bit_weight_palettized_group8"))
        let bundle = try ExportRunner.run(
            plan, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory()))
        let checkpoint = try CheckpointWeights(directory: checkpointURL)
        let reader = try BundleReader(url: bundle.bundleURL)
        let architecture = try ReferenceArchitecture(config: plan.model.config, contextLength: 16)
        #expect(architecture.tiedEmbeddings == tied)
        let embedding = "model.embed_tokens.weight"
        let shape = [256, 64]
        for weights in [checkpoint, reader] as [ReferenceWeights] {
            // Rows 3..<7 of the int8 embedding (iOS) and of a 4-bit palette: decoded alone.
            for (name, tensorShape) in [(embedding, shape), ("model.layers.0.mlp.up_proj.weight", [128, 64])] {
                let whole = try weights.referenceTensor(name, shape: tensorShape)
                #expect(
                    try weights.referenceRows(name, shape: tensorShape, rows: 3..<7)
                        == Array(whole[(3 * 64)..<(7 * 64)]))
            }
            #expect(throws: ReferenceModelError.rowsOutOfRange(tensor: embedding, rows: 250..<260, available: 256)) {
                try weights.referenceRows(embedding, shape: shape, rows: 250..<260)
            }
            let tokens = [0, 5, 255, 17]
            let model = ReferenceModel(architecture: architecture, weights: weights)
            var blocked = model
            // 5 rows per block: 52 blocks, the last of one row.
            blocked.headBlockElements = 5 * 64
            #expect(try blocked.logits(tokens: tokens) == model.logits(tokens: tokens))
        }
    }

    @Test("bad token sequences are refused with exact messages")
    func invalidTokens() throws {
        let (architecture, _) = try #require(try Self.knownAnswers().models["qwen2"])
        let model = ReferenceModel(architecture: architecture, weights: FormulaWeights())
        #expect(throws: ReferenceModelError.invalidTokens("no tokens to run")) { try model.logits(tokens: []) }
        #expect(throws: ReferenceModelError.invalidTokens("token 64 is outside the vocabulary of 64")) {
            try model.logits(tokens: [1, 64])
        }
        #expect(throws: ReferenceModelError.invalidTokens("17 tokens exceed the context length of 16")) {
            try model.logits(tokens: Array(repeating: 1, count: 17))
        }
    }

    @Test("top-5, KL and perplexity of a comparison are computed as defined")
    func comparisonMetrics() {
        let source: [[Float]] = [[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0]]
        let same = ForwardComparison(tokens: [1, 2], source: source, artifact: source)
        #expect(same.top1Agreement == 1)
        #expect(same.meanKL == 0)
        #expect(same.maxLogitDifference == 0)
        #expect(same.positions[0].source.top5.map(\.token) == [5, 4, 3, 2, 1])
        let logZ = log((0...5).reduce(0.0) { $0 + exp(Double($1)) })
        #expect(abs((same.positions[0].source.nextTokenLogProbability ?? 0) - (2 - logZ)) < 1e-12)
        #expect(same.positions[1].source.nextTokenLogProbability == nil)
        #expect(abs((same.sourcePerplexity ?? 0) - exp(logZ - 2)) < 1e-9)
        let shifted = ForwardComparison(
            tokens: [1, 2], source: source, artifact: [[0, 1, 2, 3, 5, 4], [5, 4, 3, 2, 1, 0]])
        #expect(shifted.top1Agreement == 0.5)
        #expect(shifted.maxLogitDifference == 1)
        #expect(shifted.positions[0].klDivergence > 0 && shifted.positions[1].klDivergence == 0)
        // KL(source ‖ artifact), not the reverse: p = (1/2, 1/2) and q = (1/4, 3/4) give ½·ln(4/3) = 0.1438
        // (the reverse is 0.1308).
        let skewed = ForwardComparison(tokens: [0], source: [[0, 0]], artifact: [[0, Float(log(3.0))]])
        #expect(abs(skewed.positions[0].klDivergence - 0.5 * log(4.0 / 3.0)) < 1e-6)
    }

    @Test("the logit SNR centres each side on its own mean: a common shift of the artifact's logits is no noise")
    func logitSNRIgnoresShift() {
        // Source (0, 2) centred is (-1, 1), signal 2; artifact (1, 2) centred is (-0.5, 0.5),
        // noise 0.25 + 0.25: 10·log10(4).
        let close = ForwardComparison(tokens: [0], source: [[0, 2]], artifact: [[1, 2]])
        #expect(abs(close.logitSNR - 10 * log10(4.0)) < 1e-12)
        #expect(ForwardComparison(tokens: [0], source: [[0, 2]], artifact: [[11, 12]]).logitSNR == close.logitSNR)
        #expect(ForwardComparison(tokens: [0], source: [[0, 2]], artifact: [[10, 12]]).logitSNR == .infinity)
    }

    @Test("top-5 breaks ties by the lower token id")
    func topFiveTies() {
        #expect(ForwardComparison.top([1, 3, 3, 0, 3, 3, 3], 5).map(\.token) == [1, 2, 4, 5, 6])
        let comparison = ForwardComparison(
            tokens: [0], source: [[2, 5, 5, 1, 5, 0, 5]], artifact: [[2, 5, 5, 1, 5, 0, 5]])
        #expect(comparison.positions[0].source.top5.map(\.token) == [1, 2, 4, 6, 0])
    }

    @Test("the comparison's JSON has every key, in order, at each level")
    func comparisonJSONKeys() throws {
        let source: [[Float]] = [[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0]]
        let json = try #require(ForwardComparison(tokens: [1, 2], source: source, artifact: source).json.objectValue)
        #expect(
            json.keys == [
                "tokens", "top1_agreement", "max_logit_difference", "mean_kl", "max_kl", "logit_snr_db",
                "source_perplexity", "artifact_perplexity", "positions",
            ])
        #expect(json["max_kl"] == .number("0.0"))
        #expect(json["logit_snr_db"] == .null)  // infinite: no JSON number
        let position = try #require(json["positions"]?.arrayValue?.first?.objectValue)
        #expect(
            position.keys == [
                "index", "token", "next_token", "kl", "max_logit_difference", "top1_agrees", "source", "artifact",
            ])
        #expect(position["artifact"]?.objectValue?.keys == ["top5", "next_token_logprob"])
        #expect(position["source"]?.objectValue?["top5"]?.arrayValue?.first?.objectValue?.keys == ["token", "logit"])
    }

    @Test("linear rotary scaling divides the positions by the factor")
    func linearRotaryScaling() throws {
        let (architecture, _) = try #require(try Self.knownAnswers().models["qwen2"])
        var scaled = architecture
        scaled.ropeLinearFactor = 2
        let half = architecture.headDim / 2
        let plain = RotaryTable(architecture: architecture, positions: 3)
        let halved = RotaryTable(architecture: scaled, positions: 5)
        // Position 2p at factor 2 turns as far as position p unscaled.
        #expect(Array(halved.cosines[(2 * half)..<(3 * half)]) == Array(plain.cosines[half..<(2 * half)]))
        #expect(Array(halved.sines[(4 * half)..<(5 * half)]) == Array(plain.sines[(2 * half)..<(3 * half)]))
        // inv_freq[0] is 1: position 1 turns by one radian.
        #expect(plain.cosines[half] == Float(cos(1.0)) && plain.sines[half] == Float(sin(1.0)))
    }

    /// The tiny qwen2 config with `overrides`, parsed.
    static func tinyConfig(_ overrides: [String: Any?]) throws -> ModelConfig {
        let object = Fixtures.tinyConfig(overrides: overrides)
        let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        return try ModelConfig(bytes: [UInt8](data), path: "config.json")
    }

    @Test("a config's linear rope_scaling, by its rope_type or its older type key, gives the rotary factor")
    func ropeScalingFromConfig() throws {
        let cases: [([String: Any], Double)] = [
            (["type": "linear", "factor": 2], 2), (["rope_type": "linear", "factor": 3], 3),
            (["rope_type": "default"], 1),
        ]
        for (scaling, factor) in cases {
            let config = try Self.tinyConfig(["rope_scaling": scaling])
            #expect(
                try ReferenceArchitecture(config: config, contextLength: 16).ropeLinearFactor == factor, "\(scaling)")
        }
        #expect(try ReferenceArchitecture(config: Self.tinyConfig([:]), contextLength: 16).ropeLinearFactor == 1)
    }

    @Test("an odd head dimension, which rotate_half cannot split, is an invalid architecture (65)")
    func oddHeadDimension() throws {
        let config = try Self.tinyConfig(["head_dim": 15])
        let error = #expect(throws: ReferenceModelError.self) {
            try ReferenceArchitecture(config: config, contextLength: 16)
        }
        #expect(error == .invalidArchitecture("4 heads, 2 KV heads, head dimension 15, rotary factor 1.0"))
        #expect(error?.exitStatus == .badInput)
    }

    @Test("differences name every field on which two architectures disagree, the context length aside")
    func architectureDifferences() {
        let a = ReferenceArchitecture(
            family: "qwen2", layers: 2, hiddenSize: 32, intermediateSize: 48, vocabularySize: 64, heads: 4, kvHeads: 2,
            headDim: 8, contextLength: 16, ropeTheta: 10000, rmsNormEpsilon: 1e-6, qkvBias: true, qkNorm: false,
            tiedEmbeddings: false)
        let b = ReferenceArchitecture(
            family: "qwen3", layers: 3, hiddenSize: 64, intermediateSize: 40, vocabularySize: 128, heads: 8, kvHeads: 1,
            headDim: 16, contextLength: 512, ropeTheta: 1e6, ropeLinearFactor: 2, rmsNormEpsilon: 1e-5, qkvBias: false,
            qkNorm: true, tiedEmbeddings: true, slidingWindow: 4)
        #expect(
            a.differences(from: b) == [
                "architecture: qwen2 vs qwen3", "layers: 2 vs 3", "hidden_size: 32 vs 64",
                "intermediate_size: 48 vs 40",
                "vocab_size: 64 vs 128", "heads: 4 vs 8", "kv_heads: 2 vs 1", "head_dim: 8 vs 16",
                "rope_theta: 10000.0 vs 1000000.0", "rope scaling factor: 1.0 vs 2.0", "rms_norm_eps: 1e-06 vs 1e-05",
                "qkv_bias: true vs false", "qk_norm: false vs true", "tie_word_embeddings: false vs true",
                "sliding_window: none vs 4",
            ])
        var longer = a
        longer.contextLength = 4096
        #expect(a.differences(from: longer) == [])
    }

    @Test("calibration energies are the mean over the positions of each linear layer's squared inputs")
    func calibrationEnergies() throws {
        let (architecture, _) = try #require(try Self.knownAnswers().models["qwen2"])
        let weights = FormulaWeights()
        let tokens = [3, 17, 42]
        let calibration = try Calibration(architecture: architecture, weights: weights, tokens: tokens)
        #expect(calibration.record.tokens == 3)
        #expect(calibration.energy.count == 2 * 7)
        // The q, k and v projections of layer 0 read the normed embeddings.
        let hidden = architecture.hiddenSize
        let embedding = try weights.referenceTensor("model.embed_tokens.weight", shape: [64, hidden])
        let x = tokens.flatMap { embedding[($0 * hidden)..<(($0 + 1) * hidden)] }
        let normed = ReferenceKernels.rmsNorm(
            x, rows: 3, width: hidden,
            weight: try weights.referenceTensor("model.layers.0.input_layernorm.weight", shape: [hidden]),
            epsilon: architecture.rmsNormEpsilon)
        let expected = (0..<hidden).map { column in
            Float(
                (0..<3).reduce(0.0) { $0 + Double(normed[$1 * hidden + column]) * Double(normed[$1 * hidden + column]) }
                    / 3)
        }
        for projection in ["q_proj", "k_proj", "v_proj"] {
            #expect(calibration.energy["model.layers.0.self_attn.\(projection).weight"] == expected, "\(projection)")
        }
        #expect(calibration.energy["model.layers.1.mlp.down_proj.weight"]?.count == architecture.intermediateSize)
    }
}
