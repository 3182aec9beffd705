/// Bounds that keep every size the tool derives from a config (tensor shapes, parameter
/// counts, KV cache, working memory) inside 64-bit arithmetic, so that a hostile config is
/// an error message, never an overflow trap or a tensor list that exhausts memory.
extension ModelConfig {
    /// More decoder layers than any real model (the largest have about 130).
    public static let largestLayerCount = 4096
    /// More tensors than any real checkpoint (mixtures of experts reach tens of thousands).
    public static let largestTensorCount = 1 << 20
    /// 2^44 (about 17.6 trillion) parameters: far beyond any checkpoint, far below overflow.
    public static let largestParameterCount = 1 << 44
    /// 2^60 bytes (1 EiB) of KV cache or attention scores at `max_position_embeddings`.
    public static let largestDerivedBytes = 1 << 60

    /// Checks that the dimensions together describe a model that can exist.
    /// - Throws: `ConfigError.invalidValue` for too many layers, `ConfigError.impossibleModel`
    ///   when parameters, KV cache or attention scores would be absurd.
    func checkPlausible(path: String) throws {
        guard layerCount <= ModelConfig.largestLayerCount else {
            throw ConfigError.invalidValue(
                path: path, field: "num_hidden_layers",
                reason: "is absurdly large (\(layerCount) > \(ModelConfig.largestLayerCount))")
        }
        let queryWidth = [attentionHeads, headDimension].saturatingProduct
        let keyValueWidth = [keyValueHeads, headDimension].saturatingProduct
        let perLayer = [
            [hiddenSize, queryWidth, 2].saturatingProduct, [hiddenSize, keyValueWidth, 2].saturatingProduct,
            [hiddenSize, intermediateSize, 3].saturatingProduct, queryWidth, [keyValueWidth, 2].saturatingProduct,
            [hiddenSize, 2].saturatingProduct,
        ].saturatingSum
        let parameters = [
            [vocabularySize, hiddenSize, 2].saturatingProduct, [layerCount, perLayer].saturatingProduct, hiddenSize,
        ].saturatingSum
        guard parameters <= ModelConfig.largestParameterCount else {
            throw ConfigError.impossibleModel(
                path: path, reason: "more than \(ModelConfig.largestParameterCount) parameters")
        }
        // Float32 K and V of every layer at the longest context.
        let kvCache = [2, layerCount, keyValueWidth, maxPositionEmbeddings, 4].saturatingProduct
        guard kvCache <= ModelConfig.largestDerivedBytes else {
            throw ConfigError.impossibleModel(
                path: path,
                reason: "a KV cache of more than \(ModelConfig.largestDerivedBytes) bytes at max_position_embeddings")
        }
        // Float32 attention scores of a prefill chunk over the longest context.
        let scores = [attentionHeads, MemoryEstimate.prefillChunk, maxPositionEmbeddings, 4].saturatingProduct
        guard scores <= ModelConfig.largestDerivedBytes else {
            throw ConfigError.impossibleModel(
                path: path,
                reason:
                    "attention scores of more than \(ModelConfig.largestDerivedBytes) bytes at max_position_embeddings")
        }
    }
}
