import Foundation

/// Opens a compiled `.aimodelc`, checks it against its manifest and the format's rules, and walks
/// its regions and tensors: the proof that docs/FORMAT.md is enough to read what the compiler writes.
public struct CompiledArtifactReader {
    /// The artifact folder.
    public let url: URL
    /// Its manifest.
    public let manifest: Manifest
    /// Its `compiled` section.
    public let compiled: Manifest.Compiled
    /// Its graph description.
    public let graph: GraphDescription
    /// Its static description.
    public let staticDescription: StaticDescription

    /// Opens the artifact at `url`; with `verifyFiles`, recomputes every file's size and CRC-32
    /// (except those `verified` vouches for, unchanged since read in full; those read are recorded there).
    /// - Throws: `CompileError.notACompiledArtifact`, `BundleError` naming what does not hold.
    public init(url: URL, verifyFiles: Bool = true, verified: VerifiedFiles? = nil) throws {
        self.url = url
        func invalid(_ reason: String) -> CompileError { .notACompiledArtifact(path: url.path, reason: reason) }
        let manifestURL = url.appendingPathComponent(BundleWriter.manifestName)
        guard let data = try BundleReader.readDocument(manifestURL) else {
            throw invalid("no readable \(BundleWriter.manifestName)")
        }
        manifest = try Manifest.decoded(from: data, path: manifestURL.path)
        guard manifest.kind == "compiled", let compiled = manifest.compiled else {
            throw invalid("its manifest is of kind '\(manifest.kind)'")
        }
        self.compiled = compiled
        for file in manifest.files {
            guard !file.path.hasPrefix("/"), !file.path.split(separator: "/").contains("..") else {
                throw BundleError.fileMismatch(
                    path: file.path, reason: "the manifest names a file outside the artifact")
            }
            if verifyFiles { try BundleReader.verify(file, in: url, verified: verified) }
        }
        func decode<T: Decodable>(_ type: T.Type, _ name: String) throws -> T {
            guard let data = try BundleReader.readDocument(url.appendingPathComponent(name)) else {
                throw invalid("no readable \(name)")
            }
            do { return try JSONDecoder().decode(type, from: data) } catch { throw invalid("\(name) does not decode") }
        }
        graph = try decode(GraphDescription.self, BundleWriter.graphName)
        staticDescription = try decode(StaticDescription.self, StaticDescription.fileName)
        guard staticDescription.schema == StaticDescription.currentSchema else {
            throw BundleError.unsupportedSchema(
                path: StaticDescription.fileName, found: staticDescription.schema,
                supported: StaticDescription.currentSchema)
        }
        try checkLayout()
    }

    /// The regions, in execution order.
    public var regions: [Manifest.Region] { compiled.regions }

    /// Checks the weights header and region table against the manifest, regions page-aligned and in
    /// order, every part inside its region and aligned, and every layer in exactly one region.
    private func checkLayout() throws {
        let name = Compiler.weightsName
        func mismatch(_ reason: String) -> BundleError { .fileMismatch(path: name, reason: reason) }
        let page = compiled.pageSize
        guard page > 0, page & (page - 1) == 0 else { throw mismatch("page size \(page) is not a power of two") }
        let fixed = try read(offset: 0, count: CompilePlan.headerFixedBytes)
        guard Array(fixed[0..<8]) == CompilePlan.magic else { throw mismatch("bad magic") }
        let version = UInt32(littleEndianBytes: fixed[8..<12])
        guard version == CompilePlan.formatVersion else {
            throw mismatch("format version \(version); this version reads \(CompilePlan.formatVersion)")
        }
        guard Int(UInt32(littleEndianBytes: fixed[12..<16])) == page else {
            throw mismatch("page size differs from the manifest's")
        }
        guard Int(UInt32(littleEndianBytes: fixed[16..<20])) == CompilePlan.partAlignment else {
            throw mismatch("part alignment")
        }
        let regionCount = Int(UInt32(littleEndianBytes: fixed[20..<24]))
        guard regionCount == regions.count else {
            throw mismatch("\(regionCount) regions in the header, \(regions.count) in the manifest")
        }
        let fileBytes = Int(UInt64(littleEndianBytes: fixed[24..<32]))
        guard let record = manifest.files.first(where: { $0.path == name }), record.bytes == fileBytes else {
            throw mismatch("the header's file size \(fileBytes) differs from the manifest's")
        }
        let table = try read(offset: CompilePlan.headerFixedBytes, count: CompilePlan.regionEntryBytes * regionCount)
        var end = CompilePlan.headerFixedBytes + table.count
        var covered: [Int] = []
        for (index, region) in regions.enumerated() {
            let entry = table[(index * 16)..<(index * 16 + 16)]
            guard Int(UInt64(littleEndianBytes: entry.prefix(8))) == region.offset,
                Int(UInt64(littleEndianBytes: entry.suffix(8))) == region.bytes
            else { throw mismatch("region \(index) differs between the header and the manifest") }
            guard region.index == index, region.offset % page == 0, region.bytes % page == 0, region.offset >= end
            else {
                throw mismatch("region \(index) at \(region.offset) is not page-aligned after the previous one")
            }
            var cursor = region.offset
            for tensor in region.tensors {
                for part in tensor.parts {
                    guard part.file == name, part.offset % CompilePlan.partAlignment == 0, part.offset >= cursor,
                        part.offset + part.bytes <= region.offset + region.bytes
                    else {
                        throw mismatch(
                            "tensor '\(tensor.name)': \(part.kind) is outside region \(index) or out of order")
                    }
                    cursor = part.offset + part.bytes
                }
            }
            if let first = region.firstLayer, let last = region.lastLayer, first <= last {
                covered += Array(first...last)
            }
            end = region.offset + region.bytes
        }
        guard end == fileBytes else { throw mismatch("the regions end at \(end), the file at \(fileBytes)") }
        guard covered == Array(0..<graph.layers) else {
            throw mismatch("the regions cover layers \(covered), the graph has \(graph.layers)")
        }
    }

    /// The tensors of region `index`, in the order it executes them.
    /// - Throws: `BundleError.unknownTensor` for a region that does not exist.
    public func tensors(inRegion index: Int) throws -> [Manifest.RegionTensor] {
        guard regions.indices.contains(index) else { throw BundleError.unknownTensor("region \(index)") }
        return regions[index].tensors
    }

    /// The tensor `name` dequantised to float32 from its first placement (or its placement in region `region`).
    /// - Throws: `BundleError` when the tensor is unknown or its record breaks a format rule.
    public func dequantize(_ name: String, region: Int? = nil) throws -> [Float] {
        guard var tensor = manifest.tensors.first(where: { $0.name == name }) else {
            throw BundleError.unknownTensor(name)
        }
        if let region {
            guard let placed = try tensors(inRegion: region).first(where: { $0.name == name }) else {
                throw BundleError.unknownTensor("\(name) in region \(region)")
            }
            tensor.parts = placed.parts
        }
        return try dequantize(tensor)
    }

    /// The RoPE tables, row-major `[context, head_dim / 2]` each.
    /// - Throws: `BundleError` when a table is not of its declared size.
    public func ropeTables() throws -> (cos: [Float], sin: [Float]) {
        let count = staticDescription.rope.shape.saturatingProduct
        func table(_ name: String) throws -> [Float] {
            let bytes = try read(offset: 0, count: count * 4, file: name)
            return bytes.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
        }
        return (try table(staticDescription.rope.cos), try table(staticDescription.rope.sin))
    }

    /// Reads `count` bytes at `offset` of an artifact file.
    /// - Throws: `BundleError.fileMismatch` for a file outside the artifact, missing, or a
    ///   negative range, `BundleError.readFailed` on a short read.
    func read(offset: Int, count: Int, file: String = Compiler.weightsName) throws -> [UInt8] {
        guard BundleReader.isInsideBundle(file) else {
            throw BundleError.fileMismatch(path: file, reason: "the manifest names a file outside the artifact")
        }
        guard offset >= 0, count >= 0 else {
            throw BundleError.fileMismatch(
                path: file, reason: "\(count) bytes at offset \(offset) lie outside the file")
        }
        return try BundleReader.readingListedFile(file, in: url) {
            try ReadOnlyFile(path: $0).bytes(at: offset, count: count)
        }
    }
}

extension FixedWidthInteger {
    /// The integer stored little-endian in `bytes` (exactly its width).
    init<Bytes: Collection>(littleEndianBytes bytes: Bytes) where Bytes.Element == UInt8 {
        self = bytes.enumerated().reduce(Self.zero) { $0 | Self($1.element) << (8 * $1.offset) }
    }
}
