import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("export plan")
struct ExportPlanTests {
    private func plan(_ model: String, configure: (inout ExportOptions) -> Void = { _ in }) throws -> ExportPlan {
        var options = ExportOptions(model: model)
        configure(&options)
        return try ExportPlan.make(options: options, resolver: try Fixtures.resolver())
    }

    @Test("Qwen2.5-1.5B at 4,096 tokens: parameters and KV cache of the brief")
    func qwen25() throws {
        let plan = try plan("Qwen2.5-1.5B") { $0.contextLength = 4096 }
        #expect(plan.parameters == 1_543_714_304)
        #expect(plan.kvCache.bytes == 117_440_512)
        #expect(plan.kvCache.bytes == 112 << 20)
        #expect(plan.model.preset?.id == "qwen2.5-1.5b-instruct")
        #expect(plan.compression.name == "4bit_weight_palettized_group8")
        #expect(plan.outputName == "Qwen2.5-1.5B-Instruct")
        #expect(plan.warnings.isEmpty)
    }

    @Test("the plan's manifest: every KV-cache field as planned; ios_embedding_int8 only for an int8 embedding")
    func manifestFields() throws {
        let quantized = Manifest(plan: try plan("Qwen2.5-1.5B") { $0.contextLength = 4096 })
        #expect(
            quantized.kvCache
                == Manifest.KVCache(
                    bytes: 117_440_512, layers: 28, kvHeads: 2, headDim: 128, contextLength: 4096, dtype: "float16"))
        #expect(quantized.compression.iosEmbeddingInt8)
        let kept = Manifest(plan: try plan("qwen2.5-1.5b") { $0.quantizeIOSEmbedding = false })
        #expect(kept.tensors[0].rule == "ios-embedding-kept")
        #expect(!kept.compression.iosEmbeddingInt8)
        let macOS = Manifest(plan: try plan("qwen2.5-1.5b") { $0.platform = .macOS })
        #expect(!macOS.compression.iosEmbeddingInt8)
    }

    @Test("Qwen3-4B at 4,096 tokens reserves 576 MiB of KV cache")
    func qwen3_4b() throws {
        let plan = try plan("qwen3-4b")
        #expect(plan.kvCache.bytes == 603_979_776)
        #expect(plan.kvCache.bytes == 576 << 20)
        #expect(plan.parameters == 4_022_468_096)
        #expect(plan.contextLength == 4096)
    }

    @Test("Qwen3-0.6B parameter count, with q/k norms and tied embeddings")
    func qwen3_06b() throws {
        let plan = try plan("Qwen/Qwen3-0.6B")
        #expect(plan.parameters == 596_049_920)
        #expect(!plan.tensors.contains { $0.spec.name == "lm_head.weight" })
        #expect(plan.tensors.contains { $0.spec.name == "model.layers.27.self_attn.k_norm.weight" })
    }

    @Test("the estimated Qwen2.5-1.5B bundle: int8 embedding, 4-bit group-8 projections")
    func qwen25Sizes() throws {
        let plan = try plan("qwen2.5-1.5b-instruct")
        let embedding = try #require(plan.tensors.first { $0.spec.role == .embedding })
        #expect(embedding.scheme == .int8PerTensor)
        #expect(embedding.storedBytes == 151_936 * 1536 + 4)
        let q = try #require(plan.tensors.first { $0.spec.name == "model.layers.0.self_attn.q_proj.weight" })
        #expect(q.scheme == .palettize(bits: 4, groupSize: 8))
        #expect(q.storedBytes == 1536 * 1536 / 2 + 192 * 16 * 2)
        let bias = try #require(plan.tensors.first { $0.spec.name == "model.layers.0.self_attn.q_proj.bias" })
        #expect(bias.scheme == .keep)
        #expect(bias.storedBytes == 1536 * 2)
        #expect(abs(plan.bitsPerWeight - 4.62) < 0.01)
    }

    @Test("the mixed Qwen3-0.6B config puts the named layers at 8 bits per tensor")
    func mixedConfig() throws {
        let plan = try plan("qwen3-0.6b")
        let scheme = { (name: String) in plan.tensors.first { $0.spec.name == name }?.scheme }
        #expect(scheme("model.layers.7.mlp.down_proj.weight") == .palettize(bits: 8, groupSize: nil))
        #expect(scheme("model.layers.16.self_attn.o_proj.weight") == .palettize(bits: 8, groupSize: nil))
        #expect(scheme("model.layers.1.mlp.down_proj.weight") == .palettize(bits: 4, groupSize: 8))
        #expect(scheme("model.layers.17.self_attn.q_proj.weight") == .palettize(bits: 4, groupSize: 8))
        #expect(scheme("model.layers.7.input_layernorm.weight") == .keep)
    }

    @Test("a tensor's rule names the config's rule counting from 1, with its pattern as written, or the default")
    func ruleLabels() throws {
        let plan = try plan("qwen3-0.6b")
        let rule = { (name: String) in plan.tensors.first { $0.spec.name == name }?.rule }
        #expect(rule("model.layers.7.input_layernorm.weight") == "rule 1 (*norm.weight)")
        #expect(rule("model.layers.7.mlp.down_proj.weight") == "rule 3 (model.layers.{0,2,4,7,15,16}.*_proj.weight)")
        #expect(rule("model.layers.1.mlp.down_proj.weight") == "default")
        #expect(rule("model.embed_tokens.weight") == "ios-embedding")
    }

    @Test(
        "on iOS the embedding is never palettised: int8 per tensor, or kept with --disable-embedding-quantization-ios")
    func embeddingQuantizationDisabled() throws {
        for config in ["4bit_weight_palettized_group8", "4bit_weight_palettized_group32", "4bit_quality", "none"] {
            let quantized = try plan("qwen2.5-1.5b") { $0.compression = .named(config) }
            #expect(quantized.tensors[0].scheme == .int8PerTensor, "\(config)")
            #expect(quantized.tensors[0].rule == "ios-embedding")
            let kept = try plan("qwen2.5-1.5b") {
                $0.compression = .named(config)
                $0.quantizeIOSEmbedding = false
            }
            #expect(kept.tensors[0].spec.name == "model.embed_tokens.weight")
            #expect(kept.tensors[0].scheme == .keep, "\(config)")
            #expect(kept.tensors[0].rule == "ios-embedding-kept")
            #expect(kept.tensors[0].storedBytes == 151_936 * 1_536 * 2)
        }
    }

    @Test("macOS keeps the config's rule for the embedding")
    func macOSEmbedding() throws {
        let plan = try plan("qwen2.5-1.5b") { $0.platform = .macOS }
        #expect(plan.tensors[0].scheme == .palettize(bits: 4, groupSize: 8))
    }

    @Test("a context above max_position_embeddings is refused with the reference message")
    func contextTooLong() throws {
        #expect(throws: ResolutionError.contextTooLong(requested: 50_000, maximum: 40_960)) {
            try plan("qwen3-4b") { $0.contextLength = 50_000 }
        }
        let longest = try plan("qwen3-4b") { $0.contextLength = 40_960 }
        #expect(longest.kvCache.bytes == 2 * 36 * 8 * 128 * 40_960 * 2)
    }

    @Test("compression none keeps every tensor in float16 but the iOS embedding, int8 unless disabled")
    func noCompression() throws {
        let macOS = try plan("qwen2.5-1.5b") {
            $0.compression = .named("none")
            $0.platform = .macOS
        }
        #expect(macOS.tensors.allSatisfy { $0.scheme == .keep })
        #expect(macOS.estimatedWeightsBytes >= macOS.parameters * 2)
        let iOS = try plan("qwen2.5-1.5b") { $0.compression = .named("none") }
        let embedding = try #require(iOS.tensors.first)
        #expect(embedding.spec.name == "model.embed_tokens.weight")
        #expect(embedding.scheme == .int8PerTensor)
        #expect(embedding.rule == "ios-embedding")
        #expect(iOS.tensors.dropFirst().allSatisfy { $0.scheme == .keep })
        let disabled = try plan("qwen2.5-1.5b") {
            $0.compression = .named("none")
            $0.quantizeIOSEmbedding = false
        }
        #expect(disabled.tensors.allSatisfy { $0.scheme == .keep })
        #expect(disabled.estimatedWeightsBytes == macOS.estimatedWeightsBytes)
    }

    @Test("an experimental local checkpoint plans from its config alone")
    func experimentalDirectory() throws {
        let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "qwen3"))
        let plan = try plan(directory.path) {
            $0.experimental = true
            $0.computePrecision = .float32
        }
        // embed 256×64 + per layer (norms 2×64, q 64×64, k,v 32×64, o 64×64, q/k norms 2×16, mlp 3×128×64) + final norm.
        let perLayer = 2 * 64 + 64 * 64 + 2 * 32 * 64 + 64 * 64 + 2 * 16 + 3 * 128 * 64
        #expect(plan.parameters == 256 * 64 + 2 * perLayer + 64)
        #expect(plan.precision == .float32)
        #expect(plan.kvCache.bytes == 2 * 2 * 2 * 16 * 512 * 4)
        #expect(plan.contextLength == 512)
        #expect(plan.compression.name == "4bit_weight_palettized_group32")
    }

    @Test("an uneven last group is planned and reported, never skipped")
    func unevenGroups() throws {
        let directory = try Fixtures.checkpointDirectory(
            config: Fixtures.tinyConfig(modelType: "mistral", overrides: ["intermediate_size": 100]))
        let plan = try plan(directory.path) {
            $0.experimental = true
            $0.computePrecision = .float16
        }
        let gate = try #require(plan.tensors.first { $0.spec.name == "model.layers.0.mlp.gate_proj.weight" })
        #expect(gate.scheme.lastGroupRows(rows: 100) == 4)
        // 100 rows in groups of 32: four LUTs of 16 float16 entries, the last for 4 rows.
        #expect(gate.storedBytes == 100 * 64 / 2 + 4 * 16 * 2)
        #expect(
            plan.warnings.contains(
                "tensor 'model.layers.0.mlp.gate_proj.weight': 100 output channels are not a multiple of group size 32; "
                    + "its last group holds 4 channels"))
        // One channel left over: singular.
        let single = try Fixtures.checkpointDirectory(
            config: Fixtures.tinyConfig(modelType: "mistral", overrides: ["intermediate_size": 97]))
        let singlePlan = try self.plan(single.path) {
            $0.experimental = true
            $0.computePrecision = .float16
        }
        #expect(
            singlePlan.warnings.contains(
                "tensor 'model.layers.0.mlp.gate_proj.weight': 97 output channels are not a multiple of group size 32; "
                    + "its last group holds 1 channel"))
    }

    @Test(
        "the shipped configs keep a mixture of experts' router in the compute precision; its experts are palettised",
        arguments: [
            ("mixtral", ["num_local_experts": 4], "model.layers.0.block_sparse_moe.gate.weight"),
            ("qwen3_moe", ["num_experts": 4, "moe_intermediate_size": 32], "model.layers.0.mlp.gate.weight"),
        ] as [(String, [String: Any?], String)])
    func routerKept(_ modelType: String, _ overrides: [String: Any?], _ router: String) throws {
        let directory = try Fixtures.checkpointDirectory(
            config: Fixtures.tinyConfig(modelType: modelType, overrides: overrides))
        for compression in try Fixtures.resolver().catalog.compressionConfigNames() {
            let plan = try plan(directory.path) {
                $0.experimental = true
                $0.computePrecision = .float16
                $0.platform = .macOS
                $0.compression = .named(compression)
            }
            let gate = try #require(plan.tensors.first { $0.spec.name == router })
            #expect(gate.scheme.mode == .keep, "\(compression)")
            #expect(gate.rule.hasSuffix(" (*.{mlp,block_sparse_moe}.gate.weight)"), "\(compression)")
            #expect(plan.tensors.filter { $0.spec.name.contains(".experts.") }.allSatisfy { $0.scheme.mode != .keep })
            #expect(!plan.warnings.contains { $0.contains(router) }, "\(compression)")
        }
    }

    @Test("a tensor with fewer output channels than the group size is one group, said so")
    func fewerChannelsThanGroupSize() throws {
        let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "mistral"))
        let config = try Fixtures.temporaryDirectory().appendingPathComponent("g128.json")
        let json =
            #"{"schema": "exporter.compression/1", "name": "g128", "rules": [{"match": "*norm.weight", "mode": "keep"}], "#
            + #""default": {"mode": "palettize", "bits": 4, "granularity": "per_grouped_channel", "group_size": 128}}"#
        try Data(json.utf8).write(to: config)
        let plan = try plan(directory.path) {
            $0.experimental = true
            $0.computePrecision = .float16
            $0.compression = .file(config)
        }
        #expect(
            plan.warnings.contains(
                "tensor 'model.layers.0.self_attn.q_proj.weight': 64 output channels are fewer than group size 128: "
                    + "one group holds them all"))
        #expect(
            plan.warnings.contains(
                "tensor 'model.layers.0.mlp.down_proj.weight': 64 output channels are fewer than group size 128: "
                    + "one group holds them all"))
    }

    @Test("Qwen2.5-1.5B at 4,096 tokens: working memory and total of the estimate, to the byte")
    func qwen25Memory() throws {
        let plan = try plan("Qwen2.5-1.5B") { $0.contextLength = 4096 }
        let memory = plan.memory
        // A 128-token chunk: 4 hidden-width float32 buffers, 2 MLP-width ones, 12 heads of scores
        // over 4,096 positions, and one row of 151,936 logits.
        let working = 4 * 128 * 1536 * 4 + 2 * 128 * 8960 * 4 + 12 * 128 * 4096 * 4 + 151_936 * 4
        #expect(working == 38_094_336)
        #expect(memory.workingBytes == 38_094_336)
        #expect(memory.kvCacheBytes == 117_440_512)
        #expect(memory.weightsBytes == plan.weightsLayout.fileBytes)
        #expect(memory.totalBytes == memory.weightsBytes + 117_440_512 + 38_094_336)
    }

    @Test("a context shorter than the prefill chunk is the chunk: a call takes no more tokens than it holds")
    func shortContextMemory() throws {
        let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig())
        func memory(_ context: Int) throws -> MemoryEstimate {
            try plan(directory.path) {
                $0.experimental = true
                $0.computePrecision = .float16
                $0.contextLength = context
            }.memory
        }
        // hidden 64, intermediate 128, 4 heads, vocabulary 256.
        let short = try memory(64)
        #expect(short.prefillChunk == 64)
        #expect(short.workingBytes == 4 * 64 * 64 * 4 + 2 * 64 * 128 * 4 + 4 * 64 * 64 * 4 + 256 * 4)
        #expect(short.workingBytes == 197_632)
        let long = try memory(256)
        #expect(long.prefillChunk == 128)
        #expect(long.workingBytes == 4 * 128 * 64 * 4 + 2 * 128 * 128 * 4 + 4 * 128 * 256 * 4 + 256 * 4)
        let manifest = Manifest(
            plan: try plan(directory.path) {
                $0.experimental = true
                $0.computePrecision = .float16
                $0.contextLength = 64
            })
        #expect(manifest.memory.prefillChunk == 64)
        #expect(manifest.memory.workingBytes == 197_632)
    }

    @Test("Qwen3-MoE: the graph's MLP width and the working memory are its experts', not the dense intermediate_size")
    func mixtureOfExpertsWidth() throws {
        let directory = try Fixtures.checkpointDirectory(
            config: Fixtures.tinyConfig(
                modelType: "qwen3_moe", overrides: ["num_experts": 4, "moe_intermediate_size": 32]))
        let plan = try plan(directory.path) {
            $0.experimental = true
            $0.computePrecision = .float16
            $0.platform = .macOS
            $0.contextLength = 256
        }
        #expect(GraphDescription(plan: plan).intermediateSize == 32)
        #expect(plan.memory.workingBytes == 4 * 128 * 64 * 4 + 2 * 128 * 32 * 4 + 4 * 128 * 256 * 4 + 256 * 4)
        let expert = try #require(plan.tensors.first { $0.spec.name == "model.layers.0.mlp.experts.0.up_proj.weight" })
        #expect(expert.spec.shape == [32, 64])
        // Mixtral's experts are intermediate_size wide.
        let mixtral = try Fixtures.checkpointDirectory(
            config: Fixtures.tinyConfig(modelType: "mixtral", overrides: ["num_local_experts": 4]))
        let mixtralPlan = try self.plan(mixtral.path) {
            $0.experimental = true
            $0.computePrecision = .float16
            $0.platform = .macOS
        }
        #expect(GraphDescription(plan: mixtralPlan).intermediateSize == 128)
    }

    @Test("phi3's fused projections: q, k and v heads in one qkv_proj, gate and up in one gate_up_proj")
    func phi3Fused() throws {
        let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "phi3"))
        let plan = try plan(directory.path) {
            $0.experimental = true
            $0.platform = .macOS
            $0.computePrecision = .float16
        }
        let shapes = Dictionary(uniqueKeysWithValues: plan.tensors.map { ($0.spec.name, $0.spec.shape) })
        // (4 query + 2 × 2 KV heads) × head_dim 16 rows.
        #expect(shapes["model.layers.0.self_attn.qkv_proj.weight"] == [128, 64])
        #expect(shapes["model.layers.0.mlp.gate_up_proj.weight"] == [256, 64])
        let perLayer = 2 * 64 + 128 * 64 + 64 * 64 + 256 * 64 + 64 * 128
        #expect(plan.parameters == 256 * 64 + 2 * perLayer + 64)
        #expect(plan.parameters == 90_432)
    }

    @Test(
        "--preset on a local checkpoint: its exact shape is accepted; another KV head count or head_dim is refused by name"
    )
    func presetShapeChecked() throws {
        let reference = Fixtures.presetsDirectory.appendingPathComponent("checkpoints/Qwen3-0.6B/config.json")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: reference)) as? [String: Any])
        func planned(_ overrides: [String: Any]) throws -> ExportPlan {
            let directory = try Fixtures.checkpointDirectory(config: object.merging(overrides) { $1 })
            return try plan(directory.path) { $0.presetOverride = "qwen3-0.6b" }
        }
        #expect(try planned([:]).model.preset?.id == "qwen3-0.6b")
        #expect(
            throws: ResolutionError.presetMismatch(
                preset: "qwen3-0.6b", field: "num_key_value_heads", preset_value: "8", checkpoint_value: "4")
        ) { _ = try planned(["num_key_value_heads": 4]) }
        #expect(
            throws: ResolutionError.presetMismatch(
                preset: "qwen3-0.6b", field: "head_dim", preset_value: "128", checkpoint_value: "64")
        ) { _ = try planned(["head_dim": 64]) }
    }

    @Test("a preset made for macOS only is refused for iOS, naming both; it resolves for macOS")
    func presetPlatform() throws {
        let presets = try Fixtures.temporaryDirectory()
        let checkpoints = presets.appendingPathComponent("checkpoints/Mac")
        try FileManager.default.createDirectory(at: checkpoints, withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            at: Fixtures.presetsDirectory.appendingPathComponent("checkpoints/Qwen3-0.6B/config.json"),
            to: checkpoints.appendingPathComponent("config.json"))
        try Data(
            #"""
            {"schema": "exporter.presets/1", "presets": [
              {"id": "mac-only", "repo_id": "Test/Mac", "aliases": [], "config": "checkpoints/Mac/config.json",
               "platforms": ["macOS"], "context_length": 4096, "compute_precision": "float16",
               "compression": "4bit_weight_palettized_group8"}]}
            """#.utf8
        ).write(to: presets.appendingPathComponent("presets.json"))
        let resolver = ModelResolver(
            catalog: try PresetCatalog(directory: presets), locateInCache: { _ in nil },
            cacheDescription: { "/nonexistent/hub/" + $0 })
        #expect(throws: ResolutionError.notAvailable(model: "mac-only", platform: .iOS)) {
            _ = try resolver.resolve(
                "mac-only", platform: .iOS, experimental: false, precisionGiven: false, presetOverride: nil)
        }
        let resolved = try resolver.resolve(
            "mac-only", platform: .macOS, experimental: false, precisionGiven: false, presetOverride: nil)
        #expect(resolved.preset?.id == "mac-only")
    }
}
