import Foundation

#if canImport(Glibc)
    import Glibc
    private let systemWrite = Glibc.write
#elseif canImport(Darwin)
    import Darwin
    private let systemWrite = Darwin.write
#endif

/// Counts write operations and fails the Nth one: how tests prove that any failed write
/// leaves no artifact that looks complete and never harms a previous one.
public final class FaultInjector: @unchecked Sendable {
    /// The error a failing operation reports.
    public let reason: String
    private let failAt: Int
    private var count = 0
    private let lock = NSLock()

    /// Fails the `operation`-th write operation (1-based) with `reason`.
    public init(failAtOperation operation: Int, reason: String = "No space left on device") {
        failAt = operation
        self.reason = reason
    }

    /// Operations counted so far.
    public var operations: Int { lock.withLock { count } }

    /// Counts one operation; throws when it is the one to fail.
    func check(_ path: String) throws {
        let current = lock.withLock { () -> Int in
            count += 1
            return count
        }
        if current == failAt { throw BundleError.writeFailed(path: path, reason: reason) }
    }
}

/// A file being written: buffered, with a running size and CRC-32, every write checked.
/// All artifact bytes go through this type (and `ArtifactDirectory`), so a write failure is
/// always an error naming the path.
public final class OutputFile {
    /// The path, for messages.
    public let path: String
    /// Bytes written so far.
    public private(set) var size = 0
    /// CRC-32 of the bytes written so far.
    public private(set) var crc = CRC32()

    private let descriptor: Int32
    private var buffer: [UInt8] = []
    private let bufferLimit = 4 << 20
    private let faults: FaultInjector?
    private var closed = false

    /// Creates (or truncates) the file at `url`.
    /// - Throws: `BundleError.writeFailed` naming the path.
    public init(url: URL, faults: FaultInjector? = nil) throws {
        path = url.path
        self.faults = faults
        try faults?.check(url.path)
        descriptor = open(url.path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard descriptor >= 0 else { throw BundleError.writeFailed(path: url.path, reason: OutputFile.errnoText()) }
        buffer.reserveCapacity(bufferLimit)
    }

    deinit {
        if !closed { _ = close(descriptor) }
    }

    static func errnoText() -> String { String(cString: strerror(errno)) }

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
        size += bytes.count
        if buffer.count + bytes.count > bufferLimit { try flush() }
        if bytes.count >= bufferLimit {
            try writeAll(bytes)
        } else {
            buffer.append(contentsOf: bytes.bindMemory(to: UInt8.self))
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
        try flush()
        try faults?.check(path)
        guard fsync(descriptor) == 0 else { throw BundleError.writeFailed(path: path, reason: OutputFile.errnoText()) }
        closed = true
        guard close(descriptor) == 0 else { throw BundleError.writeFailed(path: path, reason: OutputFile.errnoText()) }
    }

    private func flush() throws {
        guard !buffer.isEmpty else { return }
        try buffer.withUnsafeBytes { try writeAll($0) }
        buffer.removeAll(keepingCapacity: true)
    }

    private func writeAll(_ bytes: UnsafeRawBufferPointer) throws {
        try faults?.check(path)
        var offset = 0
        while offset < bytes.count {
            guard let base = bytes.baseAddress else { return }
            let written = systemWrite(descriptor, base + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                throw BundleError.writeFailed(path: path, reason: OutputFile.errnoText())
            }
            guard written > 0 else { throw BundleError.writeFailed(path: path, reason: "short write") }
            offset += written
        }
    }
}
