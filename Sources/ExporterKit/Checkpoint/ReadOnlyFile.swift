#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The system's message for an `errno` value, lowercased at the start to fit our messages.
public func systemErrorMessage(_ code: Int32) -> String {
    guard let text = strerror(code) else { return "error \(code)" }
    let message = String(cString: text)
    return message.prefix(1).lowercased() + message.dropFirst()
}

/// A file as the file system knows it, whatever its name and content: its device and inode,
/// and when it last changed (a file removed and another made may get its inode number again).
struct FileIdentity: Equatable, Sendable {
    let device: UInt64
    let inode: UInt64
    let changed: [Int]

    init(_ status: stat) {
        device = UInt64(truncatingIfNeeded: status.st_dev)
        inode = UInt64(status.st_ino)
        #if os(Linux)
            changed = [status.st_ctim.tv_sec, status.st_ctim.tv_nsec, status.st_mtim.tv_sec, status.st_mtim.tv_nsec]
        #else
            changed = [
                status.st_ctimespec.tv_sec, status.st_ctimespec.tv_nsec, status.st_mtimespec.tv_sec,
                status.st_mtimespec.tv_nsec,
            ]
        #endif
    }

    /// The file at `path` now (a symbolic link followed), or nil when there is none.
    init?(path: String) {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        self.init(status)
    }
}

/// A read-only file read with positioned reads (`pread`).
///
/// Positioned reads need no shared offset, so one open file serves any number of threads,
/// and the data lands in the caller's buffer: the process's resident memory stays the size
/// of its buffers, where a memory map would count every touched page of a multi-gigabyte
/// checkpoint as resident.
final class ReadOnlyFile: @unchecked Sendable {
    // @unchecked: the descriptor and size never change after init, and `pread` is thread-safe.
    let path: String
    let byteCount: Int
    /// Which file was opened: a file put in its place since has another.
    let identity: FileIdentity
    private let descriptor: Int32

    /// Opens `path` for reading.
    ///
    /// The file is opened non-blocking, so that a FIFO (or a device) in place of a file is
    /// refused at once rather than waiting forever for a writer; `pread` of a regular file
    /// ignores the flag, which is cleared anyway.
    /// - Throws: `CheckpointError.cannotOpen` when it is not there, `.readFailed` when it is but
    ///   cannot be opened (permission denied, an I/O error),
    ///   `CheckpointError.notARegularFile` when it is a FIFO, a device or a folder (a socket
    ///   does not open: `cannotOpen`).
    init(path: String) throws {
        self.path = path
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            let reason = systemErrorMessage(errno)
            // Exit 66 for input not there, 74 for input there that cannot be read.
            guard errno == ENOENT || errno == ENOTDIR else {
                throw CheckpointError.readFailed(path: path, reason: reason)
            }
            throw CheckpointError.cannotOpen(path: path, reason: reason)
        }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            let reason = systemErrorMessage(errno)
            close(descriptor)
            throw CheckpointError.readFailed(path: path, reason: reason)
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            close(descriptor)
            throw CheckpointError.notARegularFile(path: path, kind: fileKind(mode: status.st_mode))
        }
        let flags = fcntl(descriptor, F_GETFL)
        if flags >= 0 { _ = fcntl(descriptor, F_SETFL, flags & ~O_NONBLOCK) }
        self.descriptor = descriptor
        self.byteCount = Int(status.st_size)
        identity = FileIdentity(status)
        #if os(Linux)
            // Tensors are read front to back: let the kernel read ahead generously.
            _ = posix_fadvise(descriptor, 0, 0, POSIX_FADV_SEQUENTIAL)
        #endif
    }

    deinit { close(descriptor) }

    /// Asks the system to start reading `range` into its cache now, without waiting: a hint,
    /// so that bytes wanted soon arrive from the disk while other work goes on.
    func willNeed(_ range: Range<Int>) {
        let start = max(0, min(range.lowerBound, byteCount))
        let end = max(start, min(range.upperBound, byteCount))
        guard end > start else { return }
        #if os(Linux)
            _ = posix_fadvise(descriptor, off_t(start), off_t(end - start), POSIX_FADV_WILLNEED)
        #elseif canImport(Darwin)
            var advice = radvisory(ra_offset: off_t(start), ra_count: Int32(clamping: end - start))
            _ = fcntl(descriptor, F_RDADVISE, &advice)
        #endif
    }

    /// `count` bytes at `offset`.
    /// - Throws: `CheckpointError.readFailed` on a system error or when the file ends first.
    func bytes(at offset: Int, count: Int) throws -> [UInt8] {
        try [UInt8](unsafeUninitializedCapacity: max(0, count)) { bytes, initialized in
            try read(into: UnsafeMutableRawBufferPointer(bytes), at: offset)
            initialized = bytes.count
        }
    }

    /// Passes the bytes of `range` to `body` in order, a piece of at most `pieceBytes` at a
    /// time read into one buffer: how whole files are checksummed and copied. (Foundation's
    /// `FileHandle.read(upToCount:)` on Linux reads 4 KiB per system call, 220,000 calls for
    /// a 900 MB file.)
    /// - Throws: `CheckpointError.readFailed`, and what `body` throws.
    func forEachPiece(
        of range: Range<Int>, pieceBytes: Int = 4 << 20, _ body: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        // Malloc's own alignment: a larger one pads the request, and a freed buffer no longer
        // fits the next, so the heap grew by a piece per call.
        let buffer = UnsafeMutableRawBufferPointer.allocate(
            byteCount: max(1, min(pieceBytes, range.count)), alignment: 16)
        defer { buffer.deallocate() }
        var start = range.lowerBound
        while start < range.upperBound {
            let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<min(buffer.count, range.upperBound - start)])
            try read(into: piece, at: start)
            try body(UnsafeRawBufferPointer(piece))
            start += piece.count
        }
    }

    /// Fills `buffer` with the bytes at `offset`, or throws: a short read is an error, never
    /// a partially filled buffer.
    /// - Throws: `CheckpointError.readFailed` on a system error or when the file ends first.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws {
        guard let base = buffer.baseAddress else { return }
        guard offset >= 0, offset <= byteCount, buffer.count <= byteCount - offset else {
            throw CheckpointError.readFailed(
                path: path,
                reason: "\(buffer.count) bytes at offset \(offset) are past the end of the \(byteCount)-byte file")
        }
        var done = 0
        while done < buffer.count {
            let result = pread(descriptor, base + done, buffer.count - done, off_t(offset + done))
            if result < 0 {
                if errno == EINTR { continue }
                throw CheckpointError.readFailed(path: path, reason: systemErrorMessage(errno))
            }
            if result == 0 {
                throw CheckpointError.readFailed(
                    path: path, reason: "file ended at byte \(offset + done), expected \(offset + buffer.count)")
            }
            done += result
        }
    }
}

/// What kind of file a `stat` mode describes, for messages: "a folder", "a FIFO", ….
func fileKind(mode: mode_t) -> String {
    switch mode & S_IFMT {
    case S_IFREG: return "a regular file"
    case S_IFDIR: return "a folder"
    case S_IFIFO: return "a FIFO"
    case S_IFSOCK: return "a socket"
    case S_IFLNK: return "a symbolic link"
    case S_IFCHR: return "a character device"
    case S_IFBLK: return "a block device"
    default: return "a special file"
    }
}

/// Resolves symbolic links and `..` in `path`, or nil when it does not exist.
/// `path` with every symbolic link resolved, for an entry that is there.
/// - Throws: `CheckpointError.cannotOpen` when nothing is there, or a symbolic link to nothing
///   (exit 66, as a file not there); `.readFailed` for a link loop or a folder on the way that
///   cannot be searched (74: there, but not readable).
func resolvedExistingPath(_ path: String) throws -> String {
    if let resolved = resolvedRealPath(path) { return resolved }
    let code = errno
    guard code == ENOENT || code == ENOTDIR else {
        throw CheckpointError.readFailed(path: path, reason: systemErrorMessage(code))
    }
    var status = stat()
    if lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFLNK {
        throw CheckpointError.cannotOpen(path: path, reason: "a symbolic link to a file that is not there")
    }
    throw CheckpointError.cannotOpen(path: path, reason: "no such file")
}

func resolvedRealPath(_ path: String) -> String? {
    guard let resolved = realpath(path, nil) else { return nil }
    defer { free(resolved) }
    return String(cString: resolved)
}

/// Whether `path` (already resolved) is `root` itself or inside it.
func isPath(_ path: String, inside root: String) -> Bool {
    if path == root { return true }
    let prefix = root.hasSuffix("/") ? root : root + "/"
    return path.hasPrefix(prefix)
}
