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
        // A family not audited reads attention_bias as written, as before.
        #expect(try biases(config("mixtral", overrides: ["attention_bias": true, "num_local_experts": 2])) == qkv)
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

    @Test("qwen3's attention_bias biases o_proj too, which the graph cannot hold: true is refused (exit 69)")
    func qwen3OutputBias() throws {
        let error = #expect(throws: ConfigError.self) { try config("qwen3", overrides: ["attention_bias": true]) }
        #expect(
            error?.description.hasSuffix(
                "'attention_bias' is true: it biases o_proj too, which the graph cannot describe (qkv_bias covers q, k, v)"
            )
                == true)
        #expect(error?.exitStatus == .unsupported)
    }

    @Test("the families with a fully specified graph read the config as their transformers class; the others as before")
    func configReadings() throws {
        let audited = ArchitectureRegistry.families.filter { $0.configReading != .unaudited }.map(\.modelType)
        #expect(audited == ["mistral", "qwen2", "qwen3"])
        let qwen2 = try ArchitectureRegistry.family(for: "qwen2").configReading
        #expect(qwen2.keyValueHeads == 32)
        #expect(qwen2.window == .switched(useSlidingWindow: false, slidingWindow: 4096, maxWindowLayers: 28))
        #expect(try ArchitectureRegistry.family(for: "qwen3").configReading.headDimension == 128)
        #expect(
            try ArchitectureRegistry.family(for: "mistral").configReading.window == .everyLayer(slidingWindow: 4096))
    }
}
