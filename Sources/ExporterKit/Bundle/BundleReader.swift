import Foundation

/// Opens a portable bundle, checks it against its manifest and returns tensors dequantised
/// to float32: the proof that docs/FORMAT.md is enough to read what we write.
public struct BundleReader {
    /// The bundle folder.
    public let url: URL
    /// Its manifest.
    public let manifest: Manifest
    /// The bytes of its manifest as read, which `manifest` was decoded from.
    public let manifestData: Data
    /// Its graph description.
    public let graph: GraphDescription

    /// Opens the bundle at `url`; with `verifyFiles`, recomputes every file's size and CRC-32
    /// (except those `verified` vouches for, unchanged since read in full; those read are recorded there).
    /// - Throws: `BundleError` naming the file that is missing, unreadable or not as the manifest says.
    public init(url: URL, verifyFiles: Bool = true, verified: VerifiedFiles? = nil) throws {
        self.url = url
        let manifestURL = url.appendingPathComponent(BundleWriter.manifestName)
        guard let manifestData = try BundleReader.readDocument(manifestURL) else {
            throw BundleError.notABundle(path: url.path, reason: "no readable \(BundleWriter.manifestName)")
        }
        self.manifestData = manifestData
        manifest = try Manifest.decoded(from: manifestData, path: manifestURL.path)
        guard manifest.kind == "bundle" else { throw BundleError.notPortable(path: url.path, manifest: manifest) }
        for file in manifest.files {
            guard BundleReader.isInsideBundle(file.path) else {
                throw BundleError.fileMismatch(path: file.path, reason: "the manifest names a file outside the bundle")
            }
            guard file.bytes >= 0 else {
                throw BundleError.fileMismatch(
                    path: file.path, reason: "the manifest gives a negative size \(file.bytes)")
            }
            if verifyFiles { try BundleReader.verify(file, in: url, verified: verified) }
        }
        let listed = Set(manifest.files.map(\.path))
        for tensor in manifest.tensors {
            for part in tensor.parts where !listed.contains(part.file) {
                throw BundleError.fileMismatch(
                    path: part.file, reason: "tensor '\(tensor.name)' names a file the manifest does not list")
            }
        }
        let graphURL = url.appendingPathComponent(BundleWriter.graphName)
        // A graph the manifest lists and that is gone or unreadable is a damaged bundle: said as
        // its file check says it (missing, another size or CRC-32), not as no bundle at all.
        let listedGraph = manifest.files.first { $0.path == BundleWriter.graphName }
        guard let graphData = try BundleReader.readDocument(graphURL) else {
            if let listedGraph { try BundleReader.verify(listedGraph, in: url) }
            throw BundleError.notABundle(path: url.path, reason: "no readable \(BundleWriter.graphName)")
        }
        do {
            graph = try JSONDecoder().decode(GraphDescription.self, from: graphData)
        } catch {
            if let listedGraph { try BundleReader.verify(listedGraph, in: url) }
            throw BundleError.notABundle(path: graphURL.path, reason: "invalid graph description")
        }
        // Nothing built from the bundle (compiled tables, a Core ML program, a forward pass) may
        // give such a graph a meaning of its own.
        if let problem = graph.rope.problem { throw BundleError.invalidGraph(path: graphURL.path, reason: problem) }
        try checkWeightsHeader()
        try checkRecords()
    }

    /// Every tensor's parts inside their files, and its record consistent with its shape and
    /// scheme (the decoder's checks, which read the small parts: LUTs, scales, outliers), so
    /// that nothing built from the bundle (a compiled artifact, a Core ML package) rests on a
    /// manifest that lies; the manifest is covered by no checksum.
    /// - Throws: `BundleError.fileMismatch` naming the tensor and the file, `.invalidTensor`.
    private func checkRecords() throws {
        var sizes: [String: Int] = [:]
        for tensor in manifest.tensors {
            if let layer = tensor.layer, !(0..<graph.layers).contains(layer) {
                throw BundleError.invalidTensor(
                    tensor: tensor.name, reason: "layer \(layer), the graph has \(graph.layers) layers")
            }
            // The decoder's record rules first (part sizes against shape and scheme), then the
            // bounds of the part it reads later, a range of rows at a time.
            _ = try TensorDecoder(tensor, precision: manifest.computePrecision) { try bytes(of: $0) }
            for part in tensor.parts {
                let size = try sizes[part.file] ?? fileSize(part.file)
                sizes[part.file] = size
                guard part.offset >= 0, part.bytes >= 0, part.offset <= size, part.bytes <= size - part.offset else {
                    throw BundleError.fileMismatch(
                        path: part.file,
                        reason:
                            "tensor '\(tensor.name)': \(part.bytes) bytes at offset \(part.offset) lie outside the file's "
                            + "\(size) bytes")
                }
            }
        }
    }

    /// The largest manifest or graph read: about 1 KiB per tensor, so far above any real one.
    public static let largestDocumentBytes = 256 << 20

    /// A JSON document of the bundle, or nil when it is missing or a folder. Read with bounded
    /// positioned reads (no `Data(contentsOf:)`, which leaks a buffer on empty files in this
    /// toolchain's Foundation, and would read a file of any size).
    /// - Throws: `BundleError.notABundle` when the file is larger than `largestDocumentBytes`,
    ///   `.readFailed` when it is there but cannot be opened (permission denied, a link loop)
    ///   or is no regular file (a FIFO, a device).
    static func readDocument(_ url: URL) throws -> Data? {
        try readIdentifiedDocument(url)?.data
    }

    /// ``readDocument(_:)``, with which file was read.
    static func readIdentifiedDocument(_ url: URL) throws -> (data: Data, identity: FileIdentity)? {
        let file: ReadOnlyFile
        do { file = try ReadOnlyFile(path: url.path) } catch CheckpointError.readFailed(_, let reason) {
            throw BundleError.readFailed(path: url.path, reason: reason)
        } catch CheckpointError.notARegularFile(_, let kind) where kind != fileKind(mode: S_IFDIR) {
            // A pipe (`/dev/stdin`, `<(…)`) is named as such, not as a folder without a manifest.
            throw BundleError.readFailed(path: url.path, reason: "\(kind), not a regular file")
        } catch {
            return nil
        }
        guard file.byteCount <= largestDocumentBytes else {
            throw BundleError.notABundle(
                path: url.path, reason: "\(file.byteCount) bytes is more than the limit of \(largestDocumentBytes)")
        }
        guard let bytes = try? file.bytes(at: 0, count: file.byteCount) else { return nil }
        return (Data(bytes), file.identity)
    }

    /// Runs `body` on the path of `file`, a file the manifest of the artifact at `folder` lists.
    /// - Throws: `BundleError.fileMismatch` "missing" when nothing is there (the artifact is
    ///   incomplete: verify says the same), `.readFailed` when it is there but cannot be read.
    static func readingListedFile<Result>(_ file: String, in folder: URL, _ body: (String) throws -> Result) throws
        -> Result
    {
        let url = folder.appendingPathComponent(file)
        // A name there that leads nowhere (a link loop) is read below and named as unreadable.
        guard CheckpointWeights.entryExists(url) else { throw BundleError.fileMismatch(path: file, reason: "missing") }
        return try BundleError.readingFile(url.path) { try body(url.path) }
    }

    /// Recomputes a file's size and CRC-32 and compares them with the manifest, unless
    /// `verified` vouches for the file; a file found as the manifest says is recorded there.
    /// - Throws: `BundleError.fileMismatch` naming the file.
    static func verify(_ file: Manifest.File, in folder: URL, verified: VerifiedFiles? = nil) throws {
        let url = folder.appendingPathComponent(file.path)
        if let verified, verified.vouches(for: url, bytes: file.bytes, crc32: file.crc32) { return }
        let before = verified.flatMap { _ in VerifiedFiles.stamp(of: url, crc32: file.crc32) }
        let (size, crc) = try readingListedFile(file.path, in: folder) { path in
            let reader = try ReadOnlyFile(path: path)
            return (reader.byteCount, reader.byteCount == file.bytes ? try CRC32.checksum(of: reader) : 0)
        }
        guard size == file.bytes else {
            throw BundleError.fileMismatch(
                path: file.path, reason: "size is \(size) bytes, the manifest says \(file.bytes)")
        }
        let actual = BundleWriter.hex(crc)
        guard actual == file.crc32 else {
            throw BundleError.fileMismatch(
                path: file.path, reason: "CRC-32 is \(actual), the manifest says \(file.crc32)")
        }
        verified?.record(url, before: before, bytes: file.bytes, crc32: file.crc32)
    }

    /// A manifest path must stay below the bundle folder: relative, no `..`, no empty parts.
    static func isInsideBundle(_ path: String) -> Bool {
        guard !path.isEmpty, !path.hasPrefix("/"), !path.contains("\0"), !path.contains("\\") else { return false }
        return path.split(separator: "/", omittingEmptySubsequences: false).allSatisfy {
            !$0.isEmpty && $0 != "." && $0 != ".."
        }
    }

    private func checkWeightsHeader() throws {
        let header = try readBytes(file: BundleWriter.weightsName, offset: 0, count: ExportPlan.weightsHeaderBytes)
        guard Array(header[0..<8]) == WeightsFileLayout.magic else {
            throw BundleError.fileMismatch(path: BundleWriter.weightsName, reason: "bad magic")
        }
        let version = header[8..<12].enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (8 * $1.offset) }
        guard version == WeightsFileLayout.formatVersion else {
            throw BundleError.fileMismatch(
                path: BundleWriter.weightsName,
                reason: "format version \(version); this version reads \(WeightsFileLayout.formatVersion)")
        }
        func u64(at offset: Int) -> UInt64 {
            header[offset..<(offset + 8)].enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * $1.offset) }
        }
        let tensorCount = u64(at: 16)
        guard tensorCount == UInt64(manifest.tensors.count) else {
            throw BundleError.fileMismatch(
                path: BundleWriter.weightsName,
                reason: "the header counts \(tensorCount) tensors, the manifest lists \(manifest.tensors.count)")
        }
        let declaredSize = u64(at: 24)
        let actualSize = try fileSize(BundleWriter.weightsName)
        guard declaredSize == UInt64(actualSize) else {
            throw BundleError.fileMismatch(
                path: BundleWriter.weightsName,
                reason: "the header says \(declaredSize) bytes, the file has \(actualSize)")
        }
    }

    /// The size of a bundle file, as reading it finds it (a symbolic link followed).
    /// - Throws: `BundleError.readFailed` naming why it cannot be opened.
    func fileSize(_ file: String) throws -> Int {
        try BundleReader.readingListedFile(file, in: url) { try ReadOnlyFile(path: $0).byteCount }
    }

    /// The tensor names, in execution order.
    public var tensorNames: [String] { manifest.tensors.map(\.name) }

    /// Reads `count` bytes at `offset` of a bundle file.
    /// - Throws: `BundleError.fileMismatch` when the range lies outside the file (the manifest
    ///   lies), `BundleError.readFailed` on a short read.
    func readBytes(file: String, offset: Int, count: Int) throws -> [UInt8] {
        guard BundleReader.isInsideBundle(file) else {
            throw BundleError.fileMismatch(path: file, reason: "the manifest names a file outside the bundle")
        }
        let size = try fileSize(file)
        guard offset >= 0, count >= 0, offset <= size, count <= size - offset else {
            throw BundleError.fileMismatch(
                path: file, reason: "\(count) bytes at offset \(offset) lie outside the file's \(size) bytes")
        }
        return try BundleReader.readingListedFile(file, in: url) {
            try ReadOnlyFile(path: $0).bytes(at: offset, count: count)
        }
    }

    /// The tensor `name` dequantised to float32, row-major.
    /// - Throws: `BundleError` when the tensor is unknown or its record breaks a format rule.
    public func dequantize(_ name: String) throws -> [Float] {
        guard let tensor = manifest.tensors.first(where: { $0.name == name }) else {
            throw BundleError.unknownTensor(name)
        }
        return try dequantize(tensor)
    }

}
