import Foundation

extension SyntheticCheckpoint {
    /// Writes a complete synthetic checkpoint of `model`: its `config.json` byte for byte and
    /// safetensors files with every tensor the architecture expects.
    /// - Parameter progress: told the bytes written after every chunk.
    /// - Throws: `RegistryError` when the family has no layout, and the writer's errors.
    @discardableResult
    public static func write(
        model: ResolvedModel, dtype: TensorDType = .bf16, seed: UInt64, to directory: URL, shardBytes: Int,
        replacingExisting: Bool, progress: (WorkProgress) -> Void = { _ in }
    ) throws -> Result {
        let tensors = try ArchitectureRegistry.tensors(for: model.config, configPath: model.configURL.path)
        let result = try write(
            tensors: tensors.map { ($0.name, $0.shape) }, dtype: dtype, seed: seed, to: directory, shardBytes: shardBytes,
            replacingExisting: replacingExisting, progress: progress)
        do {
            let config = try Data(contentsOf: model.configURL)
            try config.write(to: directory.appendingPathComponent("config.json"), options: .atomic)
        } catch {
            throw CheckpointError.writeFailed(path: directory.appendingPathComponent("config.json").path, reason: "\(error)")
        }
        return result
    }
}
