import Foundation

extension SyntheticCheckpoint {
    /// Writes a complete synthetic checkpoint of `model`: its `config.json` byte for byte and
    /// safetensors files with every tensor the architecture expects.
    /// - Parameter progress: told the bytes written after every chunk.
    /// - Throws: `RegistryError` when the family has no layout, `CheckpointError.writeFailed`
    ///   naming `directory` when something other than a folder is there or it cannot be
    ///   created, and the writer's errors.
    @discardableResult
    public static func write(
        model: ResolvedModel, dtype: TensorDType = .bf16, seed: UInt64, to directory: URL, shardBytes: Int,
        replacingExisting: Bool, progress: (WorkProgress) -> Void = { _ in }
    ) throws -> Result {
        let tensors = try ArchitectureRegistry.tensors(for: model.config, configPath: model.configURL.path)
        let cleanup = try createFolder(directory)
        defer { InterruptCleanup.unregister(cleanup) }
        // The config too is written under the folder's lock: another run's would not match these weights.
        let config: Data
        do { config = try Data(contentsOf: model.configURL) } catch {
            throw CheckpointError.readFailed(path: model.configURL.path, reason: fileSystemFailureReason(error))
        }
        return try CheckpointFolderLock.holding(directory, .writing) {
            let result = try writeHoldingLock(
                tensors: tensors.map { ($0.name, $0.shape) }, dtype: dtype, seed: seed, to: directory,
                shardBytes: shardBytes, replacingExisting: replacingExisting, progress: progress)
            do {
                try config.write(to: directory.appendingPathComponent("config.json"), options: .atomic)
            } catch {
                throw CheckpointError.writeFailed(
                    path: directory.appendingPathComponent("config.json").path, reason: fileSystemFailureReason(error))
            }
            return result
        }
    }

    /// Creates the folder a checkpoint goes into (and its parents), or makes sure it is one.
    /// - Returns: the ``InterruptCleanup`` token under which the folders it made are removed
    ///   again, when empty, if the run is interrupted; the caller unregisters it when done.
    /// - Throws: `CheckpointError.writeFailed` naming `directory`.
    static func createFolder(_ directory: URL) throws -> Int {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: directory.path, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else {
                throw CheckpointError.writeFailed(path: directory.path, reason: "a file is there, not a folder")
            }
            return InterruptCleanup.register(nil)
        }
        // None exists when the working folder of a relative path was removed: making it fails.
        if let ancestor = nearestExistingPath(directory.deletingLastPathComponent().path), !ancestor.isDirectory {
            throw CheckpointError.writeFailed(
                path: directory.path, reason: "'\(ancestor.path)' is a file, not a folder")
        }
        // A failure removes the folders made before it, as an export's does. A signal arriving
        // between their creation and their registration is handled after it.
        return try InterruptCleanup.registering {
            do {
                let created = try ArtifactDirectory.makeDirectories(directory, faults: nil)
                return InterruptCleanup.register(nil, emptyFolders: created.reversed())
            } catch BundleError.writeFailed(_, let reason) {
                throw CheckpointError.writeFailed(path: directory.path, reason: reason)
            }
        }
    }
}
