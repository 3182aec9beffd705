import Foundation

/// A model as the compiler sees it: its graph, and its tensors with the parts each stores.
/// Built from a plan (for verdicts from the config alone) or from a bundle (to compile it);
/// both give the same subject, so `exporter plan` and `exporter compile` agree.
public struct CompileSubject: Sendable {
    /// One tensor and its parts, as laid out in the portable weights file.
    public struct Tensor: Equatable, Sendable {
        /// The checkpoint name.
        public let name: String
        /// What it is for.
        public let role: TensorRole
        /// Its decoder layer, or nil.
        public let layer: Int?
        /// Its parts; offsets are in the portable bundle's `weights.bin`.
        public let parts: [WeightsFileLayout.Part]
    }

    /// The artifact's name (`<Name>`).
    public let name: String
    /// The platform the bundle was exported for.
    public let platform: Platform
    /// Dimensions and static shapes.
    public let graph: GraphDescription
    /// Every tensor, in execution order.
    public let tensors: [Tensor]
    /// Tokens of a prefill call in the working-memory figures (`memory.prefill_chunk`).
    public let prefillChunk: Int

    /// The subject an export of `plan` will give.
    public init(plan: ExportPlan) {
        name = plan.outputName
        platform = plan.platform
        graph = GraphDescription(plan: plan)
        prefillChunk = MemoryEstimate.prefillChunk(contextLength: plan.contextLength)
        tensors = zip(plan.tensors, plan.weightsLayout.parts).map { tensor, parts in
            Tensor(name: tensor.spec.name, role: tensor.spec.role, layer: tensor.spec.layer, parts: parts)
        }
    }

    /// The subject of an exported bundle.
    /// - Throws: `BundleError.notABundle` when the manifest names an unknown platform or role.
    public init(bundle: BundleReader) throws {
        try self.init(manifest: bundle.manifest, graph: bundle.graph, path: bundle.url.path)
    }

    /// The subject `manifest` and `graph` describe: a bundle's, or a compiled artifact's (whose
    /// parts have the portable parts' kinds and sizes, which are all a plan reads), so that
    /// `verify` can plan its compile again. `path` names the artifact in errors.
    /// - Throws: `BundleError.notABundle` when the manifest names an unknown platform or role.
    init(manifest: Manifest, graph: GraphDescription, path: String) throws {
        name = manifest.model.name
        guard let platform = Platform(rawValue: manifest.platform) else {
            throw BundleError.notABundle(path: path, reason: "unknown platform '\(manifest.platform)'")
        }
        self.platform = platform
        self.graph = graph
        prefillChunk = manifest.memory.prefillChunk
        tensors = try manifest.tensors.map { tensor in
            guard let role = TensorRole(rawValue: tensor.role) else {
                throw BundleError.notABundle(path: path, reason: "tensor '\(tensor.name)' has role '\(tensor.role)'")
            }
            return Tensor(
                name: tensor.name, role: role, layer: tensor.layer,
                parts: tensor.parts.map {
                    WeightsFileLayout.Part(kind: $0.kind, dtype: $0.dtype, offset: $0.offset, bytes: $0.bytes)
                })
        }
    }
}
