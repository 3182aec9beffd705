import Foundation

/// The lock on a checkpoint folder that keeps `synth` from rewriting weights an export reads:
/// a `flock` on the folder itself, exclusive for a run writing a checkpoint there (`synth`),
/// shared for a run reading one (an export, from opening the weights until its bundle is
/// written). Neither waits: a run that finds the folder held fails at once. The kernel drops
/// the lock when the process ends, however it ends.
public enum CheckpointFolderLock {
    /// What the run holding the lock does with the folder.
    public enum Mode: Sendable {
        /// Writes a checkpoint there (exclusive: no reader, no other writer).
        case writing
        /// Reads the checkpoint there (shared with other readers).
        case reading
    }

    /// Runs `body` holding the lock on `directory` in `mode`.
    ///
    /// A reader that cannot take the lock for another reason than a writer holding it (a
    /// folder it may list but not open, a file system without `flock`) reads unlocked, as
    /// before there was a lock; a writer fails.
    /// - Throws: `CheckpointError.writeFailed` naming `directory` for a writer that finds it
    ///   held, or that cannot open or lock it; `CheckpointError.readFailed` naming `directory`
    ///   for a reader that finds a writer there; `body`'s errors.
    public static func holding<Value>(_ directory: URL, _ mode: Mode, _ body: () throws -> Value) throws -> Value {
        let descriptor = open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else {
            if mode == .reading { return try body() }
            throw CheckpointError.writeFailed(path: directory.path, reason: OutputFile.errnoText())
        }
        // Unlocked before it is closed: a process spawned meanwhile holds a copy of the descriptor
        // until its exec closes it, and with it the lock, which a close alone would leave held
        // for that moment (a reader then took the folder for one a synth writes).
        defer {
            flock(descriptor, LOCK_UN)
            close(descriptor)
        }
        guard flock(descriptor, (mode == .writing ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0 else {
            let held = errno == EWOULDBLOCK
            switch mode {
            case .reading:
                guard held else { return try body() }
                throw CheckpointError.readFailed(
                    path: directory.path, reason: "a synth run is writing a checkpoint there; wait for it to end")
            case .writing:
                guard held else {
                    throw CheckpointError.writeFailed(path: directory.path, reason: OutputFile.errnoText())
                }
                throw CheckpointError.writeFailed(
                    path: directory.path,
                    reason: heldByReaders(directory)
                        ? "an export is reading the checkpoint there; wait for it to end"
                        : "another run is writing a checkpoint there; wait for it to end")
            }
        }
        return try body()
    }

    /// Runs `body` holding the lock on `directory` for reading, when there is a folder to read.
    /// - Throws: as ``holding(_:_:_:)``.
    public static func reading<Value>(_ directory: URL?, _ body: () throws -> Value) throws -> Value {
        guard let directory else { return try body() }
        return try holding(directory, .reading, body)
    }

    /// Whether the lock on `directory`, held, is held by readers only: a shared lock is then
    /// granted (and dropped at once). Says which run is in the way; it takes no decision.
    private static func heldByReaders(_ directory: URL) -> Bool {
        let probe = open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard probe >= 0 else { return false }
        defer { close(probe) }
        return flock(probe, LOCK_SH | LOCK_NB) == 0
    }
}
