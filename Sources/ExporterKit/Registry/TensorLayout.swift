import Foundation

/// What a tensor is for: sizes are reported by group and compression rules often match by role.
public enum TensorRole: String, Codable, Sendable, CaseIterable {
    /// The token embedding table.
    case embedding
    /// Attention projections (query, key, value, output) and their biases.
    case attention
    /// Feed-forward projections, including mixture-of-experts experts and router.
    case mlp
    /// Normalisation weights.
    case norm
    /// The output projection to the vocabulary (absent when tied to the embedding).
    case head
}

/// One tensor an architecture expects, with a name template and its shape from the config.
public struct TensorTemplate: Sendable {
    /// The name, with `{layer}` and `{expert}` placeholders where they apply.
    public let name: String
    /// What the tensor is for.
    public let role: TensorRole
    /// The shape as a function of the config (PyTorch order: output channels first).
    public let shape: @Sendable (ModelConfig) -> [Int]
    /// When non-nil, the tensor exists only if this returns true (e.g. biases, untied head).
    public let condition: (@Sendable (ModelConfig) -> Bool)?

    /// A template; `condition` nil means always present.
    public init(
        _ name: String, _ role: TensorRole, shape: @escaping @Sendable (ModelConfig) -> [Int],
        when condition: (@Sendable (ModelConfig) -> Bool)? = nil
    ) {
        self.name = name
        self.role = role
        self.shape = shape
        self.condition = condition
    }
}

/// The tensors of an architecture: before the layers, in each layer, in each expert of a layer, after.
public struct TensorLayout: Sendable {
    /// Tensors before the decoder layers (the embedding).
    public let leading: [TensorTemplate]
    /// Tensors of every decoder layer (`{layer}` placeholder).
    public let perLayer: [TensorTemplate]
    /// Tensors of every expert of every layer (`{layer}` and `{expert}`), for mixtures of experts.
    public let perExpert: [TensorTemplate]
    /// The config key giving the number of experts (nil for dense models).
    public let expertCountKey: String?
    /// The config key of each expert's width and the width when it is absent, which the expert
    /// templates read (Qwen3-MoE: `moe_intermediate_size`, 768); nil when they read
    /// `intermediate_size`. Where present, the key must be a positive integer.
    public let expertWidthKey: ExtraKey?
    /// Whether the family's `decoder_sparse_step` (1 when absent) and `mlp_only_layers` (none when
    /// absent) give some layers one MLP and no experts (Qwen3-MoE): since the layout gives every
    /// layer experts, a config that does is refused.
    public let readsDenseLayers: Bool
    /// Tensors after the layers (final norm, head).
    public let trailing: [TensorTemplate]

    /// A layout; dense architectures leave `perExpert` empty.
    public init(
        leading: [TensorTemplate], perLayer: [TensorTemplate], perExpert: [TensorTemplate] = [],
        expertCountKey: String? = nil, expertWidthKey: ExtraKey? = nil, readsDenseLayers: Bool = false,
        trailing: [TensorTemplate]
    ) {
        self.leading = leading
        self.perLayer = perLayer
        self.perExpert = perExpert
        self.expertCountKey = expertCountKey
        self.expertWidthKey = expertWidthKey
        self.readsDenseLayers = readsDenseLayers
        self.trailing = trailing
    }
}

/// A config key outside the standard set, with the integer `transformers` uses when it is absent.
public struct ExtraKey: Sendable, Equatable {
    /// The key.
    public let name: String
    /// Its value when the key is absent.
    public let whenAbsent: Int

    /// The value of the key in `config` (``whenAbsent`` when absent), unchecked: a layout checks
    /// it (``ModelConfig/extraPositiveInt(_:path:whenAbsent:)``) before any shape is asked for.
    public func value(in config: ModelConfig) -> Int {
        config.raw[name]?.intValue ?? whenAbsent
    }
}

/// A concrete tensor of a concrete model: name, shape, role and layer.
public struct TensorSpec: Equatable, Sendable, Codable {
    /// The checkpoint name, e.g. `model.layers.3.self_attn.q_proj.weight`.
    public let name: String
    /// The shape, output channels first.
    public let shape: [Int]
    /// What the tensor is for.
    public let role: TensorRole
    /// The decoder layer it belongs to (nil for embedding, final norm and head).
    public let layer: Int?

    /// Creates a tensor description.
    public init(name: String, shape: [Int], role: TensorRole, layer: Int?) {
        self.name = name
        self.shape = shape
        self.role = role
        self.layer = layer
    }

    /// Number of elements (parameters).
    public var elementCount: Int { shape.reduce(1, *) }

    /// Output channels (rows) and input channels (columns) seen as a matrix; a 1-D tensor is one row.
    public var matrixShape: (rows: Int, columns: Int) {
        shape.count >= 2 ? (shape[0], shape.dropFirst().reduce(1, *)) : (1, shape.first ?? 1)
    }
}

extension TensorLayout {
    /// The tensors of a model with this layout, in execution order.
    /// - Throws: `ConfigError` when an expert-count key is missing from the config, an expert
    ///   width is not a positive integer, or some layers have no experts.
    public func tensors(for config: ModelConfig, configPath: String) throws -> [TensorSpec] {
        let expertCount = try expertCountKey.map { try config.extraPositiveInt($0, path: configPath) } ?? 0
        if let key = expertWidthKey {
            _ = try config.extraPositiveInt(key.name, path: configPath, whenAbsent: key.whenAbsent)
        }
        if readsDenseLayers { try config.requireExpertsInEveryLayer(path: configPath) }
        let perLayerCount = [perLayer.count, [expertCount, perExpert.count].saturatingProduct].saturatingSum
        let tensorCount = [leading.count, trailing.count, [config.layerCount, perLayerCount].saturatingProduct]
            .saturatingSum
        guard tensorCount <= ModelConfig.largestTensorCount else {
            throw ConfigError.impossibleModel(
                path: configPath, reason: "more than \(ModelConfig.largestTensorCount) tensors")
        }
        func instantiate(_ template: TensorTemplate, layer: Int?, expert: Int?) -> TensorSpec? {
            if let condition = template.condition, !condition(config) { return nil }
            var name = template.name
            if let layer { name = name.replacingOccurrences(of: "{layer}", with: String(layer)) }
            if let expert { name = name.replacingOccurrences(of: "{expert}", with: String(expert)) }
            return TensorSpec(name: name, shape: template.shape(config), role: template.role, layer: layer)
        }
        var result = leading.compactMap { instantiate($0, layer: nil, expert: nil) }
        for layer in 0..<config.layerCount {
            result += perLayer.compactMap { instantiate($0, layer: layer, expert: nil) }
            for expert in 0..<expertCount {
                result += perExpert.compactMap { instantiate($0, layer: layer, expert: expert) }
            }
        }
        result += trailing.compactMap { instantiate($0, layer: nil, expert: nil) }
        var parameters = 0
        for spec in result {
            guard spec.shape.allSatisfy({ $0 > 0 }) else {
                throw ConfigError.impossibleModel(
                    path: configPath, reason: "tensor '\(spec.name)' would have shape \(spec.shape)")
            }
            parameters = [parameters, spec.shape.saturatingProduct].saturatingSum
        }
        guard parameters <= ModelConfig.largestParameterCount else {
            throw ConfigError.impossibleModel(
                path: configPath, reason: "more than \(ModelConfig.largestParameterCount) parameters")
        }
        return result
    }
}
