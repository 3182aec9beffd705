import Foundation

/// One of the process's standard streams, written with `write(2)`. A failed write (a closed
/// stream, a full disk, a reader gone: SIGPIPE is ignored) stops the writing to that stream,
/// never the command, and is kept for the exit status; `FileHandle.write` traps instead.
final class StandardStream: @unchecked Sendable {
    /// Standard output.
    static let output = StandardStream(descriptor: STDOUT_FILENO)
    /// Standard error.
    static let error = StandardStream(descriptor: STDERR_FILENO)

    private let descriptor: Int32
    private let lock = NSLock()
    private var firstFailure: Int32?
    private var closed = false

    private init(descriptor: Int32) { self.descriptor = descriptor }

    /// The `errno` of the first write that failed, or nil.
    var failure: Int32? {
        lock.lock()
        defer { lock.unlock() }
        return firstFailure
    }

    /// The process started with this stream closed, and its descriptor now reads `/dev/null`
    /// (``ExporterCommandLine/fillClosedStandardDescriptors()``): a write fails as on a closed one.
    func closedAtStart() {
        lock.withLock { closed = true }
    }

    /// Writes all of `text`, unless a write has failed.
    func write(_ text: String) {
        lock.lock()
        defer { lock.unlock() }
        guard firstFailure == nil else { return }
        guard !closed else {
            firstFailure = EBADF
            return
        }
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Foundation.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                firstFailure = errno
                return
            }
            bytes = bytes.dropFirst(written)
        }
    }
}
