import Foundation

#if canImport(Glibc)
    import Glibc
    private let systemWrite = Glibc.write
#elseif canImport(Darwin)
    import Darwin
    private let systemWrite = Darwin.write
#endif

/// A way a file-system operation can fail, as a full or failing disk makes it fail.
public enum FaultKind: String, CaseIterable, Sendable {
    /// `ENOSPC`: the disk is full (any operation that allocates: folders, files, writes, syncs, renames).
    case noSpace = "no-space"
    /// `EIO`: the device failed (any operation).
    case ioError = "io-error"
    /// `EACCES`: the folder refuses a new entry (creating folders and files, renaming).
    case permissionDenied = "permission-denied"
    /// A write stores only part of its bytes and the rest cannot be written (writes only).
    case shortWrite = "short-write"

    /// The `errno` value the kind stands for (nil for a short write, which is not an errno).
    var errorNumber: Int32? {
        switch self {
        case .noSpace: return ENOSPC
        case .ioError: return EIO
        case .permissionDenied: return EACCES
        case .shortWrite: return nil
        }
    }

    /// Whether an operation of `operation` can fail this way.
    public func canFail(_ operation: FileOperation) -> Bool {
        switch self {
        case .noSpace, .ioError: return true
        case .permissionDenied: return operation == .createDirectory || operation == .createFile || operation == .rename
        case .shortWrite: return operation == .write
        }
    }
}

/// The file-system operations an artifact is written with; every one is counted by a `FaultInjector`.
public enum FileOperation: String, CaseIterable, Sendable {
    /// Creating a folder.
    case createDirectory
    /// Creating (or truncating) a file.
    case createFile
    /// Writing bytes to a file.
    case write
    /// Syncing a file to disk.
    case sync
    /// Renaming a folder into place (or moving a previous artifact aside).
    case rename
}

/// Counts file-system operations and fails the Nth one: how tests prove that any failed
/// write, whatever its kind, leaves no artifact that looks complete, never harms a previous
/// one, and leaves no temporary files.
///
/// With a `FaultKind`, only operations that can fail that way are counted (a short write
/// can only happen to a write), so sweeping N from 1 to `operations` of a counting run
/// visits every place the fault can strike.
public final class FaultInjector: @unchecked Sendable {
    // @unchecked: the counter is guarded by `lock`; everything else is immutable.
    /// The kind of failure injected (nil: the custom `reason`, on any operation).
    public let kind: FaultKind?
    /// The error a failing operation reports.
    public let reason: String
    private let failAt: Int
    /// Run at the `failAt`-th operation, which then proceeds instead of failing: what happens to
    /// the file system meanwhile (a link retargeted), told the operation and its path.
    private let action: (@Sendable (FileOperation, String) -> Void)?
    private var count = 0
    private var failed: (operation: FileOperation, path: String)?
    private let lock = NSLock()

    /// Fails the `operation`-th operation of any kind (1-based) with `reason`.
    public init(failAtOperation operation: Int, reason: String = "no space left on device") {
        failAt = operation
        kind = nil
        self.reason = reason
        action = nil
    }

    /// Fails the `operation`-th operation (1-based) that can fail as `kind` does, the way it does.
    public init(failAtOperation operation: Int, kind: FaultKind) {
        failAt = operation
        self.kind = kind
        reason = kind.errorNumber.map(systemErrorMessage) ?? "short write"
        action = nil
    }

    /// Runs `action` before the `operation`-th operation of any kind (1-based), which then
    /// proceeds: something another process does to the file system mid-run.
    public init(atOperation operation: Int, perform action: @escaping @Sendable (FileOperation, String) -> Void) {
        failAt = operation
        kind = nil
        reason = ""
        self.action = action
    }

    /// Operations counted so far.
    public var operations: Int { lock.withLock { count } }

    /// The operation that was failed (or that the action ran before) and its path, once it has been.
    public var injected: (operation: FileOperation, path: String)? { lock.withLock { failed } }

    /// Counts one operation on `path`; throws `BundleError.writeFailed` when it is the one to fail.
    func check(_ path: String, _ operation: FileOperation) throws {
        guard isCountedFault(path, operation) else { return }
        throw BundleError.writeFailed(path: path, reason: reason)
    }

    /// Counts one write of `byteCount` bytes; returns how many bytes the system should accept
    /// before the write comes up short, or nil for all of them.
    /// - Throws: `BundleError.writeFailed` when the write is to fail outright.
    func checkWrite(_ path: String, byteCount: Int) throws -> Int? {
        guard isCountedFault(path, .write) else { return nil }
        guard kind == .shortWrite else { throw BundleError.writeFailed(path: path, reason: reason) }
        return byteCount / 2
    }

    private func isCountedFault(_ path: String, _ operation: FileOperation) -> Bool {
        if let kind, !kind.canFail(operation) { return false }
        let reached = lock.withLock {
            count += 1
            guard count == failAt else { return false }
            failed = (operation, path)
            return true
        }
        guard reached, let action else { return reached }
        action(operation, path)
        return false
    }
}

/// A file being written: buffered, with a running size and CRC-32, every write checked.
/// All artifact bytes go through this type (and `ArtifactDirectory`), so a write failure is
/// always an error naming the path.
///
/// A large file can bypass the page cache (`bypassPageCache`): on Linux the writes then go
/// straight to the disk (`O_DIRECT`), which costs a tenth of the CPU time of copying nearly
/// a gigabyte of weights into freshly allocated cache pages, and the closing sync has
/// nothing left to flush. Where the file system refuses it, the file is written as usual.
///
/// Staged bytes are written by a queue of the file's own while the next ones are staged
/// into a second buffer: a direct write waits for the disk (0.6 s of a per-tensor export
/// of Qwen2.5-1.5B), and the caller's checksums and copies no longer wait with it. A failed
/// write is reported by the next call that writes or by ``finish()``.
public final class OutputFile {
    /// The path errors name (where the file will be once its artifact is published).
    public let path: String
    /// Bytes written so far.
    public private(set) var size = 0
    /// CRC-32 of the bytes written so far.
    public private(set) var crc = CRC32()
    /// Told the final size once ``finish()`` succeeds (the artifact folder checks it before publishing).
    var whenFinished: ((Int) -> Void)?

    private let descriptor: Int32
    /// Two staging buffers, aligned and sized for direct writes (multiples of `directAlignment`):
    /// one is filled while the other is written.
    private let buffers: [UnsafeMutableRawPointer]
    /// The buffer being filled.
    private var buffer: UnsafeMutableRawPointer { buffers[filling] }
    private var filling = 0
    private var buffered = 0
    private static let bufferLimit = 4 << 20
    /// Offset, address and length alignment that direct writes need on every Linux file system.
    private static let directAlignment = 4096
    /// Guards `directWrites` and `writeFailure`, which the write queue sets.
    private let lock = NSLock()
    private var directWrites = false
    private var writeFailure: Error?
    private var direct: Bool {
        get { lock.withLock { directWrites } }
        set { lock.withLock { directWrites = newValue } }
    }
    /// Writes staged buffers in order; at most one is in flight (`inFlight`).
    private let writeQueue = DispatchQueue(label: "exporter.output-file")
    private let inFlight = DispatchGroup()
    private let faults: FaultInjector?
    private var closed = false

    /// Creates (or truncates) the file at `url`.
    /// - Parameters:
    ///   - reportedPath: the path errors name (default: `url`'s).
    ///   - bypassPageCache: write around the page cache where the system allows it.
    /// - Throws: `BundleError.writeFailed` naming the path.
    public init(url: URL, faults: FaultInjector? = nil, reportedPath: String? = nil, bypassPageCache: Bool = false)
        throws
    {
        let path = reportedPath ?? url.path
        self.path = path
        self.faults = faults
        try faults?.check(path, .createFile)
        // The umask decides the mode, as for the folders.
        descriptor = open(url.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o666)
        guard descriptor >= 0 else { throw BundleError.writeFailed(path: path, reason: OutputFile.errnoText()) }
        buffers = (0..<2).map { _ in
            UnsafeMutableRawPointer.allocate(byteCount: Self.bufferLimit, alignment: Self.directAlignment)
        }
        // Under injected faults a write "accepts" half its bytes, which a direct write cannot.
        if bypassPageCache && faults == nil { direct = OutputFile.setDirect(descriptor, true) }
    }

    deinit {
        inFlight.wait()
        if !closed { _ = close(descriptor) }
        for buffer in buffers { buffer.deallocate() }
    }

    static func errnoText() -> String { systemErrorMessage(errno) }

    /// Refuses `url` as the destination of a report file a command writes whole and renames
    /// into place (`inspect --html`): only nothing, or a regular file, may be there (a rename
    /// would replace a device such as `/dev/null`, a FIFO, or a symbolic link with a file), and
    /// it may not be inside `artifact`, the artifact folder the report is of (a file of it
    /// replaced; nil for a manifest given as a file, whose folder is no artifact).
    /// - Throws: `BundleError.writeFailed` naming `url` and saying what is there.
    public static func checkReportDestination(_ url: URL, artifact: URL?) throws {
        var status = stat()
        if lstat(url.path, &status) == 0, status.st_mode & S_IFMT != S_IFREG {
            throw BundleError.writeFailed(
                path: url.path, reason: "\(fileKind(mode: status.st_mode)) is there, not a regular file: not replaced")
        }
        let folder = resolvedRealPath(url.deletingLastPathComponent().path)
        if let folder, let artifact, let root = resolvedRealPath(artifact.path),
            isPath(folder + "/" + url.lastPathComponent, inside: root)
        {
            throw BundleError.writeFailed(
                path: url.path, reason: "it is inside the artifact '\(artifact.path)': a report would replace its files"
            )
        }
    }

    /// Turns direct writes on or off; returns whether the system agreed.
    private static func setDirect(_ descriptor: Int32, _ on: Bool) -> Bool {
        #if canImport(Darwin)
            return fcntl(descriptor, F_NOCACHE, on ? 1 : 0) == 0
        #else
            #if arch(x86_64)
                let directFlag: Int32 = 0o40000
            #elseif arch(arm64)
                let directFlag: Int32 = 0o200000
            #else
                return false
            #endif
            let flags = fcntl(descriptor, F_GETFL)
            guard flags >= 0 else { return false }
            return fcntl(descriptor, F_SETFL, on ? flags | directFlag : flags & ~directFlag) == 0
        #endif
    }

    /// Appends `bytes`.
    /// - Throws: `BundleError.writeFailed` when the system refuses the write.
    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        crc.update(bytes)
        try append(bytes)
    }

    /// Appends `bytes` whose CRC-32 the caller already knows (`checksum`), so they are not read twice.
    /// - Throws: `BundleError.writeFailed` when the system refuses the write.
    public func write(_ bytes: UnsafeRawBufferPointer, checksum: UInt32) throws {
        crc.append(checksum: checksum, length: bytes.count)
        try append(bytes)
    }

    private func append(_ bytes: UnsafeRawBufferPointer) throws {
        guard let base = bytes.baseAddress else { return }
        size += bytes.count
        if !direct && bytes.count >= Self.bufferLimit {
            // Large: written from where it is rather than staged, once the staged bytes are.
            try flush()
            try waitForWrites()
            try writeAll(bytes)
            return
        }
        // Direct writes must come from the aligned buffer in whole blocks, so everything is staged.
        var offset = 0
        while offset < bytes.count {
            let take = min(bytes.count - offset, Self.bufferLimit - buffered)
            (buffer + buffered).copyMemory(from: base + offset, byteCount: take)
            buffered += take
            offset += take
            if buffered == Self.bufferLimit { try flush() }
        }
    }

    /// Appends `bytes`.
    /// - Throws: `BundleError.writeFailed` when the system refuses the write.
    public func write(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try write($0) }
    }

    /// Appends zero bytes up to the next multiple of `alignment`.
    /// - Throws: `BundleError.writeFailed` when the system refuses the write.
    public func pad(toMultipleOf alignment: Int) throws {
        let padding = (alignment - size % alignment) % alignment
        if padding > 0 { try write([UInt8](repeating: 0, count: padding)) }
    }

    /// Flushes, syncs to disk and closes.
    /// - Throws: `BundleError.writeFailed` when any of it fails.
    public func finish() throws {
        try waitForWrites()
        if direct && buffered % Self.directAlignment != 0 {
            // The tail is not a whole block: write it through the cache.
            direct = false
            guard OutputFile.setDirect(descriptor, false) else {
                throw BundleError.writeFailed(path: path, reason: OutputFile.errnoText())
            }
        }
        try flush()
        try waitForWrites()
        try faults?.check(path, .sync)
        guard fsync(descriptor) == 0 else { throw BundleError.writeFailed(path: path, reason: OutputFile.errnoText()) }
        closed = true
        guard close(descriptor) == 0 else { throw BundleError.writeFailed(path: path, reason: OutputFile.errnoText()) }
        whenFinished?(size)
    }

    /// Hands the staged bytes to the write queue and stages into the other buffer, once that
    /// one's write is done.
    private func flush() throws {
        guard buffered > 0 else { return }
        try waitForWrites()
        let staged = WorkerShared(UnsafeRawBufferPointer(start: buffer, count: buffered))
        writeQueue.async(group: inFlight) { [self] in
            do { try writeAll(staged.value) } catch {
                lock.withLock { if writeFailure == nil { writeFailure = error } }
            }
        }
        filling = 1 - filling
        buffered = 0
    }

    /// Waits for the write in flight, if any; rethrows the first write failure.
    private func waitForWrites() throws {
        inFlight.wait()
        if let failure = lock.withLock({ writeFailure }) { throw failure }
    }

    /// Writes every byte or throws: a write the system accepts only in part is continued,
    /// and one that then makes no progress is a short write, reported, never accepted.
    private func writeAll(_ bytes: UnsafeRawBufferPointer) throws {
        guard let base = bytes.baseAddress else { return }
        // Under fault injection, the system "accepts" only this many bytes, then nothing more.
        let accepted = try faults?.checkWrite(path, byteCount: bytes.count) ?? bytes.count
        var offset = 0
        while offset < bytes.count {
            let written = offset < accepted ? systemWrite(descriptor, base + offset, accepted - offset) : 0
            if written < 0 {
                if errno == EINTR { continue }
                // A file system can accept the direct flag yet refuse direct writes: write through the cache.
                if errno == EINVAL && direct && OutputFile.setDirect(descriptor, false) {
                    direct = false
                    continue
                }
                throw BundleError.writeFailed(path: path, reason: OutputFile.errnoText())
            }
            guard written > 0 else {
                throw BundleError.writeFailed(
                    path: path, reason: "short write (\(offset) of \(bytes.count) bytes written)")
            }
            offset += written
        }
    }
}
