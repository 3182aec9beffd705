import Foundation

extension Manifest {
    /// The manifest an export of `plan` will write, as far as the config alone tells:
    /// estimated sizes, no files, no SQNR. `exporter plan --json` prints it.
    public init(plan: ExportPlan, kind: String = "plan", weights: String = "none") {
        let model = plan.model
        let sourceKind: String
        var repoID: String?
        var revision: String?
        switch model.source {
        case .directory:
            sourceKind = "directory"
        case .huggingFaceCache(let id, _, let rev):
            sourceKind = "huggingface-cache"
            repoID = id
            revision = rev
        case .presetConfigOnly(let id, _):
            sourceKind = "preset-config"
            repoID = id
        }
        let memory = plan.memory
        self.init(
            schema: Manifest.currentSchema,
            kind: kind,
            tool: Tool(name: "exporter", version: ToolVersion.current),
            model: Model(
                name: plan.outputName, modelType: model.config.modelType, registryType: model.family.modelType,
                architectures: model.config.architectures, preset: model.preset?.id,
                experimental: model.preset == nil,
                source: Source(kind: sourceKind, repoID: repoID, revision: revision, files: []), weights: weights),
            platform: plan.platform.rawValue,
            computePrecision: plan.precision.rawValue,
            contextLength: plan.contextLength,
            parameters: plan.parameters,
            compression: Compression(
                config: plan.compression.name, iosEmbeddingInt8: Manifest.iosEmbeddingInt8(plan.tensors.map(\.rule))),
            kvCache: KVCache(
                bytes: plan.kvCache.bytes, layers: plan.kvCache.layers, kvHeads: plan.kvCache.keyValueHeads,
                headDim: plan.kvCache.headDimension, contextLength: plan.contextLength,
                dtype: plan.precision.rawValue),
            memory: Memory(
                weightsBytes: memory.weightsBytes, kvCacheBytes: memory.kvCacheBytes,
                workingBytes: memory.workingBytes, totalBytes: memory.totalBytes,
                prefillChunk: memory.prefillChunk),
            sizes: Sizes(
                estimatedBundleBytes: plan.estimatedWeightsBytes, bundleBytes: nil,
                bitsPerWeight: Manifest.bitsPerWeight(bytes: plan.estimatedWeightsBytes, parameters: plan.parameters),
                byRole: Manifest.sizesByRole(plan.tensors)),
            tokenizer: nil,
            tensors: plan.tensors.map { tensor in
                Tensor(
                    name: tensor.spec.name, shape: tensor.spec.shape, role: tensor.spec.role.rawValue,
                    layer: tensor.spec.layer, compression: tensor.scheme,
                    lastGroupRows: tensor.scheme.lastGroupRows(rows: tensor.spec.matrixShape.rows),
                    rule: tensor.rule, storedBytes: tensor.storedBytes, parts: [], sqnrDB: nil)
            },
            files: [],
            warnings: plan.warnings,
            buildKey: nil,
            compiled: nil,
            verdicts: [],
            conversion: nil)
    }

    /// Parameters, bytes and bits per weight for each role present.
    static func sizesByRole(_ tensors: [PlannedTensor]) -> [String: RoleSize] {
        var result: [String: RoleSize] = [:]
        for tensor in tensors {
            var entry = result[tensor.spec.role.rawValue] ?? RoleSize(parameters: 0, bytes: 0, bitsPerWeight: 0)
            entry.parameters += tensor.spec.elementCount
            entry.bytes += tensor.storedBytes
            result[tensor.spec.role.rawValue] = entry
        }
        for (role, entry) in result {
            result[role]?.bitsPerWeight = bitsPerWeight(bytes: entry.bytes, parameters: entry.parameters)
        }
        return result
    }

    /// `sizes.bits_per_weight` and each role's: `8 × bytes / parameters` rounded to two decimals
    /// (0 without parameters), as the writer records it and `verify` recomputes it. In double
    /// throughout, so that a doctored manifest's figures cannot overflow.
    static func bitsPerWeight(bytes: Int, parameters: Int) -> Double {
        parameters > 0 ? rounded(8 * Double(bytes) / Double(parameters)) : 0
    }

    /// `compression.ios_embedding_int8`: whether a tensor was stored by the iOS token-embedding
    /// rule (int8 per tensor), given every tensor's `rule`.
    static func iosEmbeddingInt8(_ rules: [String]) -> Bool { rules.contains(iosEmbeddingRule) }

    /// The `rule` of the iOS token embedding quantised to int8 per tensor.
    static let iosEmbeddingRule = "ios-embedding"
    /// The `rule` of the iOS token embedding kept in the compute precision.
    static let iosEmbeddingKeptRule = "ios-embedding-kept"

    /// Two decimals: enough for people, stable for diffs.
    static func rounded(_ value: Double) -> Double { (value * 100).rounded() / 100 }
}
