import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("architecture registry")
struct ArchitectureRegistryTests {
    /// The config of a tiny checkpoint of `modelType`, read back as the exporter reads it.
    private func config(_ modelType: String, overrides: [String: Any?] = [:]) throws -> ModelConfig {
        let directory = try Fixtures.checkpointDirectory(
            config: Fixtures.tinyConfig(modelType: modelType, overrides: overrides))
        return try ModelConfig(contentsOf: directory.appendingPathComponent("config.json"))
    }

    /// The q/k/v bias tensors of layer 0 that the registry lays out for `config`.
    private func biases(_ config: ModelConfig) throws -> [String] {
        try ArchitectureRegistry.tensors(for: config, configPath: "config.json").map(\.name).filter {
            $0.hasPrefix("model.layers.0.") && $0.hasSuffix("_proj.bias")
        }
    }

    @Test("q/k/v biases follow the family's rule: qwen2 always, mistral never, whatever attention_bias says")
    func attentionBias() throws {
        // transformers' Qwen2 and Mistral attention do not read attention_bias: before, the config
        // value won, so a qwen2 config saying false lost its biases (the checkpoint's were dropped
        // with a warning) and a mistral one saying true gained some.
        let qkv = ["q", "k", "v"].map { "model.layers.0.self_attn.\($0)_proj.bias" }
        #expect(try biases(config("qwen2")) == qkv)
        #expect(try biases(config("qwen2_5")) == qkv)
        #expect(try biases(config("qwen2", overrides: ["attention_bias": false])) == qkv)
        #expect(try biases(config("mistral")) == [])
        #expect(try biases(config("mistral", overrides: ["attention_bias": true])) == [])
        #expect(try biases(config("qwen3")) == [])
        #expect(try biases(config("qwen3", overrides: ["attention_bias": false])) == [])
        // Nor do Mixtral's and Phi-3's: before, a config saying true gained biases.
        #expect(try biases(config("mixtral", overrides: ["attention_bias": true, "num_local_experts": 2])) == [])
        #expect(try biases(config("phi3", overrides: ["attention_bias": true])) == [])
        // A family not audited reads attention_bias as written, as before.
        #expect(try config("gpt_oss", overrides: ["attention_bias": true]).attentionBias)
        #expect(try ReferenceArchitecture(config: config("qwen2"), contextLength: 16).qkvBias)
        #expect(
            try ReferenceArchitecture(config: config("qwen2", overrides: ["attention_bias": false]), contextLength: 16)
                .qkvBias)
        #expect(
            try !ReferenceArchitecture(
                config: config("mistral", overrides: ["attention_bias": true]), contextLength: 16
            )
            .qkvBias)
    }

    @Test(
        "qwen3's and qwen3_moe's attention_bias biases o_proj too, which the graph cannot hold: true is refused (exit 69)",
        arguments: ["qwen3", "qwen3_moe"])
    func qwen3OutputBias(_ family: String) throws {
        // Before, qwen3_moe's true gave q, k and v biases and no o_proj bias.
        let error = #expect(throws: ConfigError.self) { try config(family, overrides: ["attention_bias": true]) }
        #expect(
            error?.description.hasSuffix(
                "'attention_bias' is true: it biases o_proj too, which the graph cannot describe (qkv_bias covers q, k, v)"
            )
                == true)
        #expect(error?.exitStatus == .unsupported)
    }

    /// The tensors of layer 0's MLP that the registry lays out for a tiny qwen3_moe of two experts.
    private func qwen3MoeMLP(_ overrides: [String: Any?]) throws -> [String: [Int]] {
        let parsed = try config("qwen3_moe", overrides: ["num_experts": 2].merging(overrides) { $1 })
        let tensors = try ArchitectureRegistry.tensors(for: parsed, configPath: "config.json")
        return Dictionary(
            uniqueKeysWithValues: tensors.filter { $0.name.hasPrefix("model.layers.0.mlp.") }.map {
                ($0.name.replacingOccurrences(of: "model.layers.0.mlp.", with: ""), $0.shape)
            })
    }

    @Test("qwen3_moe experts are moe_intermediate_size wide, 768 when absent (Qwen3MoeConfig's default)")
    func qwen3MoeExpertWidth() throws {
        // Before, an absent moe_intermediate_size made the experts intermediate_size (128) wide.
        let absent = try qwen3MoeMLP([:])
        #expect(absent["experts.1.gate_proj.weight"] == [768, 64])
        #expect(absent["experts.1.down_proj.weight"] == [64, 768])
        #expect(absent["gate.weight"] == [2, 64])
        #expect(try qwen3MoeMLP(["moe_intermediate_size": 32])["experts.0.up_proj.weight"] == [32, 64])
        for (value, message) in [
            (NSNull() as Any, "'moe_intermediate_size' should be an integer, found null"),
            ("32", "'moe_intermediate_size' should be an integer, found a string"),
            (0, "'moe_intermediate_size' must be positive, found 0"),
        ] {
            let error = #expect(throws: ConfigError.self) { try qwen3MoeMLP(["moe_intermediate_size": value]) }
            #expect(error?.description == "config 'config.json': " + message)
            #expect(error?.exitStatus == .badInput)
        }
    }

    @Test(
        "a qwen3_moe whose decoder_sparse_step or mlp_only_layers leaves a layer without experts is refused (exit 69)",
        arguments: [
            (
                ["decoder_sparse_step": 2] as [String: Any],
                "'decoder_sparse_step' is 2: 1 of 2 layers have no experts; experts in every layer are supported"
            ),
            (
                ["decoder_sparse_step": 3],
                "'decoder_sparse_step' is 3: 2 of 2 layers have no experts; "
                    + "experts in every layer are supported"
            ),
            (
                ["mlp_only_layers": [1, 7]],
                "'mlp_only_layers' names 1 of 2 layers, which have no experts; experts in every layer are supported"
            ),
            (
                ["mlp_only_layers": [0, 1]],
                "'mlp_only_layers' names 2 of 2 layers, which have no experts; experts in every layer are supported"
            ),
        ])
    func qwen3MoeDenseLayers(_ overrides: [String: Any], _ message: String) throws {
        // Before, every layer got a router and experts: a real checkpoint then failed on a missing
        // tensor, a synthetic one was made of experts transformers does not have.
        let error = #expect(throws: ConfigError.self) { try qwen3MoeMLP(overrides) }
        #expect(error?.description == "config 'config.json': " + message)
        #expect(error?.exitStatus == .unsupported)
    }

    @Test(
        "a qwen3_moe with experts in every layer: decoder_sparse_step 1, mlp_only_layers empty or past the last layer")
    func qwen3MoeSparseEverywhere() throws {
        for overrides: [String: Any?] in [
            [:], ["decoder_sparse_step": 1], ["mlp_only_layers": []], ["mlp_only_layers": [2, -1]],
            ["decoder_sparse_step": NSNull(), "mlp_only_layers": NSNull()],
        ] {
            #expect(try qwen3MoeMLP(overrides)["gate.weight"] == [2, 64], "\(overrides)")
        }
        let error = #expect(throws: ConfigError.self) { try qwen3MoeMLP(["mlp_only_layers": ["0"]]) }
        #expect(
            error?.description
                == "config 'config.json': 'mlp_only_layers' should be an array of integers, found a string")
        let zero = #expect(throws: ConfigError.self) { try qwen3MoeMLP(["decoder_sparse_step": 0]) }
        #expect(zero?.description == "config 'config.json': 'decoder_sparse_step' must be positive, found 0")
    }

    @Test("gemma3_text's tensors are known, but the registry refuses to lay them out for an export (exit 69)")
    func gemma3Refusal() throws {
        let family = try ArchitectureRegistry.family(for: "gemma3")
        #expect(family.layout != nil)
        #expect(
            family.exportRefusal?.hasPrefix(
                "its MLP activated by hidden_activation (gelu_pytorch_tanh when absent; hidden_act is not read)")
                == true)
        #expect(
            ArchitectureRegistry.families.filter { $0.exportRefusal != nil }.map(\.modelType) == ["gemma3_text"])
        let error = #expect(throws: RegistryError.self) {
            try ArchitectureRegistry.tensors(for: config("gemma3_text"), configPath: "config.json")
        }
        #expect(error == .graphCannotDescribe(modelType: "gemma3_text", reason: family.exportRefusal ?? ""))
        #expect(error?.exitStatus == .unsupported)
    }

    @Test("the families that export read the config as their transformers class; the others as before")
    func configReadings() throws {
        let audited = ArchitectureRegistry.families.filter { $0.configReading != .unaudited }.map(\.modelType)
        #expect(audited == ["mistral", "mixtral", "phi3", "qwen2", "qwen3", "qwen3_moe"])
        let qwen2 = try ArchitectureRegistry.family(for: "qwen2").configReading
        #expect(qwen2.keyValueHeads == 32)
        #expect(qwen2.window == .switched(useSlidingWindow: false, slidingWindow: 4096, maxWindowLayers: 28))
        #expect(try ArchitectureRegistry.family(for: "qwen3").configReading.headDimension == 128)
        #expect(
            try ArchitectureRegistry.family(for: "mistral").configReading.window == .everyLayer(slidingWindow: 4096))
        #expect(try ArchitectureRegistry.family(for: "mixtral").configReading.window == .everyLayer(slidingWindow: nil))
        #expect(
            try ArchitectureRegistry.family(for: "qwen3_moe").configReading.window
                == .switched(useSlidingWindow: false, slidingWindow: 4096, maxWindowLayers: nil))
    }
}
