import Foundation

/// The shape and hyper-parameters the reference forward pass needs, for the three iOS
/// families (Qwen2/2.5, Qwen3, Mistral): one decoder with grouped-query attention, rotary
/// positions, RMSNorm and a SwiGLU MLP. Built from a bundle's `graph.json` or from a
/// checkpoint's `config.json`, so the two sides of a comparison are described independently.
public struct ReferenceArchitecture: Equatable, Sendable {
    /// The families the reference forward pass implements.
    public static let supportedFamilies = ["mistral", "qwen2", "qwen3"]

    /// Registry family: `qwen2`, `qwen3` or `mistral`.
    public var family: String
    /// Decoder layers.
    public var layers: Int
    /// Hidden size.
    public var hiddenSize: Int
    /// MLP width.
    public var intermediateSize: Int
    /// Vocabulary size.
    public var vocabularySize: Int
    /// Query heads.
    public var heads: Int
    /// Key/value heads.
    public var kvHeads: Int
    /// Head dimension.
    public var headDim: Int
    /// Static context length: the KV cache holds this many positions.
    public var contextLength: Int
    /// Rotary base frequency.
    public var ropeTheta: Double
    /// Linear rotary scaling factor (positions are divided by it); 1 without scaling.
    public var ropeLinearFactor: Double
    /// RMSNorm epsilon.
    public var rmsNormEpsilon: Double
    /// q, k and v projections add a bias (Qwen2).
    public var qkvBias: Bool
    /// Queries and keys are RMS-normalised per head before the rotation (Qwen3).
    public var qkNorm: Bool
    /// The head reuses the token embedding.
    public var tiedEmbeddings: Bool
    /// Sliding attention window in tokens, nil for full attention.
    public var slidingWindow: Int?

    /// An architecture with every field given.
    public init(
        family: String, layers: Int, hiddenSize: Int, intermediateSize: Int, vocabularySize: Int, heads: Int,
        kvHeads: Int,
        headDim: Int, contextLength: Int, ropeTheta: Double, ropeLinearFactor: Double = 1, rmsNormEpsilon: Double,
        qkvBias: Bool, qkNorm: Bool, tiedEmbeddings: Bool, slidingWindow: Int? = nil
    ) {
        self.family = family
        self.layers = layers
        self.hiddenSize = hiddenSize
        self.intermediateSize = intermediateSize
        self.vocabularySize = vocabularySize
        self.heads = heads
        self.kvHeads = kvHeads
        self.headDim = headDim
        self.contextLength = contextLength
        self.ropeTheta = ropeTheta
        self.ropeLinearFactor = ropeLinearFactor
        self.rmsNormEpsilon = rmsNormEpsilon
        self.qkvBias = qkvBias
        self.qkNorm = qkNorm
        self.tiedEmbeddings = tiedEmbeddings
        self.slidingWindow = slidingWindow
    }

    /// The architecture a bundle's graph describes.
    /// - Throws: `ReferenceModelError` for a family or rotary scaling the reference does not implement.
    public init(graph: GraphDescription) throws {
        try self.init(
            family: graph.architecture, layers: graph.layers, hiddenSize: graph.hiddenSize,
            intermediateSize: graph.intermediateSize, vocabularySize: graph.vocabularySize,
            heads: graph.attention.heads,
            kvHeads: graph.attention.kvHeads, headDim: graph.attention.headDim, contextLength: graph.contextLength,
            ropeTheta: graph.rope.theta, ropeScaling: (graph.rope.scalingType, graph.rope.scalingFactor),
            rmsNormEpsilon: graph.rmsNormEpsilon, qkvBias: graph.attention.qkvBias, qkNorm: graph.attention.qkNorm,
            tiedEmbeddings: graph.tieWordEmbeddings, slidingWindow: graph.attention.slidingWindow)
    }

    /// The architecture a checkpoint's config describes, at `contextLength` tokens.
    /// - Throws: `RegistryError` for an unknown model type, `ReferenceModelError` for one the
    ///   reference does not implement.
    public init(config: ModelConfig, contextLength: Int) throws {
        let family = try ArchitectureRegistry.family(for: config.modelType)
        let scaling = config.ropeScaling.objectValue
        try self.init(
            family: family.modelType, layers: config.layerCount, hiddenSize: config.hiddenSize,
            intermediateSize: config.intermediateSize, vocabularySize: config.vocabularySize,
            heads: config.attentionHeads,
            kvHeads: config.keyValueHeads, headDim: config.headDimension, contextLength: contextLength,
            ropeTheta: config.ropeTheta,
            ropeScaling: (
                scaling?["rope_type"]?.stringValue ?? scaling?["type"]?.stringValue, scaling?["factor"]?.doubleValue
            ),
            rmsNormEpsilon: config.rmsNormEpsilon,
            qkvBias: config.attentionBias, qkNorm: family.hasQueryKeyNorm,
            tiedEmbeddings: config.tieWordEmbeddings,
            slidingWindow: config.attentionWindow)
    }

    private init(
        family: String, layers: Int, hiddenSize: Int, intermediateSize: Int, vocabularySize: Int, heads: Int,
        kvHeads: Int,
        headDim: Int, contextLength: Int, ropeTheta: Double, ropeScaling: (type: String?, factor: Double?),
        rmsNormEpsilon: Double, qkvBias: Bool, qkNorm: Bool, tiedEmbeddings: Bool, slidingWindow: Int?
    ) throws {
        guard ReferenceArchitecture.supportedFamilies.contains(family) else {
            throw ReferenceModelError.unsupportedArchitecture(family)
        }
        var factor = 1.0
        switch ropeScaling.type {
        case nil, "default": break
        case "linear": factor = ropeScaling.factor ?? 1
        case let other?: throw ReferenceModelError.unsupportedRopeScaling(other)
        }
        guard heads > 0, kvHeads > 0, heads % kvHeads == 0, headDim % 2 == 0, factor > 0 else {
            throw ReferenceModelError.invalidArchitecture(
                "\(heads) heads, \(kvHeads) KV heads, head dimension \(headDim), rotary factor \(factor)")
        }
        self.init(
            family: family, layers: layers, hiddenSize: hiddenSize, intermediateSize: intermediateSize,
            vocabularySize: vocabularySize, heads: heads, kvHeads: kvHeads, headDim: headDim,
            contextLength: contextLength,
            ropeTheta: ropeTheta, ropeLinearFactor: factor, rmsNormEpsilon: rmsNormEpsilon, qkvBias: qkvBias,
            qkNorm: qkNorm,
            tiedEmbeddings: tiedEmbeddings, slidingWindow: slidingWindow)
    }

    /// The fields on which `self` and `other` disagree, as `name: self vs other` (the context
    /// length is left out: each side may be sized for another).
    public func differences(from other: ReferenceArchitecture) -> [String] {
        var result: [String] = []
        func compare<Value: Equatable>(_ name: String, _ a: Value, _ b: Value) {
            if a != b { result.append("\(name): \(a) vs \(b)") }
        }
        compare("architecture", family, other.family)
        compare("layers", layers, other.layers)
        compare("hidden_size", hiddenSize, other.hiddenSize)
        compare("intermediate_size", intermediateSize, other.intermediateSize)
        compare("vocab_size", vocabularySize, other.vocabularySize)
        compare("heads", heads, other.heads)
        compare("kv_heads", kvHeads, other.kvHeads)
        compare("head_dim", headDim, other.headDim)
        compare("rope_theta", ropeTheta, other.ropeTheta)
        compare("rope scaling factor", ropeLinearFactor, other.ropeLinearFactor)
        compare("rms_norm_eps", rmsNormEpsilon, other.rmsNormEpsilon)
        compare("qkv_bias", qkvBias, other.qkvBias)
        compare("qk_norm", qkNorm, other.qkNorm)
        compare("tie_word_embeddings", tiedEmbeddings, other.tiedEmbeddings)
        compare(
            "sliding_window", slidingWindow.map(String.init) ?? "none", other.slidingWindow.map(String.init) ?? "none")
        return result
    }
}

/// Why the reference forward pass cannot run.
public enum ReferenceModelError: ExporterError, Equatable {
    /// The family has no reference implementation.
    case unsupportedArchitecture(String)
    /// A `rope_scaling` type other than linear.
    case unsupportedRopeScaling(String)
    /// Impossible head counts or dimensions.
    case invalidArchitecture(String)
    /// A weight's shape differs from what the architecture needs.
    case shapeMismatch(tensor: String, expected: [Int], found: [Int])
    /// The token sequence cannot be run.
    case invalidTokens(String)
    /// The artifact's graph and the checkpoint's config describe different models.
    case architectureMismatch([String])
    /// Rows asked of a weight that lie outside its first dimension.
    case rowsOutOfRange(tensor: String, rows: Range<Int>, available: Int)

    /// The message, naming the tensor or the family at fault.
    public var description: String {
        switch self {
        case .unsupportedArchitecture(let family):
            return "the reference forward pass covers "
                + ReferenceArchitecture.supportedFamilies.joined(separator: ", ") + ", not '\(family)'"
        case .unsupportedRopeScaling(let type):
            return "the reference forward pass does not implement rope_scaling type '\(type)'"
        case .invalidArchitecture(let reason):
            return "invalid architecture: \(reason)"
        case .shapeMismatch(let tensor, let expected, let found):
            return "tensor '\(tensor)': shape \(found), the architecture needs \(expected)"
        case .invalidTokens(let reason):
            return reason
        case .architectureMismatch(let differences):
            return "the artifact's graph and the checkpoint's config differ: " + differences.joined(separator: "; ")
        case .rowsOutOfRange(let tensor, let rows, let available):
            return "tensor '\(tensor)': rows \(rows.lowerBound)..<\(rows.upperBound) asked of its \(available)"
        }
    }

    /// `unsupported` (69) for what the pass does not implement, `badInput` (65), `usage` (64) for
    /// the tokens, `verificationFailed` (1) when artifact and checkpoint disagree.
    public var exitStatus: ExitStatus {
        switch self {
        case .unsupportedArchitecture, .unsupportedRopeScaling: return .unsupported
        case .invalidArchitecture: return .badInput
        case .shapeMismatch, .architectureMismatch, .rowsOutOfRange: return .verificationFailed
        case .invalidTokens: return .usage
        }
    }
}
