import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Writes a safetensors file as a stream: the header, declaring every tensor, first; then each
/// tensor's data in the header's order (names ascending), in as many pieces as the caller likes.
///
/// A small state machine in the manner of gguf-py's writer: data for any tensor but the next
/// one, more bytes than declared, or finishing early is refused. The file is written under a
/// temporary name beside the destination (`.<name>.partial-<pid>`, locked with `flock` while
/// it is written) and renamed over it only when complete, so a reader never sees a half-written
/// file; ``removeAbandonedTemporaries(in:)`` removes those a killed writer left. Nothing but a
/// 1 MiB buffer is held in memory.
///
/// The header is deterministic (keys in ascending order, no white space but the padding to an
/// 8-byte boundary), so equal inputs give identical bytes.
public final class SafetensorsWriter {
    /// One tensor to be written.
    public struct TensorDeclaration: Equatable, Sendable {
        /// The tensor's name.
        public let name: String
        /// Its element type as stored.
        public let dtype: TensorDType
        /// Its dimensions, outermost first.
        public let shape: [Int]

        /// Declares a tensor.
        public init(name: String, dtype: TensorDType, shape: [Int]) {
            self.name = name
            self.dtype = dtype
            self.shape = shape
        }
    }

    private enum State {
        case writing(tensorIndex: Int, bytesWritten: Int)
        /// Every byte written and synced, still under the temporary name.
        case complete
        case finished
        case failed
    }

    /// The file being written (it appears only once `finish()` succeeds).
    public let url: URL
    /// The declared tensors, in the order their data must come.
    public let declarations: [TensorDeclaration]
    /// Each declared tensor's data size in bytes, in declaration order.
    public let byteCounts: [Int]
    /// The size the finished file will have.
    public let fileByteCount: Int

    private let temporaryURL: URL
    private var descriptor: Int32
    private var state: State
    /// Removes the temporary file if the run is interrupted (``InterruptCleanup``).
    private var cleanupToken: Int?
    private var buffer: [UInt8] = []
    private static let bufferCapacity = 1 << 20

    /// Starts writing `url`: validates the declarations, sorts them by name, writes the header.
    /// - Parameter metadata: the header's `__metadata__` map (omitted when empty).
    /// - Throws: `CheckpointError.invalidTensorEntry` for a duplicate or reserved name, a
    ///   negative dimension or a size that overflows; `.writeFailed` when the file cannot be created.
    public init(url: URL, tensors: [TensorDeclaration], metadata: [String: String] = [:]) throws {
        let path = url.path
        let sorted = tensors.sorted { $0.name < $1.name }
        var byteCounts: [Int] = []
        var previous: String?
        for tensor in sorted {
            func invalid(_ reason: String) -> CheckpointError {
                .invalidTensorEntry(path: path, tensor: tensor.name, reason: reason)
            }
            if tensor.name == previous { throw invalid("declared twice") }
            if tensor.name == "__metadata__" { throw invalid("the name is reserved for metadata") }
            if let negative = tensor.shape.first(where: { $0 < 0 }) {
                throw invalid("negative dimension \(negative) in shape \(tensor.shape)")
            }
            var elements = 1
            for dimension in tensor.shape {
                let (product, overflow) = elements.multipliedReportingOverflow(by: dimension)
                guard !overflow else { throw invalid("element count of shape \(tensor.shape) overflows") }
                elements = product
            }
            guard let bytes = tensor.dtype.byteCount(elementCount: elements) else {
                throw invalid("\(elements) elements of \(tensor.dtype) do not fill whole bytes or overflow")
            }
            byteCounts.append(bytes)
            previous = tensor.name
        }

        var header = SafetensorsWriter.headerText(sorted, byteCounts: byteCounts, metadata: metadata)
        // Pad with spaces so the data starts 8-byte aligned, as the reference writer does.
        while (8 + header.count) % 8 != 0 { header.append(UInt8(ascii: " ")) }
        var total = 8 + header.count
        for bytes in byteCounts {
            let (sum, overflow) = total.addingReportingOverflow(bytes)
            guard !overflow else { throw CheckpointError.writeFailed(path: path, reason: "file size overflows") }
            total = sum
        }

        self.url = url
        self.declarations = sorted
        self.byteCounts = byteCounts
        self.fileByteCount = total
        self.temporaryURL = url.deletingLastPathComponent()
            .appendingPathComponent(".\(url.lastPathComponent).partial-\(getpid())")
        self.descriptor = -1
        self.state = .failed
        // A signal arriving between the file's creation and its registration is handled after it.
        let temporary = temporaryURL
        (descriptor, cleanupToken) = try InterruptCleanup.registering {
            let opened = try SafetensorsWriter.openLocked(temporary, reportedAs: path)
            return (opened, InterruptCleanup.register(temporary))
        }
        buffer.reserveCapacity(SafetensorsWriter.bufferCapacity)
        state = .writing(tensorIndex: 0, bytesWritten: 0)
        withUnsafeBytes(of: UInt64(header.count).littleEndian) { buffer.append(contentsOf: $0) }
        buffer.append(contentsOf: header)
        advancePastEmptyTensors()
    }

    /// Creates (or truncates) the temporary file `url` and takes its `flock`, so that a cleaner
    /// (``removeAbandonedTemporaries(in:)``) leaves it alone; a cleaner that took it between the
    /// open and the flock removed it: opened again.
    /// - Returns: the open descriptor.
    /// - Throws: `CheckpointError.writeFailed` naming `path`.
    private static func openLocked(_ url: URL, reportedAs path: String) throws -> Int32 {
        var chosen: Int32 = -1
        for _ in 0..<3 where chosen < 0 {
            let opened = open(url.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o666)
            guard opened >= 0 else {
                throw CheckpointError.writeFailed(path: path, reason: systemErrorMessage(errno))
            }
            let locked = flock(opened, LOCK_EX | LOCK_NB) == 0
            // EWOULDBLOCK: a cleaner holds it and is removing it. Any other failure: no `flock` here.
            let cleaning = !locked && errno == EWOULDBLOCK
            var openedStatus = stat()
            var namedStatus = stat()
            if !cleaning
                && (!locked
                    || (fstat(opened, &openedStatus) == 0 && stat(url.path, &namedStatus) == 0
                        && openedStatus.st_dev == namedStatus.st_dev && openedStatus.st_ino == namedStatus.st_ino))
            {
                chosen = opened
            } else {
                close(opened)
            }
        }
        guard chosen >= 0 else {
            throw CheckpointError.writeFailed(
                path: path, reason: "its temporary file was removed as soon as it was made")
        }
        return chosen
    }

    deinit {
        if let cleanupToken { InterruptCleanup.unregister(cleanupToken) }
        if descriptor >= 0 {
            close(descriptor)
            unlink(temporaryURL.path)
        }
    }

    /// The tensor whose data is expected next, nil once all data is written.
    public var nextTensorName: String? {
        guard case .writing(let index, _) = state, index < declarations.count else { return nil }
        return declarations[index].name
    }

    /// Appends `bytes` (stored form: little-endian) to the data of tensor `name`, which must be
    /// the next tensor; a tensor's data may come in several calls.
    /// - Throws: `CheckpointError.writeOutOfOrder`, `.tooMuchData`, `.writerClosed`, `.writeFailed`.
    public func write(_ name: String, bytes: UnsafeRawBufferPointer) throws {
        guard case .writing(let index, let written) = state else { throw CheckpointError.writerClosed(path: url.path) }
        guard index < declarations.count else {
            throw CheckpointError.writeOutOfOrder(path: url.path, expected: nil, received: name)
        }
        guard declarations[index].name == name else {
            throw CheckpointError.writeOutOfOrder(path: url.path, expected: declarations[index].name, received: name)
        }
        let expected = byteCounts[index]
        guard bytes.count <= expected - written else {
            throw CheckpointError.tooMuchData(
                path: url.path, tensor: name, expected: expected, received: written + bytes.count)
        }
        try append(bytes)
        state = .writing(tensorIndex: index, bytesWritten: written + bytes.count)
        if written + bytes.count == expected {
            state = .writing(tensorIndex: index + 1, bytesWritten: 0)
            advancePastEmptyTensors()
        }
    }

    /// Completes the file: checks every tensor got all its data, flushes, syncs and renames it
    /// into place (``complete()`` then ``publish()``).
    /// - Throws: `CheckpointError.incompleteTensor`, `.writerClosed`, `.writeFailed`.
    public func finish() throws {
        try complete()
        try publish()
    }

    /// Checks every tensor got all its data, flushes and syncs, but leaves the file under its
    /// (locked) temporary name until ``publish()``: a writer of several files publishes them
    /// only once every one is whole. Abandoned (or the process killed) before ``publish()``,
    /// the temporary file is removed.
    /// - Throws: `CheckpointError.incompleteTensor`, `.writerClosed`, `.writeFailed`.
    public func complete() throws {
        guard case .writing(let index, let written) = state else { throw CheckpointError.writerClosed(path: url.path) }
        guard index == declarations.count else {
            throw CheckpointError.incompleteTensor(
                path: url.path, tensor: declarations[index].name, written: written, expected: byteCounts[index])
        }
        try flush()
        guard fsync(descriptor) == 0 else { throw failure(systemErrorMessage(errno)) }
        state = .complete
    }

    /// Renames the file ``complete()`` finished into place.
    /// - Throws: `CheckpointError.writerClosed` unless it is complete; `.writeFailed` when the
    ///   rename fails (the temporary file is then removed).
    public func publish() throws {
        guard case .complete = state else { throw CheckpointError.writerClosed(path: url.path) }
        guard rename(temporaryURL.path, url.path) == 0 else {
            throw failure(systemErrorMessage(errno))
        }
        if let cleanupToken { InterruptCleanup.unregister(cleanupToken) }
        cleanupToken = nil
        close(descriptor)
        descriptor = -1
        state = .finished
    }

    /// Removes the temporary files (`.<name>.safetensors.partial-<pid>`) in `directory` that
    /// no writer holds any more: what a killed `synth` left. A file being written is locked
    /// by its writer and left alone; where the file system has no `flock`, nothing is removed.
    public static func removeAbandonedTemporaries(in directory: URL) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        for name in names where name.hasPrefix(".") && name.contains(".safetensors.partial-") {
            let path = directory.appendingPathComponent(name).path
            let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard descriptor >= 0 else { continue }
            var status = stat()
            if fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG,
                flock(descriptor, LOCK_EX | LOCK_NB) == 0
            {
                unlink(path)
            }
            close(descriptor)
        }
    }

    /// Gives up: removes the temporary file. Further calls throw `.writerClosed`.
    public func abandon() {
        if descriptor >= 0 {
            close(descriptor)
            unlink(temporaryURL.path)
            descriptor = -1
        }
        state = .failed
    }

    // MARK: Internals

    /// Empty tensors have no data call to wait for.
    private func advancePastEmptyTensors() {
        while case .writing(let index, _) = state, index < declarations.count, byteCounts[index] == 0 {
            state = .writing(tensorIndex: index + 1, bytesWritten: 0)
        }
    }

    private func append(_ bytes: UnsafeRawBufferPointer) throws {
        if buffer.count + bytes.count <= SafetensorsWriter.bufferCapacity {
            buffer.append(contentsOf: bytes)
            return
        }
        try flush()
        if bytes.count >= SafetensorsWriter.bufferCapacity {
            try writeFully(bytes)
        } else {
            buffer.append(contentsOf: bytes)
        }
    }

    private func flush() throws {
        guard !buffer.isEmpty else { return }
        try buffer.withUnsafeBytes { try writeFully($0) }
        buffer.removeAll(keepingCapacity: true)
    }

    private func writeFully(_ bytes: UnsafeRawBufferPointer) throws {
        guard var base = bytes.baseAddress else { return }
        var remaining = bytes.count
        while remaining > 0 {
            let result = systemWrite(descriptor, base, remaining)
            if result < 0 {
                if errno == EINTR { continue }
                throw failure(systemErrorMessage(errno))
            }
            base += result
            remaining -= result
        }
    }

    /// Marks the writer failed, removes the temporary file and returns the error to throw.
    private func failure(_ reason: String) -> CheckpointError {
        abandon()
        return .writeFailed(path: url.path, reason: reason)
    }

    static func headerText(_ tensors: [TensorDeclaration], byteCounts: [Int], metadata: [String: String]) -> [UInt8] {
        var text = "{"
        var members: [String] = []
        if !metadata.isEmpty {
            let entries = metadata.keys.sorted().map {
                "\(JSONWriter.quoted($0)):\(JSONWriter.quoted(metadata[$0] ?? ""))"
            }
            members.append("\"__metadata__\":{\(entries.joined(separator: ","))}")
        }
        var offset = 0
        for (tensor, bytes) in zip(tensors, byteCounts) {
            let shape = tensor.shape.map(String.init).joined(separator: ",")
            members.append(
                "\(JSONWriter.quoted(tensor.name)):{\"dtype\":\"\(tensor.dtype.rawValue)\",\"shape\":[\(shape)],"
                    + "\"data_offsets\":[\(offset),\(offset + bytes)]}")
            offset += bytes
        }
        text += members.joined(separator: ",") + "}"
        return Array(text.utf8)
    }
}

/// Calls the C library's `write`, whose name the writer's own `write` method shadows.
@inline(__always)
private func systemWrite(_ descriptor: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int {
    #if canImport(Glibc)
        return Glibc.write(descriptor, bytes, count)
    #elseif canImport(Musl)
        return Musl.write(descriptor, bytes, count)
    #else
        return Darwin.write(descriptor, bytes, count)
    #endif
}
