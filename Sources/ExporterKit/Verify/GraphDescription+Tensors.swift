import Foundation

extension GraphDescription {
    /// The tensors the graph's architecture lays out, names and shapes in the registry's
    /// order, or nil for a family whose layout needs config fields the graph does not record
    /// (experts, for instance): what `verify` holds a manifest's tensor list against.
    func expectedTensors() -> [TensorSpec]? {
        let config: [String: Any] = [
            "model_type": architecture, "hidden_size": hiddenSize, "intermediate_size": intermediateSize,
            "num_hidden_layers": layers, "num_attention_heads": attention.heads,
            "num_key_value_heads": attention.kvHeads,
            "head_dim": attention.headDim, "vocab_size": vocabularySize, "max_position_embeddings": contextLength,
            "tie_word_embeddings": tieWordEmbeddings, "attention_bias": attention.qkvBias,
        ]
        guard let data = try? JSONSerialization.data(withJSONObject: config, options: [.sortedKeys]),
            let parsed = try? ModelConfig(bytes: [UInt8](data), path: BundleWriter.graphName)
        else { return nil }
        return try? ArchitectureRegistry.tensors(for: parsed, configPath: BundleWriter.graphName)
    }
}
