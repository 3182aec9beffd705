import Foundation

/// Progress of an export, reported after each tensor.
public struct ExportProgress: Sendable {
    /// Tensors written.
    public let tensorsDone: Int
    /// Tensors in all.
    public let tensorCount: Int
    /// Parameters written.
    public let parametersDone: Int
    /// Parameters in all.
    public let parameterCount: Int
    /// Bytes of the weights file laid out up to the next tensor (its alignment padding
    /// included): the whole file once the last tensor is done.
    public let bytesDone: Int
    /// Bytes of the weights file.
    public let byteCount: Int
    /// The tensor just written (empty before the first).
    public let tensorName: String
}

/// What to write and where.
public struct BundleRequest {
    /// The plan.
    public let plan: ExportPlan
    /// Where the weights come from.
    public let source: WeightSource
    /// The checkpoint's files (relative name and size) for the manifest; empty for synthetic weights.
    public let sourceFiles: [Manifest.SourceFile]
    /// Tokenizer files to carry, or nil when there is no tokenizer.
    public let tokenizer: TokenizerFiles?
    /// The bundle folder to create (`.../<Name>.aimodel`).
    public let destination: URL
    /// Replace an existing bundle.
    public let overwrite: Bool
    /// Fault injection for tests.
    public let faults: FaultInjector?
    /// The inputs' key, recorded in the manifest.
    public let buildKey: String?
    /// Calibration statistics that weight palettisation (nil: data-free).
    public var calibration: Calibration?

    /// A request; `faults` is for tests.
    public init(
        plan: ExportPlan, source: WeightSource, sourceFiles: [Manifest.SourceFile], tokenizer: TokenizerFiles?,
        destination: URL, overwrite: Bool, buildKey: String? = nil, faults: FaultInjector? = nil
    ) {
        self.buildKey = buildKey
        self.plan = plan
        self.source = source
        self.sourceFiles = sourceFiles
        self.tokenizer = tokenizer
        self.destination = destination
        self.overwrite = overwrite
        self.faults = faults
    }
}

/// Writes a portable `.aimodel` bundle (docs/FORMAT.md): weights tensor by tensor, the graph,
/// the checkpoint's config and tokenizer files, and last the manifest with every file's size and CRC-32; then renames
/// the staging folder into place.
public enum BundleWriter {
    /// Bundle file names.
    public static let manifestName = "manifest.json"
    /// The graph description.
    public static let graphName = "graph.json"
    /// The checkpoint's `config.json`, copied byte for byte: the hyper-parameters the graph does
    /// not hold (a family's own, such as expert routing) for runtimes that need them.
    public static let configName = "config.json"
    /// The weights file.
    public static let weightsName = "weights.bin"

    /// Writes the bundle and returns its manifest.
    /// - Throws: `BundleError` for output problems, and the source's and compressor's errors
    ///   (naming the tensor); nothing is left at `destination` unless the whole bundle was written.
    /// - Parameter extraWarnings: warnings to record, asked for once the weights are written
    ///   (reading them may add some, such as clamped values).
    public static func write(
        _ request: BundleRequest, extraWarnings: () -> [String] = { [] }, progress: (ExportProgress) -> Void = { _ in }
    ) throws -> Manifest {
        let plan = request.plan
        let directory = try ArtifactDirectory(
            destination: request.destination, overwrite: request.overwrite, marker: manifestName,
            faults: request.faults)
        let layout = plan.weightsLayout
        let weights = try directory.createFile(weightsName, bypassPageCache: true)
        try weights.write(layout.header(tensorCount: plan.tensors.count))

        var manifest = Manifest(plan: plan, kind: "bundle", weights: request.source.weightsKind)
        // Summed once: per tensor, it made an export of many small tensors quadratic.
        let parameterCount = plan.parameters
        var parametersDone = 0
        let encoder = TensorEncoder(precision: plan.precision, importance: request.calibration?.energy ?? [:])
        manifest.compression.calibration = request.calibration?.record
        let prefetcher = TensorPrefetcher(encoder: encoder, tensors: plan.tensors, source: request.source)
        // Tensor i is written on its own queue while tensor i+1 is compressed: copying the
        // output into the page cache costs as much as a quarter of an export.
        let writer = TensorWriteQueue(file: weights, alignment: layout.alignment)
        progress(
            ExportProgress(
                tensorsDone: 0, tensorCount: plan.tensors.count, parametersDone: 0, parameterCount: parameterCount,
                bytesDone: 0, byteCount: layout.fileBytes, tensorName: ""))
        for (index, tensor) in plan.tensors.enumerated() {
            let encoded = try encoder.compress(tensor, try prefetcher.values(of: index), from: request.source)
            let parts = layout.parts[index]
            guard encoded.blobs.count == parts.count else {
                throw BundleError.invalidTensor(
                    tensor: tensor.spec.name, reason: "encoder produced an unexpected part count")
            }
            for (blob, part) in zip(encoded.blobs, parts) where blob.byteCount != part.bytes {
                throw BundleError.invalidTensor(
                    tensor: tensor.spec.name,
                    reason: "\(part.kind) is \(blob.byteCount) bytes, the layout expects \(part.bytes)")
            }
            try writer.enqueue(zip(encoded.blobs, parts.map(\.offset)).map { ($0, $1) }, tensor: tensor.spec.name)
            manifest.tensors[index].parts = parts.map {
                Manifest.Part(kind: $0.kind, dtype: $0.dtype, file: weightsName, offset: $0.offset, bytes: $0.bytes)
            }
            manifest.tensors[index].sqnrDB = encoded.sqnr.flatMap { $0.isFinite ? Manifest.rounded($0) : nil }
            parametersDone += tensor.spec.elementCount
            let nextStart = layout.parts.dropFirst(index + 1).first?.first?.offset
            progress(
                ExportProgress(
                    tensorsDone: index + 1, tensorCount: plan.tensors.count, parametersDone: parametersDone,
                    parameterCount: parameterCount, bytesDone: nextStart ?? layout.fileBytes,
                    byteCount: layout.fileBytes,
                    tensorName: tensor.spec.name))
        }
        try writer.drain()
        try weights.pad(toMultipleOf: layout.alignment)
        try weights.finish()
        var files = [Manifest.File(path: weightsName, bytes: weights.size, crc32: hex(weights.crc.value))]

        let graph = try directory.createFile(graphName)
        try graph.write(try CanonicalJSON.encode(GraphDescription(plan: plan)))
        try graph.finish()
        files.append(Manifest.File(path: graphName, bytes: graph.size, crc32: hex(graph.crc.value)))

        let config = try directory.createFile(configName)
        try copyContents(of: plan.model.configURL, to: config)
        try config.finish()
        files.append(Manifest.File(path: configName, bytes: config.size, crc32: hex(config.crc.value)))

        if let tokenizer = request.tokenizer {
            for file in tokenizer.files {
                let copy = try directory.createFile("tokenizer/" + file.lastPathComponent)
                try copyContents(of: file, to: copy)
                try copy.finish()
                files.append(
                    Manifest.File(
                        path: "tokenizer/" + file.lastPathComponent, bytes: copy.size, crc32: hex(copy.crc.value)))
            }
            manifest.tokenizer = tokenizer.manifestRecord
        }
        manifest.warnings += extraWarnings()
        manifest.files = files.sorted { $0.path < $1.path }
        manifest.model.source.files = request.sourceFiles
        manifest.buildKey = request.buildKey
        manifest.sizes.bundleBytes = files.reduce(0) { $0 + $1.bytes }
        let manifestFile = try directory.createFile(manifestName)
        try manifestFile.write(try manifest.canonicalJSON())
        try manifestFile.finish()
        try directory.publish()
        return manifest
    }

    /// CRC-32 as 8 lowercase hex digits.
    public static func hex(_ crc: UInt32) -> String {
        let digits = String(crc, radix: 16)
        return String(repeating: "0", count: 8 - digits.count) + digits
    }

    private static func copyContents(of source: URL, to output: OutputFile) throws {
        try BundleError.readingFile(source.path) {
            let reader = try ReadOnlyFile(path: source.path)
            try reader.forEachPiece(of: 0..<reader.byteCount) { try output.write($0) }
        }
    }
}

/// Writes tensors' parts to the weights file on a serial queue, in order, a bounded number of
/// bytes behind the compressor; the first failure stops the rest and is rethrown to the caller.
final class TensorWriteQueue: @unchecked Sendable {
    /// Bytes that may wait behind the tensor being written: after a large tensor (the
    /// embedding), the small ones that follow are compressed while it is written rather
    /// than waiting for it. The int8 embedding's codes are made as they are written (about
    /// 0.25 s for Qwen2.5-1.5B's), in which time group 8 compresses about 90 MB: at 64 MB
    /// the compressor stopped and about 0.14 core-seconds were lost.
    static let pendingByteLimit = 128 << 20

    private let file: OutputFile
    private let alignment: Int
    private let queue = DispatchQueue(label: "exporter.write")
    /// Guards `pending` and `failure`; signalled as writes finish.
    private let condition = NSCondition()
    /// Sizes of the tensors queued and not yet written, oldest (the one being written) first.
    private var pending: [Int] = []
    private var failure: Error?

    init(file: OutputFile, alignment: Int) {
        self.file = file
        self.alignment = alignment
    }

    private var firstFailure: Error? {
        condition.lock()
        defer { condition.unlock() }
        return failure
    }

    /// Queues `blobs` (each with its planned offset) for writing, once the tensors waiting
    /// behind the one being written leave room (``pendingByteLimit`` bytes).
    /// - Throws: the failure of an earlier write, if any.
    func enqueue(_ blobs: [(Blob, Int)], tensor: String) throws {
        let bytes = blobs.reduce(0) { $0 + $1.0.byteCount }
        condition.lock()
        while failure == nil && !pending.isEmpty && pending.dropFirst().reduce(bytes, +) > Self.pendingByteLimit {
            condition.wait()
        }
        if let failure {
            condition.unlock()
            throw failure
        }
        pending.append(bytes)
        condition.unlock()
        queue.async { [self] in
            var error: Error?
            if firstFailure == nil {
                do {
                    for (blob, offset) in blobs {
                        try file.pad(toMultipleOf: alignment)
                        guard file.size == offset else {
                            throw BundleError.invalidTensor(
                                tensor: tensor, reason: "written at \(file.size), planned at \(offset)")
                        }
                        try blob.write(file)
                    }
                } catch let writeError {
                    error = writeError
                }
            }
            condition.lock()
            if failure == nil { failure = error }
            pending.removeFirst()
            condition.broadcast()
            condition.unlock()
        }
    }

    /// Waits for every queued write.
    /// - Throws: the first write failure.
    func drain() throws {
        queue.sync {}
        if let failure = firstFailure { throw failure }
    }
}
