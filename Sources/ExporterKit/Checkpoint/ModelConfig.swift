import Foundation

/// A Hugging Face `config.json`, typed: the facts about a checkpoint that the export needs.
public struct ModelConfig: Equatable, Sendable {
    /// `model_type` as written in the file (before any registry remapping).
    public var modelType: String
    /// `architectures`, e.g. `["Qwen2ForCausalLM"]` (empty when absent). When given, one must
    /// carry a language-model head (``ConfigFields/languageModelHeadSuffixes``): a classifier's
    /// checkpoint (`Qwen2ForSequenceClassification`) would otherwise ship its embedding as one.
    public var architectures: [String]
    /// `hidden_size`.
    public var hiddenSize: Int
    /// `intermediate_size`.
    public var intermediateSize: Int
    /// `num_hidden_layers`.
    public var layerCount: Int
    /// `num_attention_heads`.
    public var attentionHeads: Int
    /// `num_key_value_heads`: when absent, the family's default (``ConfigReading/keyValueHeads``:
    /// 32 for qwen2 and qwen3, 8 for mistral and mixtral, 4 for qwen3_moe, as their `transformers`
    /// classes say), else, and when null, as many as the attention heads (multi-head attention).
    public var keyValueHeads: Int
    /// `head_dim`; when absent or null, the family's default (``ConfigReading/headDimension``: 128
    /// for qwen3), else `hidden_size / num_attention_heads`.
    public var headDimension: Int
    /// `vocab_size`.
    public var vocabularySize: Int
    /// `max_position_embeddings`: the longest context the checkpoint supports.
    public var maxPositionEmbeddings: Int
    /// `rope_theta`, or `rope_parameters.rope_theta` (transformers 5); when neither is given, the
    /// family's default (``ConfigReading/ropeTheta``: 1,000,000 for mixtral, else 10,000).
    public var ropeTheta: Double
    /// `rope_scaling` as written (null when absent), or the `rope_parameters` object when it
    /// names a `rope_type` other than `default`: an object that names its type (`rope_type` or
    /// `type`, strings), whose `factor`, when present, is a positive number, and present for a
    /// `linear` type.
    public var ropeScaling: JSONValue
    /// `rms_norm_eps`; when absent, the family's default (``ConfigReading/rmsNormEpsilon``: 1e-5
    /// for mixtral and phi3, else 1e-6).
    public var rmsNormEpsilon: Double
    /// `tie_word_embeddings` (false when absent, the transformers default of every family that exports).
    public var tieWordEmbeddings: Bool
    /// `torch_dtype` (or `dtype`, its name in newer transformers): `bfloat16`, `float16`,
    /// `float32` or `auto` (any other value is refused); nil when absent. `auto` is what
    /// transformers' `from_pretrained(dtype="auto")` means by it: the weights' own type, which
    /// their safetensors headers give. It names no type, so where there are no weights to read
    /// (`--synthetic`, a plan of a config alone) it counts as absent.
    public var torchDType: String?
    /// Whether the q, k and v projections carry biases, by the family's rule
    /// (``ConfigReading/attentionBias``): always for qwen2, never for mistral, mixtral and phi3,
    /// else `attention_bias` (false when absent). A qwen3 or qwen3_moe `attention_bias` of true is
    /// refused: it biases `o_proj` too.
    public var attentionBias: Bool
    /// `sliding_window` as written (nil when absent or null; ``attentionWindow`` is the window used).
    public var slidingWindow: Int?
    /// `use_sliding_window` (nil when absent).
    public var useSlidingWindow: Bool?
    /// The attention window every layer uses, nil for full causal attention: `sliding_window`
    /// when the config turns it on for all layers. Hugging Face decides per layer, as the family's
    /// ``WindowRule`` says: qwen2 and qwen3 slide only with `use_sliding_window` (false when
    /// absent), the layers `layer_types` names or those from `max_window_layers` (28 when absent)
    /// on; qwen3_moe, with `use_sliding_window`, every layer; mistral slides every layer by
    /// `sliding_window` (4,096 when absent), mixtral and phi3 too (none when absent). The others:
    /// `layer_types` when present, else `sliding_window_pattern` (Gemma 3: every `n`-th layer
    /// full), else `use_sliding_window` (on when absent and a window is given) for the layers from
    /// `max_window_layers` on (all of them when absent). A config sliding only some layers is
    /// refused, since the graph holds one window.
    public var attentionWindow: Int?
    /// Every key of the file, for architecture-specific fields (expert counts and the like).
    public var raw: JSONObject

    /// Parses a config from its bytes.
    /// - Parameter path: the file's path, used in error messages only.
    /// - Throws: `ConfigError` naming the file and field when a required field is missing,
    ///   has the wrong type or an impossible value.
    public init(bytes: [UInt8], path: String) throws {
        let document: JSONValue
        do {
            document = try JSONParser.parse(bytes)
        } catch let error as JSONParseError {
            throw ConfigError.invalidJSON(path: path, reason: error.description)
        }
        guard let object = document.objectValue else {
            throw ConfigError.invalidJSON(
                path: path, reason: "the document is \(document.typeDescription), not an object")
        }
        let fields = ConfigFields(object: object, path: path)
        raw = object
        modelType = try fields.string("model_type")
        let reading = ArchitectureRegistry.configReading(modelType)
        architectures = try fields.stringArray("architectures") ?? []
        try fields.requireLanguageModelHead(architectures)
        hiddenSize = try fields.positiveInt("hidden_size")
        intermediateSize = try fields.positiveInt("intermediate_size")
        layerCount = try fields.positiveInt("num_hidden_layers")
        attentionHeads = try fields.positiveInt("num_attention_heads")
        keyValueHeads =
            try fields.optionalPositiveInt("num_key_value_heads")
            ?? (fields.isAbsent("num_key_value_heads") ? reading.keyValueHeads : nil) ?? attentionHeads
        vocabularySize = try fields.positiveInt("vocab_size")
        maxPositionEmbeddings = try fields.positiveInt("max_position_embeddings")
        (ropeTheta, ropeScaling) = try fields.rope(theta: reading.ropeTheta, scalingTypes: reading.ropeScalingTypes)
        try fields.requireSiLU()
        rmsNormEpsilon = try fields.optionalDouble("rms_norm_eps") ?? reading.rmsNormEpsilon
        tieWordEmbeddings = try fields.optionalBool("tie_word_embeddings") ?? false
        torchDType = try fields.floatDType("torch_dtype") ?? fields.floatDType("dtype")
        attentionBias = try fields.attentionBias(reading.attentionBias)
        slidingWindow = try fields.optionalPositiveInt("sliding_window")
        useSlidingWindow = try fields.optionalBool("use_sliding_window")
        attentionWindow = try fields.attentionWindow(
            reading.window, slidingWindow: slidingWindow, useSlidingWindow: useSlidingWindow, layerCount: layerCount)

        if let explicit = try fields.optionalPositiveInt("head_dim") ?? reading.headDimension {
            headDimension = explicit
        } else {
            guard hiddenSize % attentionHeads == 0 else {
                throw ConfigError.invalidValue(
                    path: path, field: "num_attention_heads",
                    reason: "(\(attentionHeads)) does not divide hidden_size (\(hiddenSize)) and there is no head_dim")
            }
            headDimension = hiddenSize / attentionHeads
        }
        guard attentionHeads % keyValueHeads == 0 else {
            let given = fields.isAbsent("num_key_value_heads") ? "is absent; its default " : ""
            throw ConfigError.invalidValue(
                path: path, field: "num_key_value_heads",
                reason: "\(given)(\(keyValueHeads)) does not divide num_attention_heads (\(attentionHeads))")
        }
        try fields.requirePositive(rmsNormEpsilon, field: "rms_norm_eps")
        try checkPlausible(path: path)
    }

    /// The `torch_dtype` that names the weights' own type (``torchDType``).
    public static let automaticDType = "auto"

    /// The warning of `architectures` naming only classes of other registered families than
    /// `model_type` (`MistralForCausalLM` with `qwen3`): read as `model_type` says, as
    /// transformers reads it, but most likely a config edited by hand. A class's family is, both
    /// lowercased without `_`, the type its name spells before its head, or the one type that
    /// begins with it (`Gemma3ForCausalLM` is `gemma3_text`'s); a class of no registered family
    /// (a custom one), or without a language-model head, says nothing.
    public var architectureMismatch: String? {
        func key(_ text: String) -> String { text.lowercased().replacingOccurrences(of: "_", with: "") }
        func family(of name: String) -> String? {
            let head = ConfigFields.languageModelHeadSuffixes.first { name.hasSuffix($0) }
            guard let head, case let prefix = key(String(name.dropLast(head.count))), !prefix.isEmpty else {
                return nil
            }
            // The type it spells, else the one type it begins, else the longest type it begins with.
            let types = ArchitectureRegistry.modelTypes
            if let exact = types.first(where: { key($0) == prefix }) { return exact }
            let longer = types.filter { key($0).hasPrefix(prefix) }
            if longer.count == 1 { return longer[0] }
            return types.filter { prefix.hasPrefix(key($0)) }.max { $0.count < $1.count }
        }
        let own = ArchitectureRegistry.canonicalModelType(modelType)
        let named = architectures.map { ($0, family(of: $0)) }
        let others = named.compactMap { name, family in family.map { _ in name } }
        guard !others.isEmpty, !named.contains(where: { _, family in family.map { $0 == own } ?? true }) else {
            return nil
        }
        return "config: architectures names " + others.map { "'\($0)'" }.joined(separator: ", ")
            + ", of another family than model_type '\(modelType)': read as \(modelType), as transformers reads it"
    }

    /// Reads and parses `config.json` at `url`.
    /// - Throws: `ConfigError` when the file is unreadable or its content unusable,
    ///   `CheckpointError.notARegularFile` for a FIFO, a device or a folder, as for the weights.
    public init(contentsOf url: URL) throws {
        let bytes: [UInt8]
        do {
            let file = try ReadOnlyFile(path: url.path)
            bytes = try file.bytes(at: 0, count: file.byteCount)
        } catch let error as CheckpointError {
            switch error {
            case .notARegularFile: throw error
            case .readFailed(_, let reason): throw ConfigError.readFailed(path: url.path, reason: reason)
            default: throw ConfigError.unreadable(path: url.path, reason: "no such file")
            }
        }
        try self.init(bytes: bytes, path: url.path)
    }

    /// The `model_type` string of the config at `url`, or nil when the file cannot be read or
    /// parsed or has none (the full reading, ``init(contentsOf:)``, then says why).
    public static func declaredModelType(at url: URL) -> String? {
        guard let file = try? ReadOnlyFile(path: url.path), let bytes = try? file.bytes(at: 0, count: file.byteCount),
            let document = try? JSONParser.parse(bytes)
        else { return nil }
        return document.objectValue?["model_type"]?.stringValue
    }

    /// An integer field outside the standard set (expert counts and the like).
    /// - Throws: `ConfigError` when it is missing, not an integer or not positive.
    public func extraPositiveInt(_ field: String, path: String) throws -> Int {
        try ConfigFields(object: raw, path: path).positiveInt(field)
    }

    /// An integer field outside the standard set, `whenAbsent` when the key is absent.
    /// - Throws: `ConfigError` when it is null, not an integer or not positive.
    public func extraPositiveInt(_ field: String, path: String, whenAbsent: Int) throws -> Int {
        let fields = ConfigFields(object: raw, path: path)
        guard let value = raw[field] else { return whenAbsent }
        guard !value.isNull else {
            throw ConfigError.wrongType(path: path, field: field, expected: "an integer", found: "null")
        }
        return try fields.positiveInt(field)
    }

    /// Checks that every layer has experts: Qwen3-MoE gives a layer one MLP of `intermediate_size`
    /// and no experts when `mlp_only_layers` names it or `decoder_sparse_step` (1 when absent)
    /// does not divide its index + 1.
    /// - Throws: `ConfigError.unsupportedFeature` naming the key when some layer has no experts,
    ///   `.wrongType` or `.invalidValue` when a key is malformed.
    public func requireExpertsInEveryLayer(path: String) throws {
        let fields = ConfigFields(object: raw, path: path)
        let step = try fields.optionalPositiveInt("decoder_sparse_step") ?? 1
        let stepDense = (0..<layerCount).count(where: { ($0 + 1) % step != 0 })
        if stepDense > 0 {
            throw ConfigError.unsupportedFeature(
                path: path, field: "decoder_sparse_step",
                reason:
                    "is \(step): \(stepDense) of \(layerCount) layers have no experts; experts in every layer are supported"
            )
        }
        guard let value = raw["mlp_only_layers"], !value.isNull else { return }
        guard let items = value.arrayValue else {
            throw ConfigError.wrongType(
                path: path, field: "mlp_only_layers", expected: "an array of integers", found: value.typeDescription)
        }
        var dense = Set<Int>()
        for item in items {
            guard let layer = item.intValue else {
                throw ConfigError.wrongType(
                    path: path, field: "mlp_only_layers", expected: "an array of integers", found: item.typeDescription)
            }
            if (0..<layerCount).contains(layer) { dense.insert(layer) }
        }
        guard dense.isEmpty else {
            throw ConfigError.unsupportedFeature(
                path: path, field: "mlp_only_layers",
                reason:
                    "names \(dense.count) of \(layerCount) layers, which have no experts; experts in every layer are supported"
            )
        }
    }
}

/// Typed access to a config's fields, with errors naming field and file.
struct ConfigFields {
    let object: JSONObject
    let path: String

    /// Dimensions above this are refused: no real model has a dimension of a billion,
    /// and products of absurd values would overflow.
    static let largestDimension = 1 << 30

    private func present(_ field: String) -> JSONValue? {
        guard let value = object[field], !value.isNull else { return nil }
        return value
    }

    /// Whether the key is missing altogether (null is not absent: it is written).
    func isAbsent(_ field: String) -> Bool {
        object[field] == nil
    }

    private func wrongType(_ field: String, _ expected: String, _ value: JSONValue) -> ConfigError {
        .wrongType(path: path, field: field, expected: expected, found: value.typeDescription)
    }

    func string(_ field: String) throws -> String {
        guard let value = try optionalString(field) else { throw ConfigError.missingField(path: path, field: field) }
        return value
    }

    func optionalString(_ field: String) throws -> String? {
        guard let value = present(field) else { return nil }
        guard let text = value.stringValue else { throw wrongType(field, "a string", value) }
        return text
    }

    func stringArray(_ field: String) throws -> [String]? {
        guard let value = present(field) else { return nil }
        guard let items = value.arrayValue else { throw wrongType(field, "an array of strings", value) }
        return try items.map { item in
            guard let text = item.stringValue else { throw wrongType(field, "an array of strings", item) }
            return text
        }
    }

    func positiveInt(_ field: String) throws -> Int {
        guard let value = try optionalPositiveInt(field) else {
            throw ConfigError.missingField(path: path, field: field)
        }
        return value
    }

    func optionalPositiveInt(_ field: String) throws -> Int? {
        guard let value = present(field) else { return nil }
        guard case .number(let literal) = value else { throw wrongType(field, "an integer", value) }
        guard let integer = value.intValue else {
            // A whole number beyond an Int (or beyond a double's exact integers) is an integer, too large.
            guard let number = value.doubleValue, number.rounded() == number else {
                throw ConfigError.invalidValue(path: path, field: field, reason: "must be an integer, found \(literal)")
            }
            throw ConfigError.invalidValue(
                path: path, field: field,
                reason: number > 0
                    ? "is absurdly large (\(literal) > \(ConfigFields.largestDimension))"
                    : "must be positive, found \(literal)")
        }
        guard integer > 0 else {
            throw ConfigError.invalidValue(path: path, field: field, reason: "must be positive, found \(integer)")
        }
        guard integer <= ConfigFields.largestDimension else {
            throw ConfigError.invalidValue(
                path: path, field: field, reason: "is absurdly large (\(integer) > \(ConfigFields.largestDimension))")
        }
        return integer
    }

    func optionalDouble(_ field: String) throws -> Double? {
        guard let value = present(field) else { return nil }
        guard let number = value.doubleValue else { throw wrongType(field, "a number", value) }
        return number
    }

    /// `torch_dtype` or `dtype`: one of the float types weights are read as
    /// (``TensorDType/init(torchDType:)``), or `auto`; nil when absent or null.
    func floatDType(_ field: String) throws -> String? {
        guard let text = try optionalString(field) else { return nil }
        let names = TensorDType.torchDTypeNames + [ModelConfig.automaticDType]
        guard names.contains(text) else {
            throw ConfigError.invalidValue(
                path: path, field: field, reason: "is '\(text)'; expected one of: \(names.joined(separator: ", "))")
        }
        return text
    }

    /// The rotary parameters: `rope_theta` (10,000 when absent) and `rope_scaling` (null when
    /// absent), or their transformers 5 form, `rope_parameters` (`rope_theta`, `rope_type`,
    /// `factor`, …, or one such object per layer type), which newer checkpoints write instead:
    /// ignoring it would give the graph another base frequency without a word. Where both forms
    /// are given they must agree. A rotation of part of each head (`partial_rotary_factor`
    /// other than 1) is refused: the graph rotates every dimension. So is, where `scalingTypes` is
    /// given (the family's ``ConfigReading/ropeScalingTypes``), a scaling of another type: its own
    /// keys (`original_max_position_embeddings`, `beta_fast`, `low_freq_factor`, …) have no place in
    /// the graph. A scaling that names no type, or a linear one without a factor, is refused (see
    /// `validateScaling`). `defaultTheta` is the family's base frequency when the config gives none.
    func rope(theta defaultTheta: Double, scalingTypes: [String]?) throws -> (theta: Double, scaling: JSONValue) {
        let (theta, scaling, scalingField) = try ropeAsWritten(defaultTheta: defaultTheta)
        if let scalingTypes, let object = scaling.objectValue, let type = Self.scalingType(object),
            type != "default", !scalingTypes.contains(type)
        {
            let field = object["rope_type"]?.stringValue != nil ? "rope_type" : "type"
            let supported =
                scalingTypes.isEmpty
                ? "no scaling" : scalingTypes.map { "'\($0)'" }.joined(separator: ", ") + " scaling only"
            throw ConfigError.unsupportedFeature(
                path: path, field: "\(scalingField).\(field)",
                reason: "is '\(type)': the graph's rotation supports " + supported)
        }
        // transformers refuses it too (`factor` is a required key of linear scaling), and the
        // graph's p' = p / scaling_factor has no meaning without it.
        if let object = scaling.objectValue, Self.scalingType(object) == "linear",
            (object["factor"] ?? .null).isNull
        {
            throw ConfigError.invalidValue(
                path: path, field: "\(scalingField).factor",
                reason: "is \(object["factor"] == nil ? "absent" : "null"); linear scaling divides positions by it")
        }
        return (theta, scaling)
    }

    /// The base frequency and scaling as the config writes them, both forms checked against each
    /// other, and the field the scaling came from (`rope_scaling`, or the `rope_parameters`
    /// object), for errors.
    private func ropeAsWritten(defaultTheta: Double) throws -> (theta: Double, scaling: JSONValue, field: String) {
        let legacyTheta = try optionalDouble("rope_theta")
        try requirePositive(legacyTheta, field: "rope_theta")
        let legacyScaling = present("rope_scaling") ?? .null
        if !legacyScaling.isNull { try validateScaling(legacyScaling, field: "rope_scaling", alwaysNamesType: true) }
        try requireWholeRotation(object["partial_rotary_factor"], field: "partial_rotary_factor")
        guard let value = present("rope_parameters") else {
            return (legacyTheta ?? defaultTheta, legacyScaling, "rope_scaling")
        }
        let (parameters, field) = try singleRopeParameters(value)
        try validateScaling(.object(parameters), field: field, alwaysNamesType: false)
        try requireWholeRotation(parameters["partial_rotary_factor"], field: field + ".partial_rotary_factor")
        var theta = legacyTheta ?? defaultTheta
        if let value = parameters["rope_theta"], !value.isNull {
            guard let number = value.doubleValue else { throw wrongType(field + ".rope_theta", "a number", value) }
            try requirePositive(number, field: field + ".rope_theta")
            if let legacyTheta, legacyTheta != number {
                throw ConfigError.invalidValue(
                    path: path, field: field + ".rope_theta", reason: "is \(number) but rope_theta is \(legacyTheta)")
            }
            theta = number
        }
        guard let type = Self.scalingType(parameters) else { return (theta, legacyScaling, "rope_scaling") }
        let scaling: JSONValue = type == "default" ? .null : .object(parameters)
        if let legacy = legacyScaling.objectValue {
            let legacyType = Self.scalingType(legacy) ?? "default"
            guard legacyType == type else {
                throw ConfigError.invalidValue(
                    path: path, field: field + ".rope_type",
                    reason: "is '\(type)' but rope_scaling says '\(legacyType)'")
            }
            guard (legacy["factor"] ?? .null).isEquivalent(to: parameters["factor"] ?? .null) else {
                throw ConfigError.invalidValue(
                    path: path, field: field + ".factor",
                    reason: "is \(Self.written(parameters["factor"])) but rope_scaling.factor is "
                        + Self.written(legacy["factor"]))
            }
        }
        return legacyScaling.isNull ? (theta, scaling, field) : (theta, legacyScaling, "rope_scaling")
    }

    /// Refuses an MLP activation other than SiLU (`hidden_act`, or Gemma's `hidden_activation`;
    /// `swish` is its other name): the graph's MLP is `down(silu(gate) × up)`, whatever the config.
    func requireSiLU() throws {
        for field in ["hidden_act", "hidden_activation"] {
            guard let name = try optionalString(field), name != "silu", name != "swish" else { continue }
            throw ConfigError.unsupportedFeature(
                path: path, field: field,
                reason: "is '\(name)': the graph's MLP computes silu, the one activation supported")
        }
    }

    /// How the class names of a model with a language-model head end in `transformers`.
    static let languageModelHeadSuffixes = ["ForCausalLM", "LMHeadModel", "ForConditionalGeneration"]

    /// Refuses `architectures` none of which has a language-model head (a classifier, a reward
    /// model, a bare `…Model`): its checkpoint holds no `lm_head`, or one trained for nothing, and
    /// with tied embeddings the export would predict tokens from the embedding without a word.
    /// An empty list says nothing and passes.
    func requireLanguageModelHead(_ architectures: [String]) throws {
        guard !architectures.isEmpty,
            !architectures.contains(where: { name in
                Self.languageModelHeadSuffixes.contains(where: { name.hasSuffix($0) })
            })
        else { return }
        throw ConfigError.unsupportedFeature(
            path: path, field: "architectures",
            reason: "is " + architectures.map { "'\($0)'" }.joined(separator: ", ")
                + ": the export needs a language-model head (a class name ending in one of: "
                + Self.languageModelHeadSuffixes.joined(separator: ", ") + ")")
    }

    /// Whether q, k and v carry biases under the family's `rule`.
    /// - Throws: `ConfigError.unsupportedFeature` for an `attention_bias` of true that biases
    ///   `o_proj` too (``AttentionBiasRule/configuredWithOutput``).
    func attentionBias(_ rule: AttentionBiasRule) throws -> Bool {
        switch rule {
        case .always: return true
        case .never: return false
        case .configured: return try optionalBool("attention_bias") ?? false
        case .configuredWithOutput:
            guard try optionalBool("attention_bias") == true else { return false }
            throw ConfigError.unsupportedFeature(
                path: path, field: "attention_bias",
                reason: "is true: it biases o_proj too, which the graph cannot describe (qkv_bias covers q, k, v)")
        }
    }

    /// Refuses a number (a base frequency, an epsilon) that is not positive, or beyond a double:
    /// JSON allows `1e400`, which reads as infinity.
    func requirePositive(_ number: Double?, field: String) throws {
        guard let number, !(number > 0 && number.isFinite) else { return }
        throw ConfigError.invalidValue(
            path: path, field: field, reason: number.isFinite ? "must be a positive number" : Self.beyondDouble)
    }

    /// Why a number that reads as infinity is refused.
    static let beyondDouble = "is too large: beyond a double (about 1.8e308)"

    /// A value as the config writes it, for messages: a number's literal, `null`, or `absent`.
    private static func written(_ value: JSONValue?) -> String {
        switch value {
        case nil: return "absent"
        case .number(let literal)?: return literal
        case let other?: return other.typeDescription
        }
    }

    /// The scaling type an object names (`rope_type`, or `type` as older configs wrote it).
    private static func scalingType(_ scaling: JSONObject) -> String? {
        scaling["rope_type"]?.stringValue ?? scaling["type"]?.stringValue
    }

    /// `rope_parameters` as one object and the field to name in errors: as written, or, per
    /// layer type (every value an object), the one object they all equal.
    private func singleRopeParameters(_ value: JSONValue) throws -> (JSONObject, String) {
        guard let parameters = value.objectValue else { throw wrongType("rope_parameters", "an object", value) }
        let members = parameters.members
        guard !members.isEmpty, members.allSatisfy({ $0.value.objectValue != nil }) else {
            return (parameters, "rope_parameters")
        }
        let layerTypes = parameters.keys.sorted()
        let first = layerTypes[0]
        guard let single = parameters[first]?.objectValue,
            members.allSatisfy({ $0.value.isEquivalent(to: .object(single)) })
        else {
            throw ConfigError.unsupportedFeature(
                path: path, field: "rope_parameters",
                reason: "differs between layer types (\(layerTypes.joined(separator: ", "))); "
                    + "one rotation for every layer is supported")
        }
        return (single, "rope_parameters.\(first)")
    }

    /// Refuses a `partial_rotary_factor` other than 1 (absent or null is 1).
    private func requireWholeRotation(_ value: JSONValue?, field: String) throws {
        guard let value, !value.isNull else { return }
        guard case .number(let literal) = value, let factor = value.doubleValue else {
            throw wrongType(field, "a number", value)
        }
        guard factor == 1 else {
            throw ConfigError.unsupportedFeature(
                path: path, field: field,
                reason: "is \(literal): rotating part of each head is not supported (the graph rotates every dimension)"
            )
        }
    }

    /// A scaling object (`rope_scaling`, or `rope_parameters`, named `field`): its `type` and
    /// `rope_type` are strings and its `factor` a positive finite number, where present, and it
    /// names a type. transformers 4 fails on a `rope_scaling` that names none (its rotary
    /// embedding looks the type up and finds None), so reading it as no scaling would be a guess.
    /// transformers 5 reads `rope_parameters` without a type as `default` (`alwaysNamesType`
    /// false): refused there only when a type is written null, which it fails on too, or when a
    /// factor says that a scaling was meant, which it would drop.
    private func validateScaling(_ value: JSONValue, field: String, alwaysNamesType: Bool) throws {
        guard let scaling = value.objectValue else { throw wrongType(field, "an object", value) }
        for key in ["type", "rope_type"] {
            if let kind = scaling[key], !kind.isNull, kind.stringValue == nil {
                throw wrongType("\(field).\(key)", "a string", kind)
            }
        }
        var factorLiteral: String?
        if let factor = scaling["factor"], !factor.isNull {
            guard case .number(let literal) = factor, let number = factor.doubleValue else {
                throw wrongType("\(field).factor", "a number", factor)
            }
            guard number > 0, number.isFinite else {
                throw ConfigError.invalidValue(
                    path: path, field: "\(field).factor",
                    reason: number.isFinite ? "must be a positive number, found \(literal)" : Self.beyondDouble)
            }
            factorLiteral = literal
        }
        let typeWritten = scaling.contains("type") || scaling.contains("rope_type")
        guard Self.scalingType(scaling) == nil, alwaysNamesType || typeWritten || factorLiteral != nil else { return }
        throw ConfigError.invalidValue(
            path: path, field: field,
            reason: "names no rope_type or type" + (factorLiteral.map { " (its factor is \($0))" } ?? "")
                + ", so which scaling it means is unknown")
    }

    /// The window every layer uses (see ``ModelConfig/attentionWindow``) under the family's `rule`.
    /// - Throws: `ConfigError.wrongType` or `.invalidValue` for malformed `layer_types` or
    ///   `max_window_layers`, or sliding layers without a window, `.unsupportedFeature` when only
    ///   some layers slide, or when the `layer_types` of a family that does not read it (mistral,
    ///   mixtral, phi3, qwen3_moe) says otherwise than its window.
    func attentionWindow(
        _ rule: WindowRule, slidingWindow: Int?, useSlidingWindow: Bool?, layerCount: Int
    ) throws -> Int? {
        let slidingLayers: Int
        switch rule {
        case .switched(let switchDefault, let windowDefault, let firstSlidingDefault):
            // transformers sets sliding_window to None unless use_sliding_window, for layer_types too.
            let switchedOn = useSlidingWindow ?? switchDefault
            let window = switchedOn ? windowWhenAbsent(slidingWindow, windowDefault) : nil
            guard let firstSlidingDefault else { return try everyLayerWindow(window, layerCount: layerCount) }
            let why =
                switchedOn
                ? "sliding_window is null"
                : "use_sliding_window is false" + (useSlidingWindow == nil ? " (absent)" : "")
            if let types = try layerTypes(layerCount: layerCount) {
                slidingLayers = types.count(where: { $0 == "sliding_attention" })
                try requireWindow(window, slidingLayers: slidingLayers, by: "layer_types", "has sliding layers", why)
            } else {
                // Switched off, no layer slides. Switched on, those from max_window_layers on do;
                // with a null window they are refused, as by layer_types (transformers then gives
                // them none, which is full attention: FORMAT.md refuses the contradiction).
                guard switchedOn else { return nil }
                let written = try maxWindowLayers()
                let firstSliding = written ?? firstSlidingDefault
                slidingLayers = layerCount - min(firstSliding, layerCount)
                try requireWindow(
                    window, slidingLayers: slidingLayers, by: "max_window_layers",
                    (written.map { "is \($0)" } ?? "(default \(firstSliding))")
                        + ": \(slidingLayers) of \(layerCount) layers slide", why)
            }
            return try oneWindow(window, slidingLayers: slidingLayers, layerCount: layerCount)
        case .everyLayer(let windowDefault):
            return try everyLayerWindow(windowWhenAbsent(slidingWindow, windowDefault), layerCount: layerCount)
        case .generic:
            break
        }
        if let types = try layerTypes(layerCount: layerCount) {
            slidingLayers = types.count(where: { $0 == "sliding_attention" })
            try requireWindow(
                slidingWindow, slidingLayers: slidingLayers, by: "layer_types", "has sliding layers",
                "sliding_window is null")
        } else if let pattern = try optionalPositiveInt("sliding_window_pattern") {
            // Gemma 3's form: every `pattern`-th layer attends to the whole context, the others slide.
            guard slidingWindow != nil else { return nil }
            slidingLayers = layerCount - layerCount / pattern
        } else {
            guard useSlidingWindow ?? true, slidingWindow != nil else { return nil }
            slidingLayers = layerCount - min(try maxWindowLayers() ?? 0, layerCount)
        }
        return try oneWindow(slidingWindow, slidingLayers: slidingLayers, layerCount: layerCount)
    }

    /// Refuses layers made to slide without a window: `field` makes `slidingLayers` of them slide,
    /// as `slides` says, and `why` says why there is no window (switched off, or null). FORMAT.md
    /// (`attention.sliding_window`): transformers has no window to give them.
    private func requireWindow(
        _ window: Int?, slidingLayers: Int, by field: String, _ slides: String, _ why: String
    ) throws {
        guard slidingLayers > 0, window == nil else { return }
        throw ConfigError.invalidValue(path: path, field: field, reason: "\(slides) but \(why)")
    }

    /// `sliding_window` as written, or `default` when the key is absent (null is no window).
    private func windowWhenAbsent(_ slidingWindow: Int?, _ default: Int?) -> Int? {
        isAbsent("sliding_window") ? `default` : slidingWindow
    }

    /// `window`, every layer's in a family that does not read `layer_types`.
    /// - Throws: `ConfigError.unsupportedFeature` when `layer_types` names layers otherwise.
    private func everyLayerWindow(_ window: Int?, layerCount: Int) throws -> Int? {
        let other = window == nil ? "sliding_attention" : "full_attention"
        if let types = try layerTypes(layerCount: layerCount), types.contains(other) {
            let family = ArchitectureRegistry.canonicalModelType(try string("model_type"))
            throw ConfigError.unsupportedFeature(
                path: path, field: "layer_types",
                reason: "names \(other) layers, but \(family) does not read layer_types: every layer "
                    + (window.map { "slides by sliding_window (\($0))" } ?? "attends to the whole context"))
        }
        return window
    }

    /// `layer_types`, checked: one known type per layer; nil when absent.
    private func layerTypes(layerCount: Int) throws -> [String]? {
        guard let types = try stringArray("layer_types") else { return nil }
        guard types.count == layerCount else {
            throw ConfigError.invalidValue(
                path: path, field: "layer_types",
                reason: "lists \(types.count) layers, num_hidden_layers is \(layerCount)")
        }
        if let other = types.first(where: { $0 != "full_attention" && $0 != "sliding_attention" }) {
            throw ConfigError.invalidValue(
                path: path, field: "layer_types",
                reason: "has '\(other)' (expected one of: full_attention, sliding_attention)")
        }
        return types
    }

    /// `max_window_layers`, the first sliding layer; nil when absent or null.
    private func maxWindowLayers() throws -> Int? {
        guard let value = present("max_window_layers") else { return nil }
        guard case .number(let literal) = value else {
            throw wrongType("max_window_layers", "a non-negative integer", value)
        }
        guard let layers = value.intValue, layers >= 0 else {
            throw ConfigError.invalidValue(
                path: path, field: "max_window_layers", reason: "should be a non-negative integer, found \(literal)")
        }
        return layers
    }

    /// `window` when every layer slides, nil when none does.
    /// - Throws: `ConfigError.unsupportedFeature` when only some do.
    private func oneWindow(_ window: Int?, slidingLayers: Int, layerCount: Int) throws -> Int? {
        if slidingLayers == 0 { return nil }
        if slidingLayers == layerCount { return window }
        throw ConfigError.unsupportedFeature(
            path: path, field: "sliding_window",
            reason: "applies to \(slidingLayers) of \(layerCount) layers; one window for every layer is supported")
    }

    func optionalBool(_ field: String) throws -> Bool? {
        guard let value = present(field) else { return nil }
        guard let flag = value.boolValue else { throw wrongType(field, "a boolean", value) }
        return flag
    }
}
