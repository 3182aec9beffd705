import Foundation

/// Checks an `.mlpackage` written by ``MLPackageWriter``: every file's size and CRC-32 against
/// our manifest, the blob storage file against its format (header, sentinels, offsets, bounds),
/// every tensor's blobs against the manifest, every blob accounted for by a tensor or a
/// constant (the zero biases zero), and, given the source bundle, every blob byte for
/// byte against the bundle's parts (each LUT, the index streams, the int8 values, float16
/// values; the int8 scales as the float16 rounding of the bundle's; the outliers' values and
/// their mask, the bit of each of the bundle's outlier indices).
public enum MLPackageVerifier {
    /// What a verification looked at.
    public struct Report: Equatable, Sendable {
        /// The package manifest.
        public let manifest: MLPackageManifest
        /// Files whose size and CRC-32 matched.
        public let filesChecked: Int
        /// Blobs found in `weight.bin`.
        public let blobsChecked: Int
        /// Tensors compared with the bundle (0 without a bundle).
        public let tensorsCompared: Int
    }

    /// Reads our manifest of the package at `url`, checking its schema first.
    /// - Throws: `BundleError.artifactNotFound` when nothing is at `url`, `.readFailed` when its
    ///   manifest cannot be opened, `CoreMLError.invalidPackage` or `BundleError.unsupportedSchema`.
    public static func readManifest(package url: URL) throws -> MLPackageManifest {
        guard FileManager.default.fileExists(atPath: url.path) else {
            throw BundleError.artifactNotFound(path: url.path)
        }
        let path = url.appendingPathComponent(MLPackageManifest.path)
        guard let data = try BundleReader.readDocument(path) else {
            throw CoreMLError.invalidPackage(path: url.path, reason: "no readable \(MLPackageManifest.path)")
        }
        do {
            return try VersionedDocument.decode(
                MLPackageManifest.self, from: [UInt8](data), schema: MLPackageManifest.currentSchema,
                what: "the manifest")
        } catch VersionedDocument.Failure.invalid(let reason) {
            throw CoreMLError.invalidPackage(path: path.path, reason: reason)
        } catch VersionedDocument.Failure.unsupportedSchema(let found) {
            throw BundleError.unsupportedSchema(
                path: path.path, found: found, supported: MLPackageManifest.currentSchema)
        }
    }

    /// Verifies the package at `url`, and compares it with the bundle at `bundle` when given.
    /// - Throws: `CoreMLError` or `BundleError` naming the first file, blob or tensor that is
    ///   not as it should be.
    /// - Parameter progress: told the tensors compared with the bundle, before the first and after each.
    public static func verify(
        package url: URL, bundle bundleURL: URL? = nil, progress: (WorkProgress) -> Void = { _ in }
    ) throws -> Report {
        try verify(package: url, bundle: bundleURL, pieceBytes: comparedPieceBytes, progress: progress)
    }

    /// As ``verify(package:bundle:progress:)``, comparing blobs that copy a bundle part `pieceBytes` at a time.
    static func verify(
        package url: URL, bundle bundleURL: URL?, pieceBytes: Int, progress: (WorkProgress) -> Void = { _ in }
    ) throws -> Report {
        let manifest = try readManifest(package: url)
        for file in manifest.files {
            guard !file.path.hasPrefix("/"), !file.path.split(separator: "/").contains("..") else {
                throw CoreMLError.invalidPackage(
                    path: file.path, reason: "the manifest names a file outside the package")
            }
            try BundleReader.verify(file, in: url)
        }
        let blobs = try MILBlobFile(url: url.appendingPathComponent(MLPackageWriter.weightsPath))
        guard blobs.entries.count == manifest.blobCount else {
            throw CoreMLError.invalidPackage(
                path: MLPackageWriter.weightsPath,
                reason: "\(blobs.entries.count) blobs, the manifest says \(manifest.blobCount)")
        }
        for tensor in manifest.tensors {
            for blob in tensor.blobs {
                guard let entry = blobs.entries.first(where: { $0.metadataOffset == blob.offset }),
                    entry.byteCount == blob.bytes
                else {
                    throw CoreMLError.invalidPackage(
                        path: MLPackageWriter.weightsPath,
                        reason: "tensor '\(tensor.name)': no \(blob.bytes)-byte blob at \(blob.offset)")
                }
            }
        }
        if let constants = manifest.constants {
            try checkAccounted(manifest, constants: constants, blobs: blobs)
        }
        var compared = 0
        if let bundleURL {
            let bundle = try BundleReader(url: bundleURL)
            let count = manifest.tensors.count
            for tensor in manifest.tensors {
                progress(
                    WorkProgress(
                        done: compared, total: count, stage: "\(compared)/\(count) tensors compared with the bundle"))
                try compare(tensor, blobs: blobs, bundle: bundle, pieceBytes: pieceBytes)
                compared += 1
            }
            progress(
                WorkProgress(
                    done: compared, total: count, stage: "\(compared)/\(count) tensors compared with the bundle"))
            let missing = Set(bundle.tensorNames).subtracting(manifest.tensors.map(\.name))
            if let name = missing.sorted().first {
                throw CoreMLError.bundleMismatch(tensor: name, reason: "not in the package")
            }
            try checkFigures(manifest, package: url, bundle: bundle)
        }
        return Report(
            manifest: manifest, filesChecked: manifest.files.count, blobsChecked: blobs.entries.count,
            tensorsCompared: compared)
    }

    /// The manifest's figures against those the converter gives for `bundle`: the program's
    /// counts, tensors and constants, the bundle's context, KV cache and manifest CRC-32, the
    /// deployment target, and the package's bytes from its files. Names are not compared: a
    /// package or bundle renamed since is the same one. A package without `constants` (before
    /// 0.7.3) is compared without them.
    /// - Throws: `CoreMLError.invalidPackage` naming the first key that differs.
    private static func checkFigures(_ manifest: MLPackageManifest, package: URL, bundle: BundleReader) throws {
        var expected = MLPackageManifest(
            try LanguageModelProgram.build(bundle: bundle),
            MLPackageWriter.Description(package: package, bundle: bundle),
            files: manifest.files)
        expected.name = manifest.name
        expected.sourceBundle.name = manifest.sourceBundle.name
        if manifest.constants == nil { expected.constants = nil }
        guard expected != manifest else { return }
        let recorded = try JSONParser.parse(CanonicalJSON.encode(manifest)).objectValue
        let computed = try JSONParser.parse(CanonicalJSON.encode(expected)).objectValue
        let key = computed?.keys.first { recorded?[$0] != computed?[$0] } ?? "the manifest"
        func shown(_ value: JSONValue?) -> String {
            guard let value else { return "absent" }
            let text = JSONWriter.string(value).trimmingCharacters(in: .whitespacesAndNewlines)
                .replacingOccurrences(of: "\n", with: " ")
            return text.count > 80 ? String(text.prefix(80)) + "…" : text
        }
        throw CoreMLError.invalidPackage(
            path: MLPackageManifest.path,
            reason: "'\(key)' is \(shown(recorded?[key])), the package and its bundle give \(shown(computed?[key]))")
    }

    /// Every blob of `weight.bin` is a tensor's or a constant's, exactly once, and every zero
    /// bias holds zeros.
    private static func checkAccounted(
        _ manifest: MLPackageManifest, constants: [MLPackageConstant], blobs: MILBlobFile
    )
        throws
    {
        func fail(_ reason: String) -> CoreMLError {
            .invalidPackage(path: MLPackageWriter.weightsPath, reason: reason)
        }
        var owners: [Int: String] = [:]
        let claims =
            manifest.tensors.flatMap { tensor in tensor.blobs.map { (tensor.name, $0.offset) } }
            + constants.map { ($0.name, $0.offset) }
        for (owner, offset) in claims {
            if let other = owners[offset] {
                throw fail("the blob at \(offset) is listed for both '\(other)' and '\(owner)'")
            }
            owners[offset] = owner
        }
        if let stray = blobs.entries.first(where: { owners[$0.metadataOffset] == nil }) {
            throw fail("the blob at \(stray.metadataOffset) is neither a tensor's nor a constant's")
        }
        for constant in constants {
            let entry = try blobs.entry(atMetadataOffset: constant.offset)
            guard entry.byteCount == constant.bytes else {
                throw fail("constant '\(constant.name)': no \(constant.bytes)-byte blob at \(constant.offset)")
            }
            if constant.kind == "zero_bias",
                try blobs.bytes(of: entry, range: 0..<entry.byteCount).contains(where: { $0 != 0 })
            {
                throw fail("constant '\(constant.name)': a zero bias that is not zero")
            }
        }
    }

    private static func compare(_ tensor: MLPackageTensor, blobs: MILBlobFile, bundle: BundleReader, pieceBytes: Int)
        throws
    {
        guard let record = bundle.manifest.tensors.first(where: { $0.name == tensor.name }) else {
            throw CoreMLError.bundleMismatch(tensor: tensor.name, reason: "not in the bundle")
        }
        func bundlePartRecord(_ kind: String) throws -> Manifest.Part {
            guard let part = record.parts.first(where: { $0.kind == kind }) else {
                throw CoreMLError.bundleMismatch(tensor: tensor.name, reason: "the bundle has no \(kind) part")
            }
            return part
        }
        func bundlePart(_ kind: String) throws -> [UInt8] {
            let part = try bundlePartRecord(kind)
            return try bundle.readBytes(file: part.file, offset: part.offset, count: part.bytes)
        }
        for blob in tensor.blobs {
            let entry = try blobs.entry(atMetadataOffset: blob.offset)
            func differs(fromByte byte: Int) -> CoreMLError {
                .bundleMismatch(
                    tensor: tensor.name, reason: "\(blob.kind) blob at \(blob.offset) differs from byte \(byte)")
            }
            /// Throws unless `stored` equals `expected`, bytes from `start` of the blob.
            func check(_ stored: [UInt8], _ expected: [UInt8], from start: Int = 0) throws {
                guard stored != expected else { return }
                let first =
                    zip(stored, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
                    ?? min(stored.count, expected.count)
                throw differs(fromByte: start + first)
            }
            let expected: [UInt8]
            switch blob.kind {
            case "lut":
                let lut = try bundlePart("lut")
                guard let bits = record.compression.bits, let lutRows = tensor.lutGroupRows,
                    let lutCount = tensor.lutGroups
                else {
                    throw CoreMLError.bundleMismatch(tensor: tensor.name, reason: "a LUT without bits or groups")
                }
                let rows = record.shape[0]
                // The package's manifest says how its LUTs cover the rows: hold it to the shape
                // before looping over it.
                guard lutRows > 0, lutCount > 0, lutRows <= rows, lutCount <= rows, lutRows * lutCount == rows else {
                    throw CoreMLError.bundleMismatch(
                        tensor: tensor.name,
                        reason: "\(lutCount) LUT groups of \(lutRows) rows do not cover its \(rows) rows")
                }
                let perBlock = record.compression.granularity == .perBlock
                let groupRows =
                    record.compression.granularity == .perGroupedChannel || perBlock
                    ? (record.compression.groupSize ?? rows) : rows
                let columns = record.shape.count >= 2 ? record.shape[1] : 1
                let lutBytes = (2 << bits) * record.compression.blockCount(columns: columns)
                expected = (0..<lutCount).flatMap { index -> ArraySlice<UInt8> in
                    let group = index * lutRows / groupRows
                    return lut[min(group * lutBytes, lut.count)..<min((group + 1) * lutBytes, lut.count)]
                }
            case "scales":
                let scales = try bundlePart("scales")
                expected = stride(from: 0, to: scales.count, by: 4).flatMap { index -> [UInt8] in
                    let bits = (0..<4).reduce(UInt32(0)) { $0 | UInt32(scales[index + $1]) << (8 * UInt32($1)) }
                    let half = Float16(Float(bitPattern: bits)).bitPattern
                    return [UInt8(truncatingIfNeeded: half), UInt8(truncatingIfNeeded: half >> 8)]
                }
            case "outlier_mask":
                let indices = try bundlePart("outlier_indices")
                let elements = record.shape.reduce(1, *)
                var mask = [UInt8](repeating: 0, count: (elements + 7) / 8)
                for index in stride(from: 0, to: indices.count - 3, by: 4) {
                    let element = Int(
                        (0..<4).reduce(UInt32(0)) { $0 | UInt32(indices[index + $1]) << (8 * UInt32($1)) })
                    guard element < elements else {
                        throw CoreMLError.bundleMismatch(
                            tensor: tensor.name, reason: "outlier index \(element) past \(elements) elements")
                    }
                    mask[element / 8] |= 1 << UInt8(element % 8)
                }
                expected = mask
            case "outlier_flags":
                expected = [UInt8](repeating: 1, count: try bundlePart("outlier_values").count / 2)
            default:
                // The bundle's part as it is: compared a piece at a time, since the embedding's
                // codes alone are 233 MB for Qwen2.5-1.5B (whole, the comparison held four copies).
                let part = try bundlePartRecord(blob.kind)
                let common = min(entry.byteCount, part.bytes)
                for start in stride(from: 0, to: common, by: pieceBytes) {
                    let end = min(common, start + pieceBytes)
                    try check(
                        try blobs.bytes(of: entry, range: start..<end),
                        try bundle.readBytes(file: part.file, offset: part.offset + start, count: end - start),
                        from: start)
                }
                // Equal as far as both go: a longer one differs where the shorter ends.
                guard entry.byteCount == part.bytes else { throw differs(fromByte: common) }
                continue
            }
            try check(try blobs.bytes(of: entry, range: 0..<entry.byteCount), expected)
        }
    }

    /// Bytes of a blob and of its bundle part compared at a time.
    static let comparedPieceBytes = 8 << 20
}
