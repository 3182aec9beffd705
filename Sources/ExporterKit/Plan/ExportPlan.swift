import Foundation

/// What the static KV cache reserves at load: `2 × layers × kv_heads × head_dim × context × bytes`.
public struct KVCacheCost: Equatable, Sendable {
    /// Decoder layers.
    public let layers: Int
    /// Key/value heads per layer.
    public let keyValueHeads: Int
    /// Dimension of one head.
    public let headDimension: Int
    /// Tokens of context.
    public let contextLength: Int
    /// The element type.
    public let precision: ComputePrecision

    /// Bytes reserved: K and V for every layer, head and position.
    public var bytes: Int { 2 * layers * keyValueHeads * headDimension * contextLength * precision.bytesPerElement }

    /// The cost for `config` at `contextLength` tokens.
    public init(config: ModelConfig, contextLength: Int, precision: ComputePrecision) {
        layers = config.layerCount
        keyValueHeads = config.keyValueHeads
        headDimension = config.headDimension
        self.contextLength = contextLength
        self.precision = precision
    }
}

/// One tensor of the plan: what it is and how it will be stored.
public struct PlannedTensor: Equatable, Sendable {
    /// The tensor.
    public let spec: TensorSpec
    /// How it is stored.
    public let scheme: CompressionScheme
    /// Which rule chose the scheme: `rule N (pattern)`, `default`, `ios-embedding` or `ios-embedding-kept`.
    public let rule: String
    /// Bytes stored, excluding alignment padding.
    public let storedBytes: Int
}

/// Runtime memory once loaded: weights (memory-mapped), KV cache and working buffers.
public struct MemoryEstimate: Equatable, Sendable {
    /// Tokens processed at once during prefill in the working-memory estimate, at most: a call
    /// takes no more tokens than the context holds.
    public static let prefillChunk = 128

    /// The prefill chunk at `contextLength` tokens of context (`memory.prefill_chunk`).
    public static func prefillChunk(contextLength: Int) -> Int {
        min(prefillChunk, contextLength)
    }

    /// Resident weight bytes.
    public let weightsBytes: Int
    /// KV-cache bytes.
    public let kvCacheBytes: Int
    /// Peak activations: a prefill chunk through the widest layer, attention scores over the whole
    /// context, and the logits of one position (float32 accumulations).
    public let workingBytes: Int
    /// The prefill chunk those activations are of.
    public let prefillChunk: Int

    /// The sum.
    public var totalBytes: Int { weightsBytes + kvCacheBytes + workingBytes }

    /// The estimate for `config` of `family` with `weightsBytes` of weights.
    public init(config: ModelConfig, family: ArchitectureFamily, weightsBytes: Int, kvCache: KVCacheCost) {
        self.weightsBytes = weightsBytes
        self.kvCacheBytes = kvCache.bytes
        prefillChunk = MemoryEstimate.prefillChunk(contextLength: kvCache.contextLength)
        self.workingBytes = MemoryEstimate.workingBytes(
            hiddenSize: config.hiddenSize, intermediateSize: family.mlpWidth(config), heads: config.attentionHeads,
            contextLength: kvCache.contextLength, vocabularySize: config.vocabularySize, prefillChunk: prefillChunk)
    }

    /// Peak activations (`memory.working_bytes`, docs/MANIFEST.md): a prefill chunk of `c` tokens
    /// through the widest layer (4 hidden-size and 2 intermediate-size float32 buffers), the
    /// float32 scores of every head for those `c` queries over the whole context, and one
    /// position's float32 logits. Saturating, so that `verify` can give it a doctored graph's
    /// dimensions.
    static func workingBytes(
        hiddenSize: Int, intermediateSize: Int, heads: Int, contextLength: Int, vocabularySize: Int,
        prefillChunk chunk: Int
    ) -> Int {
        [
            [4, chunk, hiddenSize, 4].saturatingProduct, [2, chunk, intermediateSize, 4].saturatingProduct,
            [heads, chunk, contextLength, 4].saturatingProduct, [vocabularySize, 4].saturatingProduct,
        ].saturatingSum
    }
}

/// Everything an export will produce that is known from the config alone: tensors, their
/// compression and sizes, KV cache and memory. `exporter plan` prints it; the export follows it.
public struct ExportPlan: Sendable {
    /// Alignment of every blob in a bundle's weights file (docs/FORMAT.md).
    public static let blobAlignment = 64
    /// Size of the weights file header (docs/FORMAT.md).
    public static let weightsHeaderBytes = 64

    /// The resolved model.
    public let model: ResolvedModel
    /// The options as given.
    public let options: ExportOptions
    /// Target platform.
    public let platform: Platform
    /// Compute precision.
    public let precision: ComputePrecision
    /// Context length in tokens.
    public let contextLength: Int
    /// The compression config.
    public let compression: CompressionConfig
    /// Every tensor, in execution order.
    public let tensors: [PlannedTensor]
    /// The KV cache.
    public let kvCache: KVCacheCost
    /// The name of the artifact (`<Name>.aimodel`).
    public let outputName: String
    /// Things the user should know (unused rules, uneven groups).
    public let warnings: [String]

    /// Parameter count (tied embeddings counted once).
    public var parameters: Int { tensors.reduce(0) { $0 + $1.spec.elementCount } }

    /// Bytes of the weights file: header plus every part aligned (exact: sizes follow from the plan).
    public var estimatedWeightsBytes: Int { weightsLayout.fileBytes }

    /// Where every tensor part will sit in the weights file.
    public var weightsLayout: WeightsFileLayout { WeightsFileLayout(tensors: tensors, precision: precision) }

    /// Average bits stored per parameter.
    public var bitsPerWeight: Double {
        parameters == 0 ? 0 : Double(estimatedWeightsBytes * 8) / Double(parameters)
    }

    /// The runtime memory estimate.
    public var memory: MemoryEstimate {
        MemoryEstimate(
            config: model.config, family: model.family, weightsBytes: estimatedWeightsBytes, kvCache: kvCache)
    }

    /// The longest artifact name, in UTF-8 bytes: `.partial-<Name>.<arch>.aimodelc-<uuid>`, the
    /// staging folder of the longest file name, must stay within 255 bytes.
    public static let longestName = 128

    /// Plans an export: resolves the model, applies the registry rules, the preset's defaults
    /// and the compression config to every tensor.
    /// - Throws: the resolver's, registry's and compression config's errors, with their messages.
    public static func make(options: ExportOptions, resolver: ModelResolver) throws -> ExportPlan {
        let model = try resolver.resolve(
            options.model, platform: options.platform, experimental: options.experimental,
            precisionGiven: options.computePrecision != nil, presetOverride: options.presetOverride,
            relativeTo: options.modelBaseDirectory)
        let precision = options.computePrecision ?? model.preset?.computePrecision ?? .float16
        let maximum = model.config.maxPositionEmbeddings
        let contextLength: Int
        if let requested = options.contextLength {
            guard requested <= maximum else {
                throw ResolutionError.contextTooLong(requested: requested, maximum: maximum)
            }
            contextLength = requested
        } else {
            contextLength = min(model.preset?.contextLength ?? ExportOptions.defaultContextLength, maximum)
        }
        var warnings = [model.config.architectureMismatch].compactMap { $0 }
        if options.contextLength == nil, let preset = model.preset, preset.contextLength > maximum {
            // A fine-tune given --preset may hold less context than the preset's: said, not silently lowered.
            warnings.append(
                "context: preset '\(preset.id)' asks for \(Format.grouped(preset.contextLength)) tokens, beyond the "
                    + "checkpoint's max_position_embeddings (\(Format.grouped(maximum))): exported at "
                    + "\(Format.grouped(maximum)) tokens")
        }
        let compression: CompressionConfig
        switch options.compression {
        case .automatic:
            compression = try resolver.catalog.compressionConfig(
                named: model.preset?.compression ?? ExportOptions.defaultCompression)
        case .named(let name):
            compression = try resolver.catalog.compressionConfig(named: name)
        case .file(let url):
            compression = try CompressionConfig(contentsOf: url)
        }
        let specs = try ArchitectureRegistry.tensors(for: model.config, configPath: model.configURL.path)
        let tensors = try specs.map { spec -> PlannedTensor in
            var (scheme, source) = try compression.scheme(
                for: spec, platform: options.platform, quantizeIOSEmbedding: options.quantizeIOSEmbedding)
            if scheme.mode == .palettize, let search = options.paletteSearch {
                scheme.search = search == .standard ? nil : search
            }
            let rule: String
            switch source {
            case .rule(let index): rule = "rule \(index + 1) (\(compression.rules[index].pattern))"
            case .defaultRule: rule = "default"
            case .iosEmbedding: rule = Manifest.iosEmbeddingRule
            case .iosEmbeddingKept: rule = Manifest.iosEmbeddingKeptRule
            }
            if let last = scheme.lastGroupRows(rows: spec.matrixShape.rows), let groupSize = scheme.groupSize {
                let rows = spec.matrixShape.rows
                warnings.append(
                    "tensor '\(spec.name)': \(rows) output channels "
                        + (rows < groupSize
                            ? "are fewer than group size \(groupSize): one group holds them all"
                            : "are not a multiple of group size \(groupSize); its last group holds \(last) channel\(last == 1 ? "" : "s")")
                )
            }
            return PlannedTensor(
                spec: spec, scheme: scheme, rule: rule, storedBytes: scheme.storedBytes(for: spec, precision: precision)
            )
        }
        for rule in compression.unusedRules(for: specs) {
            warnings.append("compression config '\(compression.name)': rule '\(rule.pattern)' matches no tensor")
        }
        if options.outputName == nil,
            model.name.hasPrefix(".") || model.name.unicodeScalars.contains(where: \.isControlCharacter)
        {
            throw ResolutionError.unusableName(model.name)
        }
        let outputName = options.outputName ?? model.name
        // Its files' staging folders add some 80 bytes to the 255 a file name may have.
        guard outputName.utf8.count <= ExportPlan.longestName else {
            throw ResolutionError.nameTooLong(
                outputName, bytes: outputName.utf8.count, given: options.outputName != nil,
                limit: ExportPlan.longestName)
        }
        return ExportPlan(
            model: model, options: options, platform: options.platform, precision: precision,
            contextLength: contextLength, compression: compression, tensors: tensors,
            kvCache: KVCacheCost(config: model.config, contextLength: contextLength, precision: precision),
            outputName: outputName, warnings: warnings)
    }
}
