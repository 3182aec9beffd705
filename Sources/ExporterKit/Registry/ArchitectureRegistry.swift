/// A model family the exporter knows: where it can be exported, and which tensors it has.
public struct ArchitectureFamily: Sendable {
    /// The `model_type` the registry knows it by (after remapping).
    public let modelType: String
    /// Whether a macOS export exists.
    public let supportsMacOS: Bool
    /// Whether an iOS export exists: it needs a static-shape implementation of its own.
    public let supportsIOS: Bool
    /// How the family's `transformers` configuration class reads the shared config keys: its
    /// defaults where `config.json` is silent, and what graph.json cannot describe for it.
    public let configReading: ConfigReading
    /// Whether each attention layer normalises queries and keys per head (Qwen3, Gemma 3).
    public let hasQueryKeyNorm: Bool
    /// The tensors of the family, or nil when the exporter cannot yet lay them out.
    public let layout: TensorLayout?
    /// What of the family's computation graph.json cannot describe, when that stops its exports
    /// although its tensors are known (gemma3_text); nil when it exports wherever it has a layout.
    public let exportRefusal: String?

    /// Whether an export for `platform` exists.
    public func supports(_ platform: Platform) -> Bool {
        platform == .iOS ? supportsIOS : supportsMacOS
    }

    /// The width of every layer's MLP: each expert's for a mixture of experts whose experts have
    /// a width of their own (Qwen3-MoE's `moe_intermediate_size`; its `intermediate_size` is the
    /// width of layers without experts, which are refused), else `intermediate_size`.
    public func mlpWidth(_ config: ModelConfig) -> Int {
        layout?.expertWidthKey?.value(in: config) ?? config.intermediateSize
    }
}

/// How a family's `transformers` configuration and modeling code read the keys that
/// ``ModelConfig`` reads for every family, where they differ between families: what an absent key
/// means, which keys the family ignores, and which values its graph cannot describe. Every family
/// that exports has its own (mistral, mixtral, phi3, qwen2, qwen3, qwen3_moe); the others keep
/// ``unaudited``, the exporter's generic reading.
public struct ConfigReading: Sendable, Equatable {
    /// `num_key_value_heads` when the key is absent (null is as many as the heads); nil: as many
    /// as the heads (multi-head attention).
    public let keyValueHeads: Int?
    /// `head_dim` when absent or null; nil: `hidden_size / num_attention_heads`.
    public let headDimension: Int?
    /// `rms_norm_eps` when absent or null.
    public let rmsNormEpsilon: Double
    /// `rope_theta` when neither it nor `rope_parameters.rope_theta` is given.
    public let ropeTheta: Double
    /// Which layers slide, and the window when `sliding_window` is absent.
    public let window: WindowRule
    /// Whether the attention projections carry biases.
    public let attentionBias: AttentionBiasRule
    /// The `rope_scaling` types (beside none and `default`) the graph describes for the family;
    /// any other is refused (every one when empty). Nil: not checked (graph.json records the type
    /// and factor only).
    public let ropeScalingTypes: [String]?

    /// The exporter's reading of a family not audited against its `transformers` classes: every
    /// default the generic one (`rms_norm_eps` 1e-6, `rope_theta` 10,000), `attention_bias` read
    /// as written, every scaling type recorded.
    public static let unaudited = ConfigReading(
        keyValueHeads: nil, headDimension: nil, rmsNormEpsilon: 1e-6, ropeTheta: 10_000, window: .generic,
        attentionBias: .configured, ropeScalingTypes: nil)
}

/// How a family decides which decoder layers attend through a sliding window.
public enum WindowRule: Sendable, Equatable {
    /// Qwen2, Qwen3 and Qwen3-MoE: `use_sliding_window` (`useSlidingWindow` when absent) turns
    /// the window on (`slidingWindow` when the key is absent); off, no layer slides. On, the layers
    /// `layer_types` names `sliding_attention` slide, or without it those from `max_window_layers`
    /// (`maxWindowLayers` when absent) on. With `maxWindowLayers` nil (Qwen3-MoE) neither key is
    /// read: every layer slides, and a `layer_types` that disagrees is refused.
    case switched(useSlidingWindow: Bool, slidingWindow: Int, maxWindowLayers: Int?)
    /// Mistral, Mixtral and Phi-3: `sliding_window` (`slidingWindow` when absent; nil: no window)
    /// applies to every layer; `use_sliding_window` and `max_window_layers` are not read, and
    /// `layer_types`, which these families do not read either, is refused where it disagrees.
    case everyLayer(slidingWindow: Int?)
    /// The generic reading: `layer_types`, else `sliding_window_pattern` (Gemma 3), else
    /// `use_sliding_window` (on when absent) from `max_window_layers` (0 when absent) on; an
    /// absent `sliding_window` is no window.
    case generic
}

/// Whether a family's attention projections carry biases.
public enum AttentionBiasRule: Sendable, Equatable {
    /// q, k and v always do, whatever `attention_bias` says (Qwen2: the key is not read).
    case always
    /// None does, whatever `attention_bias` says (Mistral: the key is not read).
    case never
    /// q, k and v do when `attention_bias` is true (false when absent).
    case configured
    /// `attention_bias` (false when absent) biases q, k, v and o: true is refused, since the
    /// graph has no bias on `o_proj` (Qwen3).
    case configuredWithOutput
}

/// Target platform of an export.
public enum Platform: String, Codable, Sendable, CaseIterable {
    /// iPhone and iPad: only families with a static-shape implementation export.
    case iOS
    /// Mac: every family with a tensor layout exports.
    case macOS
}

/// Why the registry refuses a model; messages are the reference tool's, word for word.
public enum RegistryError: ExporterError, Equatable {
    /// The model type is not one of the ten families.
    case unknownModelType(String, available: [String])
    /// The family has no iOS implementation; no flag overrides this.
    case noIOSVariant(modelType: String)
    /// The family is known but the exporter cannot lay out its tensors yet.
    case noTensorLayout(modelType: String)
    /// The family's tensors are known but graph.json cannot describe its computation.
    case graphCannotDescribe(modelType: String, reason: String)

    /// The reference tool's message, word for word, for the first two; ours, lowercase, for the others.
    public var description: String {
        switch self {
        case .unknownModelType(let type, let available):
            return "Unknown model type '\(type)'. Available: \(available.joined(separator: ", "))"
        case .noIOSVariant(let type):
            return "Model '\(type)' does not support iOS variant"
        case .noTensorLayout(let type):
            return "model type '\(type)' is registered but its tensor layout is not known to this version; "
                + "see docs/ADDING_AN_ARCHITECTURE.md"
        case .graphCannotDescribe(let type, let reason):
            return "model type '\(type)' is registered but graph.json cannot describe it: \(reason)"
        }
    }

    /// `unsupported` (69): the registry's refusals; no flag overrides them.
    public var exitStatus: ExitStatus { .unsupported }
}

/// The ten families of the reference registry, as one table. Adding a family is adding a row
/// (and, for a new tensor layout, a layout below): see `docs/ADDING_AN_ARCHITECTURE.md`.
public enum ArchitectureRegistry {
    /// Model types renamed before the lookup, as the reference tool does.
    public static let modelTypeRemapping: [String: String] = ["qwen2_5": "qwen2", "gemma3": "gemma3_text"]

    /// Every known family, sorted by model type.
    public static let families: [ArchitectureFamily] = [
        family("gemma3_text", iOS: false, queryKeyNorm: true, layout: gemma3Layout, refusal: gemma3Refusal),
        family("gpt_oss", iOS: false, layout: nil),
        family("mistral", iOS: true, reading: mistralReading, layout: llamaLikeLayout(queryKeyNorm: false)),
        family("mixtral", iOS: false, reading: mixtralReading, layout: mixtralLayout),
        family("muse_glimmer_text", iOS: false, layout: nil),
        family("phi3", iOS: false, reading: phi3Reading, layout: phi3Layout),
        family("qwen2", iOS: true, reading: qwen2Reading, layout: llamaLikeLayout(queryKeyNorm: false)),
        family(
            "qwen3", iOS: true, queryKeyNorm: true, reading: qwen3Reading, layout: llamaLikeLayout(queryKeyNorm: true)),
        family("qwen3_moe", iOS: false, queryKeyNorm: true, reading: qwen3MoeReading, layout: qwen3MoeLayout),
        family("qwen3_vl", iOS: false, layout: nil),
    ]

    /// The model types known, sorted.
    public static var modelTypes: [String] { families.map(\.modelType) }

    /// The registry name of `modelType` after remapping.
    public static func canonicalModelType(_ modelType: String) -> String {
        modelTypeRemapping[modelType] ?? modelType
    }

    /// The family of `modelType` (remapped first).
    /// - Throws: `RegistryError.unknownModelType` listing the known types.
    public static func family(for modelType: String) throws -> ArchitectureFamily {
        let canonical = canonicalModelType(modelType)
        guard let found = families.first(where: { $0.modelType == canonical }) else {
            throw RegistryError.unknownModelType(modelType, available: modelTypes)
        }
        return found
    }

    /// The family of `modelType`, checked for `platform`.
    /// - Throws: `RegistryError` when the type is unknown or has no implementation for the platform.
    public static func family(for modelType: String, platform: Platform) throws -> ArchitectureFamily {
        let found = try family(for: modelType)
        guard found.supports(platform) else { throw RegistryError.noIOSVariant(modelType: found.modelType) }
        return found
    }

    /// The family of `modelType`, checked for `platform` and for an export: every refusal that
    /// depends on the model type alone, which comes before anything else of the config is read.
    /// - Throws: `RegistryError` when the type is unknown, has no implementation for the
    ///   platform, no known tensor layout, or a computation graph.json cannot describe.
    public static func exportableFamily(for modelType: String, platform: Platform) throws -> ArchitectureFamily {
        let found = try family(for: modelType, platform: platform)
        _ = try exportLayout(of: found)
        return found
    }

    /// The concrete tensors of `config`, in execution order.
    /// - Throws: `RegistryError` for an unknown type, an unknown layout or a family graph.json
    ///   cannot describe, `ConfigError` for a missing key or a config the layout cannot describe.
    public static func tensors(for config: ModelConfig, configPath: String) throws -> [TensorSpec] {
        try exportLayout(of: family(for: config.modelType)).tensors(for: config, configPath: configPath)
    }

    /// The tensor layout `family` exports with.
    /// - Throws: `RegistryError.noTensorLayout`, `.graphCannotDescribe`.
    private static func exportLayout(of family: ArchitectureFamily) throws -> TensorLayout {
        guard let layout = family.layout else { throw RegistryError.noTensorLayout(modelType: family.modelType) }
        if let reason = family.exportRefusal {
            throw RegistryError.graphCannotDescribe(modelType: family.modelType, reason: reason)
        }
        return layout
    }

    /// The family's ``ArchitectureFamily/configReading``: ``ConfigReading/unaudited`` for an unknown type.
    static func configReading(_ modelType: String) -> ConfigReading {
        (try? family(for: modelType))?.configReading ?? .unaudited
    }

    private static func family(
        _ modelType: String, iOS: Bool, queryKeyNorm: Bool = false, reading: ConfigReading = .unaudited,
        layout: TensorLayout?, refusal: String? = nil
    ) -> ArchitectureFamily {
        ArchitectureFamily(
            modelType: modelType, supportsMacOS: true, supportsIOS: iOS, configReading: reading,
            hasQueryKeyNorm: queryKeyNorm, layout: layout, exportRefusal: refusal)
    }

    /// Gemma3TextConfig's model beside the graph's: a gelu MLP (`hidden_activation` is
    /// gelu_pytorch_tanh when absent), sliding and full layers rotating by different bases,
    /// `(1 + weight)` norms, embeddings scaled by √hidden_size, scores by `query_pre_attn_scalar`.
    private static let gemma3Refusal =
        "its MLP activated by hidden_activation (gelu_pytorch_tanh when absent; hidden_act is not read), a rotary base per layer type (rope_local_base_freq), (1 + weight) norms, "
        + "embeddings scaled by √hidden_size and scores by query_pre_attn_scalar"

    // MARK: Config readings (the defaults of transformers' configuration classes, 4.45 to 5.x)

    /// Qwen2Config: 32 KV heads, the window off unless `use_sliding_window`, from layer 28 on;
    /// q, k and v always biased.
    private static let qwen2Reading = ConfigReading(
        keyValueHeads: 32, headDimension: nil, rmsNormEpsilon: 1e-6, ropeTheta: 10_000,
        window: .switched(useSlidingWindow: false, slidingWindow: 4096, maxWindowLayers: 28),
        attentionBias: .always, ropeScalingTypes: ["linear"])

    /// Qwen3Config: as Qwen2's, with a head dimension of 128 and `attention_bias` (false) on all
    /// four projections.
    private static let qwen3Reading = ConfigReading(
        keyValueHeads: 32, headDimension: 128, rmsNormEpsilon: 1e-6, ropeTheta: 10_000,
        window: .switched(useSlidingWindow: false, slidingWindow: 4096, maxWindowLayers: 28),
        attentionBias: .configuredWithOutput, ropeScalingTypes: ["linear"])

    /// MistralConfig: 8 KV heads, a 4,096-token window on every layer unless `sliding_window` is
    /// null, no biases.
    private static let mistralReading = ConfigReading(
        keyValueHeads: 8, headDimension: nil, rmsNormEpsilon: 1e-6, ropeTheta: 10_000,
        window: .everyLayer(slidingWindow: 4096), attentionBias: .never, ropeScalingTypes: ["linear"])

    /// MixtralConfig: 8 KV heads, `rms_norm_eps` 1e-5, `rope_theta` 1,000,000, no window unless
    /// `sliding_window` (then on every layer), no biases (`attention_bias` is not read).
    private static let mixtralReading = ConfigReading(
        keyValueHeads: 8, headDimension: nil, rmsNormEpsilon: 1e-5, ropeTheta: 1_000_000,
        window: .everyLayer(slidingWindow: nil), attentionBias: .never, ropeScalingTypes: ["linear"])

    /// Phi3Config: as many KV heads as heads, `rms_norm_eps` 1e-5, no window unless
    /// `sliding_window` (then on every layer), no biases; its one scaling, longrope (`su` and
    /// `yarn` are read as it), needs per-dimension factors the graph cannot hold.
    private static let phi3Reading = ConfigReading(
        keyValueHeads: nil, headDimension: nil, rmsNormEpsilon: 1e-5, ropeTheta: 10_000,
        window: .everyLayer(slidingWindow: nil), attentionBias: .never, ropeScalingTypes: [])

    /// Qwen3MoeConfig: 4 KV heads, the window off unless `use_sliding_window`, then on every layer
    /// (`max_window_layers` and `layer_types` are not read), `attention_bias` on all four projections.
    private static let qwen3MoeReading = ConfigReading(
        keyValueHeads: 4, headDimension: nil, rmsNormEpsilon: 1e-6, ropeTheta: 10_000,
        window: .switched(useSlidingWindow: false, slidingWindow: 4096, maxWindowLayers: nil),
        attentionBias: .configuredWithOutput, ropeScalingTypes: ["linear"])

    // MARK: Tensor layouts (Hugging Face transformers names; shapes output-first)

    private static let embedding = TensorTemplate(
        "model.embed_tokens.weight", .embedding, shape: { [$0.vocabularySize, $0.hiddenSize] })
    private static let finalNorm = TensorTemplate("model.norm.weight", .norm, shape: { [$0.hiddenSize] })
    private static let untiedHead = TensorTemplate(
        "lm_head.weight", .head, shape: { [$0.vocabularySize, $0.hiddenSize] }, when: { !$0.tieWordEmbeddings })

    private static func layerNorm(_ name: String) -> TensorTemplate {
        TensorTemplate("model.layers.{layer}.\(name).weight", .norm, shape: { [$0.hiddenSize] })
    }

    /// Query/key/value/output projections; biases on q, k, v when the family or config asks for them.
    private static func attentionProjections(queryKeyNorm: Bool) -> [TensorTemplate] {
        let prefix = "model.layers.{layer}.self_attn."
        let hasBias: @Sendable (ModelConfig) -> Bool = { $0.attentionBias }
        var templates = [
            TensorTemplate(
                prefix + "q_proj.weight", .attention, shape: { [$0.attentionHeads * $0.headDimension, $0.hiddenSize] }),
            TensorTemplate(
                prefix + "q_proj.bias", .attention, shape: { [$0.attentionHeads * $0.headDimension] }, when: hasBias),
            TensorTemplate(
                prefix + "k_proj.weight", .attention, shape: { [$0.keyValueHeads * $0.headDimension, $0.hiddenSize] }),
            TensorTemplate(
                prefix + "k_proj.bias", .attention, shape: { [$0.keyValueHeads * $0.headDimension] }, when: hasBias),
            TensorTemplate(
                prefix + "v_proj.weight", .attention, shape: { [$0.keyValueHeads * $0.headDimension, $0.hiddenSize] }),
            TensorTemplate(
                prefix + "v_proj.bias", .attention, shape: { [$0.keyValueHeads * $0.headDimension] }, when: hasBias),
            TensorTemplate(
                prefix + "o_proj.weight", .attention, shape: { [$0.hiddenSize, $0.attentionHeads * $0.headDimension] }),
        ]
        if queryKeyNorm {
            templates += [
                TensorTemplate(prefix + "q_norm.weight", .norm, shape: { [$0.headDimension] }),
                TensorTemplate(prefix + "k_norm.weight", .norm, shape: { [$0.headDimension] }),
            ]
        }
        return templates
    }

    private static let swiGLU: [TensorTemplate] = [
        TensorTemplate(
            "model.layers.{layer}.mlp.gate_proj.weight", .mlp, shape: { [$0.intermediateSize, $0.hiddenSize] }),
        TensorTemplate(
            "model.layers.{layer}.mlp.up_proj.weight", .mlp, shape: { [$0.intermediateSize, $0.hiddenSize] }),
        TensorTemplate(
            "model.layers.{layer}.mlp.down_proj.weight", .mlp, shape: { [$0.hiddenSize, $0.intermediateSize] }),
    ]

    /// Mistral, Qwen2 and Qwen3: the three iOS families share one decoder shape.
    private static func llamaLikeLayout(queryKeyNorm: Bool) -> TensorLayout {
        TensorLayout(
            leading: [embedding],
            perLayer: [layerNorm("input_layernorm")] + attentionProjections(queryKeyNorm: queryKeyNorm)
                + [layerNorm("post_attention_layernorm")] + swiGLU,
            trailing: [finalNorm, untiedHead])
    }

    private static let gemma3Layout = TensorLayout(
        leading: [embedding],
        perLayer: [layerNorm("input_layernorm")] + attentionProjections(queryKeyNorm: true)
            + [layerNorm("post_attention_layernorm"), layerNorm("pre_feedforward_layernorm")] + swiGLU
            + [layerNorm("post_feedforward_layernorm")],
        trailing: [finalNorm, untiedHead])

    private static let phi3Layout = TensorLayout(
        leading: [embedding],
        perLayer: [
            layerNorm("input_layernorm"),
            TensorTemplate(
                "model.layers.{layer}.self_attn.qkv_proj.weight", .attention,
                shape: { [($0.attentionHeads + 2 * $0.keyValueHeads) * $0.headDimension, $0.hiddenSize] }),
            TensorTemplate(
                "model.layers.{layer}.self_attn.o_proj.weight", .attention,
                shape: { [$0.hiddenSize, $0.attentionHeads * $0.headDimension] }),
            layerNorm("post_attention_layernorm"),
            TensorTemplate(
                "model.layers.{layer}.mlp.gate_up_proj.weight", .mlp,
                shape: { [2 * $0.intermediateSize, $0.hiddenSize] }),
            TensorTemplate(
                "model.layers.{layer}.mlp.down_proj.weight", .mlp, shape: { [$0.hiddenSize, $0.intermediateSize] }),
        ],
        trailing: [finalNorm, untiedHead])

    private static let mixtralLayout = TensorLayout(
        leading: [embedding],
        perLayer: [layerNorm("input_layernorm")] + attentionProjections(queryKeyNorm: false)
            + [
                layerNorm("post_attention_layernorm"),
                TensorTemplate(
                    "model.layers.{layer}.block_sparse_moe.gate.weight", .mlp,
                    shape: { [expertCount($0, "num_local_experts"), $0.hiddenSize] }),
            ],
        perExpert: [
            TensorTemplate(
                "model.layers.{layer}.block_sparse_moe.experts.{expert}.w1.weight", .mlp,
                shape: { [$0.intermediateSize, $0.hiddenSize] }),
            TensorTemplate(
                "model.layers.{layer}.block_sparse_moe.experts.{expert}.w2.weight", .mlp,
                shape: { [$0.hiddenSize, $0.intermediateSize] }),
            TensorTemplate(
                "model.layers.{layer}.block_sparse_moe.experts.{expert}.w3.weight", .mlp,
                shape: { [$0.intermediateSize, $0.hiddenSize] }),
        ],
        expertCountKey: "num_local_experts",
        trailing: [finalNorm, untiedHead])

    private static let qwen3MoeLayout = TensorLayout(
        leading: [embedding],
        perLayer: [layerNorm("input_layernorm")] + attentionProjections(queryKeyNorm: true)
            + [
                layerNorm("post_attention_layernorm"),
                TensorTemplate(
                    "model.layers.{layer}.mlp.gate.weight", .mlp,
                    shape: { [expertCount($0, "num_experts"), $0.hiddenSize] }),
            ],
        perExpert: [
            TensorTemplate(
                "model.layers.{layer}.mlp.experts.{expert}.gate_proj.weight", .mlp,
                shape: { [moeWidth($0), $0.hiddenSize] }),
            TensorTemplate(
                "model.layers.{layer}.mlp.experts.{expert}.up_proj.weight", .mlp,
                shape: { [moeWidth($0), $0.hiddenSize] }),
            TensorTemplate(
                "model.layers.{layer}.mlp.experts.{expert}.down_proj.weight", .mlp,
                shape: { [$0.hiddenSize, moeWidth($0)] }),
        ],
        expertCountKey: "num_experts", expertWidthKey: moeIntermediateSize, readsDenseLayers: true,
        trailing: [finalNorm, untiedHead])

    /// Expert count from an extra key; the layout checks the key before any shape is asked for.
    private static func expertCount(_ config: ModelConfig, _ key: String) -> Int {
        config.raw[key]?.intValue ?? 0
    }

    /// Qwen3-MoE experts are narrower than `intermediate_size`: `moe_intermediate_size`, 768 when
    /// absent (Qwen3MoeConfig's default).
    private static let moeIntermediateSize = ExtraKey(name: "moe_intermediate_size", whenAbsent: 768)

    private static func moeWidth(_ config: ModelConfig) -> Int {
        moeIntermediateSize.value(in: config)
    }
}
