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

    @Test("q/k/v biases follow the family's alwaysHasAttentionBias column unless the config says otherwise")
    func attentionBias() throws {
        let qkv = ["q", "k", "v"].map { "model.layers.0.self_attn.\($0)_proj.bias" }
        #expect(ArchitectureRegistry.families.filter(\.alwaysHasAttentionBias).map(\.modelType) == ["qwen2"])
        #expect(try biases(config("qwen2")) == qkv)
        #expect(try biases(config("qwen2_5")) == qkv)
        #expect(try biases(config("qwen2", overrides: ["attention_bias": false])) == [])
        #expect(try biases(config("mistral")) == [])
        #expect(try biases(config("qwen3")) == [])
        #expect(try biases(config("mistral", overrides: ["attention_bias": true])) == qkv)
        #expect(try ReferenceArchitecture(config: config("qwen2"), contextLength: 16).qkvBias)
        #expect(try !ReferenceArchitecture(config: config("mistral"), contextLength: 16).qkvBias)
        #expect(
            try ReferenceArchitecture(config: config("mistral", overrides: ["attention_bias": true]), contextLength: 16)
                .qkvBias)
    }
}
