/// `graph.json` of a bundle: what a runtime needs to build the network at its static shapes.
/// Specified in `docs/FORMAT.md`.
public struct GraphDescription: Codable, Equatable, Sendable {
    /// The schema this version writes.
    public static let currentSchema = "exporter.graph/1"

    /// `exporter.graph/1`.
    public var schema: String
    /// The registry family (`qwen2`, `qwen3`, `mistral`, …).
    public var architecture: String
    /// Decoder layers.
    public var layers: Int
    /// Hidden size.
    public var hiddenSize: Int
    /// Feed-forward width.
    public var intermediateSize: Int
    /// Vocabulary size.
    public var vocabularySize: Int
    /// Static context length: the KV cache and causal mask are sized for it.
    public var contextLength: Int
    /// Compute precision of activations and KV cache.
    public var computePrecision: String
    /// Attention layout.
    public var attention: Attention
    /// Rotary position embedding.
    public var rope: Rope
    /// RMSNorm epsilon.
    public var rmsNormEpsilon: Double
    /// Activation of the gated MLP (`silu`: SwiGLU).
    public var activation: String
    /// Whether the output head reuses the token embedding.
    public var tieWordEmbeddings: Bool
    /// Static shapes of inputs, outputs and state.
    public var shapes: Shapes

    /// Attention layout: grouped-query attention.
    public struct Attention: Codable, Equatable, Sendable {
        /// Query heads.
        public var heads: Int
        /// Key/value heads (each shared by `heads / kv_heads` query heads).
        public var kvHeads: Int
        /// Head dimension.
        public var headDim: Int
        /// Whether q, k and v projections have biases.
        public var qkvBias: Bool
        /// Whether queries and keys are RMS-normalised per head before the rotation.
        public var qkNorm: Bool
        /// Sliding window in tokens, or null for full attention.
        @NullEncoded public var slidingWindow: Int?

        enum CodingKeys: String, CodingKey {
            case heads
            case kvHeads = "kv_heads"
            case headDim = "head_dim"
            case qkvBias = "qkv_bias"
            case qkNorm = "qk_norm"
            case slidingWindow = "sliding_window"
        }
    }

    /// Rotary embedding parameters.
    public struct Rope: Codable, Equatable, Sendable {
        /// Base frequency.
        public var theta: Double
        /// `rope_scaling` type, or null.
        @NullEncoded public var scalingType: String?
        /// `rope_scaling` factor, or null.
        @NullEncoded public var scalingFactor: Double?

        enum CodingKeys: String, CodingKey {
            case theta
            case scalingType = "scaling_type"
            case scalingFactor = "scaling_factor"
        }

        /// Why `docs/FORMAT.md` gives the rotation no meaning, nil when it does: `linear`
        /// scaling divides each position by `scaling_factor` (`p' = p / scaling_factor`), which
        /// must then be a positive number. Other scaling types have a meaning of their own, and
        /// each reader refuses those it does not compute.
        public var problem: String? {
            guard scalingType == "linear" else { return nil }
            guard let factor = scalingFactor else {
                return "rope.scaling_type is 'linear' but rope.scaling_factor is null; "
                    + "linear scaling divides positions by it"
            }
            guard factor > 0, factor.isFinite else {
                return "rope.scaling_factor is \(factor); linear scaling divides positions by a positive number"
            }
            return nil
        }
    }

    /// Static shapes.
    public struct Shapes: Codable, Equatable, Sendable {
        /// Token ids in: `[1, context_length]` at most (int32).
        public var inputIDs: [Int]
        /// Logits out for one position: `[1, vocab]`.
        public var logits: [Int]
        /// One layer's K (or V) cache: `[kv_heads, context_length, head_dim]`.
        public var kvCachePerLayer: [Int]
        /// The causal mask: `[context_length, context_length]`.
        public var causalMask: [Int]

        enum CodingKeys: String, CodingKey {
            case logits
            case inputIDs = "input_ids"
            case kvCachePerLayer = "kv_cache_per_layer"
            case causalMask = "causal_mask"
        }
    }

    enum CodingKeys: String, CodingKey {
        case schema, architecture, layers, attention, rope, activation, shapes
        case hiddenSize = "hidden_size"
        case intermediateSize = "intermediate_size"
        case vocabularySize = "vocab_size"
        case contextLength = "context_length"
        case computePrecision = "compute_precision"
        case rmsNormEpsilon = "rms_norm_eps"
        case tieWordEmbeddings = "tie_word_embeddings"
    }

    /// The graph of `plan`.
    public init(plan: ExportPlan) {
        let config = plan.model.config
        let family = plan.model.family
        let scaling = config.ropeScaling.objectValue
        schema = GraphDescription.currentSchema
        architecture = family.modelType
        layers = config.layerCount
        hiddenSize = config.hiddenSize
        intermediateSize = family.mlpWidth(config)
        vocabularySize = config.vocabularySize
        contextLength = plan.contextLength
        computePrecision = plan.precision.rawValue
        attention = Attention(
            heads: config.attentionHeads, kvHeads: config.keyValueHeads, headDim: config.headDimension,
            qkvBias: plan.tensors.contains { $0.spec.name.hasSuffix("self_attn.q_proj.bias") },
            qkNorm: family.hasQueryKeyNorm,
            slidingWindow: config.attentionWindow)
        // `default` is no scaling, whatever factor it carries (transformers ignores it): written
        // as none, so that no runtime applies the factor.
        let scalingType = scaling?["rope_type"]?.stringValue ?? scaling?["type"]?.stringValue
        let scales = scalingType != nil && scalingType != "default"
        rope = Rope(
            theta: config.ropeTheta, scalingType: scales ? scalingType : nil,
            scalingFactor: scales ? scaling?["factor"]?.doubleValue : nil)
        rmsNormEpsilon = config.rmsNormEpsilon
        activation = "silu"
        tieWordEmbeddings = config.tieWordEmbeddings
        shapes = Shapes(
            inputIDs: [1, plan.contextLength], logits: [1, config.vocabularySize],
            kvCachePerLayer: [config.keyValueHeads, plan.contextLength, config.headDimension],
            causalMask: [plan.contextLength, plan.contextLength])
    }
}
