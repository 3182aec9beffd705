import Foundation

/// `Data/com.github.exporter/manifest.json` of an `.mlpackage`: schema `exporter.mlpackage/1`,
/// specified in `docs/MANIFEST.md`.
public struct MLPackageManifest: Codable, Equatable, Sendable {
    /// The schema this version writes and reads.
    public static let currentSchema = "exporter.mlpackage/1"
    /// Its path inside the package.
    public static let path = "Data/com.github.exporter/manifest.json"

    /// `exporter.mlpackage/1`.
    public var schema: String
    /// The tool that wrote it.
    public var tool: Manifest.Tool
    /// The model's name (`<Name>.mlpackage`).
    public var name: String
    /// Registry family.
    public var architecture: String
    /// The bundle it was converted from: its name and the CRC-32 of its `manifest.json`.
    public var sourceBundle: SourceBundle
    /// `iOS18`.
    public var deploymentTarget: String
    /// `Model.specificationVersion`: 9.
    public var specificationVersion: Int
    /// MIL opset: `CoreML8`.
    public var opset: String
    /// Tokens of context: the states and the causal mask are sized for it.
    public var contextLength: Int
    /// Bytes of the two KV-cache states.
    public var kvCacheBytes: Int
    /// Bytes of every file in `files`.
    public var packageBytes: Int
    /// Blobs in `weight.bin`.
    public var blobCount: Int
    /// Operations of the program.
    public var operationCount: Int
    /// Op type → count.
    public var opCounts: [String: Int]
    /// Where each bundle tensor went.
    public var tensors: [MLPackageTensor]
    /// The other blobs of `weight.bin` (RoPE tables, zero biases), in file order; nil in a
    /// package written before they were listed.
    @NullEncoded public var constants: [MLPackageConstant]?
    /// Every other file of the package with size and CRC-32, sorted by path.
    public var files: [Manifest.File]

    /// The source bundle.
    public struct SourceBundle: Codable, Equatable, Sendable {
        /// `<Name>.aimodel`.
        public var name: String
        /// CRC-32 of its `manifest.json`.
        public var manifestCRC32: String

        enum CodingKeys: String, CodingKey {
            case name
            case manifestCRC32 = "manifest_crc32"
        }
    }

    enum CodingKeys: String, CodingKey {
        case schema, tool, name, architecture, opset, tensors, constants, files
        case sourceBundle = "source_bundle"
        case deploymentTarget = "deployment_target"
        case specificationVersion = "specification_version"
        case contextLength = "context_length"
        case kvCacheBytes = "kv_cache_bytes"
        case packageBytes = "package_bytes"
        case blobCount = "blob_count"
        case operationCount = "operation_count"
        case opCounts = "op_counts"
    }
}

extension MLPackageManifest {
    /// The manifest of the package of `program` whose files (other than this manifest) are `files`.
    init(_ program: LanguageModelProgram, _ description: MLPackageWriter.Description, files: [Manifest.File]) {
        let files = files.sorted { $0.path < $1.path }
        self.init(
            schema: MLPackageManifest.currentSchema, tool: description.tool, name: description.name,
            architecture: description.architecture, sourceBundle: description.sourceBundle,
            deploymentTarget: CoreMLSpec.deploymentTarget, specificationVersion: CoreMLSpec.specificationVersion,
            opset: CoreMLSpec.opset, contextLength: description.contextLength, kvCacheBytes: description.kvCacheBytes,
            packageBytes: files.reduce(0) { $0 + $1.bytes }, blobCount: program.blobs.blobs.count,
            operationCount: program.model.program.operations.count, opCounts: program.opCounts,
            tensors: program.tensors, constants: program.constants, files: files)
    }
}

/// Writes `<Name>.mlpackage/` from a bundle: `Manifest.json`, `Data/com.apple.CoreML/model.mlmodel`
/// (the ML program), `Data/com.apple.CoreML/weights/weight.bin` (blob storage) and our manifest.
/// Written in a staging folder and renamed into place when whole; byte-reproducible (item
/// identifiers derive from content, nothing depends on time or place).
public enum MLPackageWriter {
    /// Path of the model specification inside the package.
    public static let modelPath = "Data/com.apple.CoreML/model.mlmodel"
    /// Path of the blob storage file inside the package.
    public static let weightsPath = "Data/com.apple.CoreML/weights/weight.bin"
    /// The package manifest.
    public static let packageManifestPath = "Manifest.json"

    /// What converting a bundle whose manifest holds `manifestBytes` takes at its peak beyond
    /// what the process holds before it opens the bundle, its threads' stacks apart: a fixed
    /// 80 MiB (the bundle's and the package's read and write buffers, the program, the runtime's)
    /// and 24 bytes per byte of manifest (read, decoded, the program built from it). Measured
    /// under `ulimit -v` (README "Resource limits"): 38 MiB for a 2 MB bundle, 52 MiB for a
    /// 179M-parameter one, 57 MiB for Qwen2.5-1.5B's, 257 MiB for a bundle of 18,000 tensors (a
    /// 13 MB manifest).
    public static func memoryForecast(manifestBytes: Int) -> Int {
        (80 << 20).saturatingAdding([manifestBytes, 24].saturatingProduct)
    }

    /// Refuses to convert the bundle at `bundle` when `available` is less than
    /// ``memoryForecast(manifestBytes:)`` of its manifest's size (a bundle without one is left
    /// to the conversion to refuse).
    /// - Throws: `ResourceError.notEnoughMemoryFor(.package, …)`.
    public static func checkMemory(beforeOpening bundle: URL, available: AvailableMemory?) throws {
        var status = stat()
        guard let available, stat(bundle.appendingPathComponent(BundleWriter.manifestName).path, &status) == 0
        else { return }
        let needed = memoryForecast(manifestBytes: Int(status.st_size))
        guard needed > available.bytes else { return }
        throw ResourceError.notEnoughMemoryFor(
            .package(bundle: bundle.lastPathComponent), neededBytes: needed, availableBytes: available.bytes,
            limit: available.limit)
    }

    /// Where the package of `bundleURL` goes by default: beside it, `<Name>.mlpackage`.
    public static func defaultDestination(forBundle bundleURL: URL) -> URL {
        let name = bundleURL.deletingPathExtension().lastPathComponent
        return bundleURL.deletingLastPathComponent().appendingPathComponent(name + ".mlpackage", isDirectory: true)
    }

    /// Converts the bundle at `bundleURL` (verified first) into a package at `destination`,
    /// telling `progress` the weight bytes written, before the first blob and after each.
    /// - Parameter availableDiskBytes: free space of the destination's volume; a package that
    ///   would not fit is refused before anything is written (nil: not checked).
    /// - Throws: `BundleError` when the bundle does not read or an output cannot be written,
    ///   `CoreMLError` when the bundle cannot be expressed as a Core ML program,
    ///   `ResourceError.notEnoughDisk` when the package would not fit.
    @discardableResult
    public static func write(
        bundle bundleURL: URL, to destination: URL, overwrite: Bool, availableDiskBytes: Int? = nil,
        faults: FaultInjector? = nil, progress: (WorkProgress) -> Void = { _ in }
    ) throws -> MLPackageManifest {
        try write(
            bundle: bundleURL, to: destination, overwrite: overwrite, availableDiskBytes: availableDiskBytes,
            faults: faults, progress: progress, checkingBeforePublishing: { _ in }
        ).manifest
    }

    /// As ``write(bundle:to:overwrite:availableDiskBytes:faults:progress:)``, then runs `check`
    /// on the whole package while it is still under its staging name: a package that fails it
    /// (or a run stopped during it) is never published, and one it replaces stays until then.
    /// - Returns: the manifest, and what `check` returned.
    public static func write<Checked>(
        bundle bundleURL: URL, to destination: URL, overwrite: Bool, availableDiskBytes: Int? = nil,
        faults: FaultInjector? = nil, progress: (WorkProgress) -> Void = { _ in },
        checkingBeforePublishing check: (URL) throws -> Checked
    ) throws -> (manifest: MLPackageManifest, checked: Checked) {
        guard FileManager.default.fileExists(atPath: bundleURL.path) else {
            throw BundleError.artifactNotFound(path: bundleURL.path)
        }
        let bundle = try BundleReader(url: bundleURL)
        let program = try LanguageModelProgram.build(bundle: bundle)
        let description = Description(package: destination, bundle: bundle)
        let modelBytes = program.model.serialized
        if let available = availableDiskBytes {
            let needed = try packageBytes(program, modelBytes: modelBytes.count, description)
            guard needed <= available else {
                throw ResourceError.notEnoughDisk(
                    directory: destination.deletingLastPathComponent().physicallyStandardized.path, neededBytes: needed,
                    availableBytes: available, what: .package)
            }
        }
        let directory = try ArtifactDirectory(
            destination: destination, overwrite: overwrite, marker: packageManifestPath, faults: faults)

        let weights = try directory.createFile(weightsPath, bypassPageCache: true)
        let weightBytes = program.blobs.fileBytes
        progress(WorkProgress(done: 0, total: weightBytes, countsBytes: true, stage: "weights written"))
        try MILBlobStorage.write(program.blobs, to: weights) {
            progress(WorkProgress(done: $0, total: weightBytes, countsBytes: true, stage: "weights written"))
        }
        try weights.finish()
        guard weights.size == program.blobs.fileBytes else {
            throw CoreMLError.invalidPackage(
                path: weightsPath, reason: "\(weights.size) bytes written, \(program.blobs.fileBytes) planned")
        }
        let model = try directory.createFile(modelPath)
        try model.write(modelBytes)
        try model.finish()

        let modelCRC = BundleWriter.hex(model.crc.value)
        let weightsCRC = BundleWriter.hex(weights.crc.value)
        let packageManifest = try directory.createFile(packageManifestPath)
        try packageManifest.write(try CanonicalJSON.encode(PackageManifest(modelCRC: modelCRC, weightsCRC: weightsCRC)))
        try packageManifest.finish()

        let files = [
            Manifest.File(
                path: packageManifestPath, bytes: packageManifest.size,
                crc32: BundleWriter.hex(packageManifest.crc.value)),
            Manifest.File(path: modelPath, bytes: model.size, crc32: modelCRC),
            Manifest.File(path: weightsPath, bytes: weights.size, crc32: weightsCRC),
        ]
        let manifest = MLPackageManifest(program, description, files: files)
        let manifestFile = try directory.createFile(MLPackageManifest.path)
        try manifestFile.write(try CanonicalJSON.encode(manifest))
        try manifestFile.finish()
        let checked = try check(directory.staging)
        try directory.publish()
        return (manifest, checked)
    }

    /// What a package says of itself besides its program: its name, the family, the tool, the
    /// source bundle, and the bundle's context and KV cache.
    public struct Description: Sendable {
        /// `<Name>` of `<Name>.mlpackage`.
        public var name: String
        /// Registry family.
        public var architecture: String
        /// The tool that wrote the bundle.
        public var tool: Manifest.Tool
        /// The bundle's name and the CRC-32 of its manifest.
        public var sourceBundle: MLPackageManifest.SourceBundle
        /// Tokens of context.
        public var contextLength: Int
        /// Bytes of the two KV-cache states.
        public var kvCacheBytes: Int

        /// The description of the package at `package` converted from `bundle`: the CRC-32 is
        /// of the manifest as the bundle was read.
        init(package: URL, bundle: BundleReader) {
            let bundleCRC = bundle.manifestData.withUnsafeBytes { CRC32.checksum($0) }
            self.init(
                name: package.deletingPathExtension().lastPathComponent, architecture: bundle.graph.architecture,
                tool: bundle.manifest.tool,
                sourceBundle: .init(
                    name: bundle.url.lastPathComponent, manifestCRC32: BundleWriter.hex(bundleCRC)),
                contextLength: bundle.graph.contextLength, kvCacheBytes: bundle.manifest.kvCache.bytes)
        }

        /// A description.
        public init(
            name: String, architecture: String, tool: Manifest.Tool, sourceBundle: MLPackageManifest.SourceBundle,
            contextLength: Int, kvCacheBytes: Int
        ) {
            self.name = name
            self.architecture = architecture
            self.tool = tool
            self.sourceBundle = sourceBundle
            self.contextLength = contextLength
            self.kvCacheBytes = kvCacheBytes
        }

        /// The package the export of `plan` converts its bundle to (`--format mlpackage`):
        /// named as the bundle, beside it. Its manifest's CRC-32 is not known yet; its width is.
        public init(plan: ExportPlan) {
            self.init(
                name: plan.outputName, architecture: GraphDescription(plan: plan).architecture,
                tool: Manifest.Tool(name: "exporter", version: ToolVersion.current),
                sourceBundle: .init(name: plan.outputName + ".aimodel", manifestCRC32: BundleWriter.hex(0)),
                contextLength: plan.contextLength, kvCacheBytes: plan.kvCache.bytes)
        }
    }

    /// Bytes of every file of the package of `program` (`weight.bin`, `model.mlmodel`,
    /// `Manifest.json` and our manifest), exactly, before any is written: `weight.bin` from the
    /// blob layout, the model as serialized, the manifests as they will be encoded (CRC-32s and
    /// identifiers have fixed widths).
    /// - Parameter modelBytes: the serialized model's size, when already known.
    /// - Throws: an encoding error (none in practice).
    public static func packageBytes(_ program: LanguageModelProgram, modelBytes: Int? = nil, _ description: Description)
        throws -> Int
    {
        let unknown = BundleWriter.hex(0)
        let files = [
            Manifest.File(
                path: packageManifestPath,
                bytes: try CanonicalJSON.encode(PackageManifest(modelCRC: unknown, weightsCRC: unknown)).count,
                crc32: unknown),
            Manifest.File(path: modelPath, bytes: modelBytes ?? program.model.serialized.count, crc32: unknown),
            Manifest.File(path: weightsPath, bytes: program.blobs.fileBytes, crc32: unknown),
        ]
        let manifest = MLPackageManifest(program, description, files: files)
        return manifest.packageBytes + (try CanonicalJSON.encode(manifest)).count
    }

    /// Bytes of the package an export of `plan` converts its bundle to (`--format mlpackage`),
    /// from the plan alone: see ``packageBytes(_:modelBytes:_:)``.
    /// - Throws: `CoreMLError` when the bundle could not become a program.
    public static func packageBytes(plan: ExportPlan) throws -> Int {
        try packageBytes(LanguageModelProgram.build(plan: plan), Description(plan: plan))
    }

    /// `Manifest.json` of a package.
    struct PackageManifest: Codable {
        struct Item: Codable {
            var author: String
            var description: String
            var name: String
            var path: String
        }

        var fileFormatVersion: String
        var itemInfoEntries: [String: Item]
        var rootModelIdentifier: String

        /// The package manifest of a model and weights file with these CRC-32s.
        init(modelCRC: String, weightsCRC: String) {
            let modelID = identifier("model.mlmodel", modelCRC, weightsCRC)
            let weightsID = identifier("weights", modelCRC, weightsCRC)
            let exporterID = identifier("exporter", modelCRC, weightsCRC)
            fileFormatVersion = "1.0.0"
            itemInfoEntries = [
                modelID: .init(
                    author: "com.apple.CoreML", description: "CoreML Model Specification", name: "model.mlmodel",
                    path: "com.apple.CoreML/model.mlmodel"),
                weightsID: .init(
                    author: "com.apple.CoreML", description: "CoreML Model Weights", name: "weights",
                    path: "com.apple.CoreML/weights"),
                exporterID: .init(
                    author: "com.github.exporter", description: "exporter manifest", name: "manifest.json",
                    path: "com.github.exporter/manifest.json"),
            ]
            rootModelIdentifier = modelID
        }
    }

    /// A UUID-shaped identifier derived from `parts` (two FNV-1a 64-bit hashes): the same
    /// content always gets the same identifier, so re-exports are byte-identical.
    static func identifier(_ parts: String...) -> String {
        let text = Array(parts.joined(separator: "\u{0}").utf8)
        func fnv(_ basis: UInt64) -> UInt64 {
            text.reduce(basis) { ($0 ^ UInt64($1)) &* 0x0000_0100_0000_01B3 }
        }
        var high = fnv(0xCBF2_9CE4_8422_2325)
        var low = fnv(0x6C62_272E_07BB_0142)
        high = (high & ~0xF000) | 0x8000  // version nibble 8: custom
        low = (low & ~(0xC << 60)) | (0x8 << 60)  // RFC 4122 variant
        let hex = String(format: "%016llX%016llX", high, low)
        let characters = Array(hex)
        return [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(characters[$0]) }.joined(separator: "-")
    }

}
