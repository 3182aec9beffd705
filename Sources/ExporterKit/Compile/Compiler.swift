import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What to compile and where.
public struct CompileRequest {
    /// The platform of the devices.
    public var platform: DevicePlatform
    /// The architectures, already selected from the device table (`DeviceTable.select`).
    public var devices: [DeviceArchitecture]
    /// The minimum deployment version recorded in each artifact.
    public var minimumDeploymentVersion: DeploymentVersion
    /// Where `<Name>.<arch>.aimodelc` folders go.
    public var outputDirectory: URL
    /// Replace existing artifacts.
    public var overwrite = false
    /// Fault injection for tests.
    public var faults: FaultInjector?
    /// Free bytes of the output's volume, checked before anything is written; nil: unchecked.
    public var availableDiskBytes: Int?
    /// Memory the compile may take, checked against ``Compiler/memoryForecast(manifestBytes:devices:)``
    /// before anything is written; nil: unchecked (after an export, whose own check covers it).
    public var availableMemory: AvailableMemory?
    /// The user's device table `devices` were selected from (`--devices`), named in the command
    /// a refusal suggests; nil: the shipped table alone.
    public var deviceTable: URL?

    /// A request; `overwrite` and `faults` default to off.
    public init(
        platform: DevicePlatform, devices: [DeviceArchitecture], minimumDeploymentVersion: DeploymentVersion,
        outputDirectory: URL
    ) {
        self.platform = platform
        self.devices = devices
        self.minimumDeploymentVersion = minimumDeploymentVersion
        self.outputDirectory = outputDirectory
    }
}

/// One compiled artifact.
public struct CompileResult: Sendable {
    /// Its folder.
    public let url: URL
    /// Its manifest.
    public let manifest: Manifest
}

/// Compiles a portable bundle into one `<Name>.<arch>.aimodelc` per device architecture
/// (docs/FORMAT.md): regions of consecutive layers within the device's budget, each region's
/// weights contiguous and page-aligned, static tables precomputed, and a memory verdict.
public enum Compiler {
    /// The weights file of a compiled artifact.
    public static let weightsName = "weights.bin"
    /// The artifact folder extension.
    public static let artifactExtension = "aimodelc"

    /// Where the artifact of `name` for `device` goes.
    public static func artifactURL(name: String, device: DeviceArchitecture, in directory: URL) -> URL {
        directory.appendingPathComponent("\(name).\(device.id).\(artifactExtension)", isDirectory: true)
    }

    /// Checks that a bundle exported for `bundlePlatform` can be compiled for `platform`.
    /// - Throws: `CompileError.platformMismatch`.
    public static func checkPlatform(bundle: URL, manifest: Manifest, platform: DevicePlatform) throws {
        guard manifest.platform == platform.bundlePlatform.rawValue else {
            throw CompileError.platformMismatch(
                bundle: bundle.lastPathComponent, bundlePlatform: manifest.platform, requested: platform,
                registryType: manifest.model.registryType)
        }
    }

    /// The architectures of `ids` to compile a bundle with `manifest` for (``DeviceTable/select(_:platform:)``).
    /// An id found on another platform only is refused naming that platform to pass when its
    /// devices take this bundle (an iOS bundle compiles for the Vision Pro), and otherwise the
    /// export the device needs.
    /// - Throws: what `select` throws, `CompileError.architectureNeedsOtherBundle`.
    public static func selectDevices(
        _ ids: [String], from table: DeviceTable, platform: DevicePlatform, manifest: Manifest
    ) throws -> [DeviceArchitecture] {
        do { return try table.select(ids, platform: platform) } catch CompileError.architectureOnOtherPlatform(
            let id, let other, _)
            where other.bundlePlatform.rawValue != manifest.platform
        {
            throw CompileError.architectureNeedsOtherBundle(
                id: id, platform: other, bundlePlatform: manifest.platform, registryType: manifest.model.registryType)
        }
    }

    /// Opens the bundle at `url` (checking its manifest and small files; the weights file is
    /// checked while it is copied).
    /// - Throws: `CompileError.bundleNotFound`, `.bundleChanged` when the bundle is replaced
    ///   while it is checked, `BundleError`.
    public static func openBundle(_ url: URL) throws -> BundleReader {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw CompileError.bundleNotFound(path: url.path)
        }
        let reader = try BundleReader(url: url, verifyFiles: false)
        for file in reader.manifest.files where file.path != BundleWriter.weightsName {
            try whenReplaced(reader, file: file.path) { try BundleReader.verify(file, in: url) }
        }
        return reader
    }

    /// Whether the manifest at the bundle's path is no longer the one `bundle` read: the bundle
    /// was replaced (an export with `--overwrite` exchanges the whole folder) or its manifest rewritten.
    static func wasReplaced(_ bundle: BundleReader) -> Bool {
        let current = try? BundleReader.readDocument(bundle.url.appendingPathComponent(BundleWriter.manifestName))
        return current != bundle.manifestData
    }

    /// Runs `body`, which reads the bundle's `file`; a mismatch or failed read under a manifest
    /// that has changed since `bundle` read it is reported as the bundle replaced.
    /// - Throws: `CompileError.bundleChanged`, or what `body` throws.
    static func whenReplaced<Result>(_ bundle: BundleReader, file: String, _ body: () throws -> Result) throws
        -> Result
    {
        do { return try body() } catch let error as BundleError {
            switch error {
            case .fileMismatch, .readFailed:
                guard wasReplaced(bundle) else { throw error }
                throw CompileError.bundleChanged(path: bundle.url.appendingPathComponent(file).path, replaced: true)
            default: throw error
            }
        }
    }

    /// The bytes of the bundle's `file` (not its weights), checked against the size and CRC-32 the
    /// manifest `bundle` read gives, so that an artifact never mixes two bundles' files.
    /// - Throws: `CompileError.bundleChanged` when they differ or the file is gone, `BundleError.readFailed`.
    static func readUnchanged(_ file: Manifest.File, of bundle: BundleReader) throws -> [UInt8] {
        let url = bundle.url.appendingPathComponent(file.path)
        let bytes: [UInt8]
        do { bytes = try CompiledArtifactWriter.readWhole(url) } catch {
            guard FileManager.default.fileExists(atPath: url.path) else {
                throw CompileError.bundleChanged(path: url.path, replaced: wasReplaced(bundle))
            }
            throw error
        }
        guard bytes.count == file.bytes, BundleWriter.hex(bytes.withUnsafeBytes { CRC32.checksum($0) }) == file.crc32
        else {
            throw CompileError.bundleChanged(path: url.path, replaced: wasReplaced(bundle))
        }
        return bytes
    }

    /// Compiles the bundle at `bundleURL` for every device of `request`, one after the other.
    /// - Parameter progress: told the weight bytes written over all the devices' artifacts,
    ///   before the first region and after each.
    /// - Throws: `CompileError` refusals before anything is written, then `BundleError` for the
    ///   bundle and the outputs; an artifact is in place only when whole.
    public static func compile(
        bundleURL: URL, request: CompileRequest, progress: (WorkProgress) -> Void = { _ in }
    ) throws -> [CompileResult] {
        let bundle = try openBundle(bundleURL)
        try checkPlatform(bundle: bundleURL, manifest: bundle.manifest, platform: request.platform)
        let subject = try CompileSubject(bundle: bundle)
        _ = try RopeTables.make(bundle.graph)  // refuse an unsupported scaling before writing anything
        let plans = request.devices.map { CompilePlan(subject: subject, device: $0) }
        let destinations = plans.map { artifactURL(name: subject.name, device: $0.device, in: request.outputDirectory) }
        let present = destinations.map { FileManager.default.fileExists(atPath: $0.path) }
        for (destination, isPresent) in zip(destinations, present) where isPresent {
            try refuseOtherPlatform(destination, platform: request.platform)
        }
        if !request.overwrite, present.contains(true) {
            let output = request.outputDirectory.physicallyStandardized.path
            let version = request.minimumDeploymentVersion
            // An artifact records the CRC-32 of the bundle manifest it was compiled from.
            let bundleCRC = BundleWriter.hex(bundle.manifestData.withUnsafeBytes { CRC32.checksum($0) })
            let stale = destinations.indices.filter { index in
                present[index]
                    && (try? CompiledArtifactReader(url: destinations[index], verifyFiles: false))?.manifest.compiled?
                        .portable.manifestCRC32 != bundleCRC
            }
            throw CompileError.artifactsExist(
                paths: destinations.indices.filter { present[$0] }.map { destinations[$0].path },
                bundle: bundleURL.path, platform: request.platform,
                missingDevices: plans.indices.filter { !present[$0] }.map { plans[$0].device.id },
                output: output == bundleURL.physicallyStandardized.deletingLastPathComponent().path ? nil : output,
                deviceTable: request.deviceTable?.physicallyStandardized.path,
                minimumDeploymentVersion: version == .minimum ? nil : version.description,
                fromOtherBundle: stale.map { destinations[$0].path })
        }
        for destination in destinations {  // before the first is written
            try ArtifactDirectory.checkDestination(
                destination, overwrite: request.overwrite, marker: BundleWriter.manifestName)
        }
        try checkMemory(
            memoryForecast(manifestBytes: bundle.manifestData.count, devices: plans.count), name: subject.name,
            devices: plans.count, available: request.availableMemory)
        // Besides weights and tables, each artifact copies the graph and tokenizer, and its manifest
        // (the bundle's with regions) stays well under twice the bundle's.
        let manifestBytes = bundle.manifestData.count
        try checkDisk(
            plans,
            otherFilesBytes: bundle.manifest.files.filter { $0.path != BundleWriter.weightsName }.map(\.bytes)
                .saturatingSum
                .saturatingAdding(2 * manifestBytes),
            outputDirectory: request.outputDirectory, available: request.availableDiskBytes)
        let totalBytes = plans.reduce(0) { $0 + $1.memory.weightsBytes }
        var bytesBefore = 0
        var results: [CompileResult] = []
        for (index, plan) in plans.enumerated() {
            let stage = "\(plan.device.id) (\(index + 1) of \(plans.count)): weights written"
            let destination = destinations[index]
            let manifest = try CompiledArtifactWriter.write(
                plan, bundle: bundle, destination: destination, request: request
            ) { written in
                progress(WorkProgress(done: bytesBefore + written, total: totalBytes, countsBytes: true, stage: stage))
            }
            bytesBefore += plan.memory.weightsBytes
            results.append(CompileResult(url: destination, manifest: manifest))
        }
        return results
    }
}

extension Compiler {
    /// Refuses to count as done, or to replace, a compiled artifact at `destination` made for
    /// another platform than `platform` (one whose manifest does not read is left to the
    /// usual checks).
    /// - Throws: `CompileError.artifactOfOtherPlatform`.
    public static func refuseOtherPlatform(_ destination: URL, platform: DevicePlatform) throws {
        let manifestURL = destination.appendingPathComponent(BundleWriter.manifestName)
        guard let data = try? Data(contentsOf: manifestURL),
            let found = (try? Manifest.decoded(from: data, path: manifestURL.path))?.compiled?.platform,
            found != platform.rawValue
        else { return }
        throw CompileError.artifactOfOtherPlatform(path: destination.path, found: found, platform: platform)
    }

    /// What compiling a bundle whose manifest holds `manifestBytes` for `devices` devices takes at
    /// its peak beyond what the process holds before it opens the bundle, its threads' stacks
    /// apart: a fixed 64 MiB (the weights file's read buffer and the artifact's write buffers, the
    /// runtime's), 32 MiB for each further device (the write buffers of the next artifact, which
    /// the allocator does not place where the last ones were), and 16 bytes per byte of manifest
    /// (read, decoded, and each artifact's written). Measured under `ulimit -v` (README
    /// "Resource limits"): 63 MiB for a 2 MB bundle on one device, 89 MiB on two, 49 and 78 MiB
    /// for Qwen2.5-1.5B's, 224 MiB for a bundle of 18,000 tensors (a 13 MB manifest).
    public static func memoryForecast(manifestBytes: Int, devices: Int) -> Int {
        [
            64 << 20, [max(0, devices - 1), 32 << 20].saturatingProduct,
            [manifestBytes, 16].saturatingProduct,
        ].saturatingSum
    }

    /// Refuses to open the bundle at `url` for a compile when `available` is less than the
    /// forecast of one device from the size of its manifest, which is read and decoded first
    /// (a bundle without one is left to ``openBundle(_:)`` to refuse).
    /// - Throws: `ResourceError.notEnoughMemoryFor`.
    public static func checkMemory(beforeOpening url: URL, available: AvailableMemory?) throws {
        var status = stat()
        guard available != nil, stat(url.appendingPathComponent(BundleWriter.manifestName).path, &status) == 0
        else { return }
        try checkMemory(
            memoryForecast(manifestBytes: Int(status.st_size), devices: 1),
            name: url.deletingPathExtension().lastPathComponent, devices: nil, available: available)
    }

    /// Refuses a compile of `devices` devices (nil: not known yet) of the bundle `name` needing
    /// `neededBytes` when `available` is less.
    /// - Throws: `ResourceError.notEnoughMemoryFor`.
    static func checkMemory(_ neededBytes: Int, name: String, devices: Int?, available: AvailableMemory?) throws {
        guard let available, neededBytes > available.bytes else { return }
        throw ResourceError.notEnoughMemoryFor(
            .compile(bundle: name, devices: devices), neededBytes: neededBytes, availableBytes: available.bytes,
            limit: available.limit)
    }

    /// Refuses compiles whose artifacts (each: its weights file and RoPE tables, plus
    /// `otherFilesBytes` for the graph, tokenizer, `static.json` and manifest), with `besides`
    /// (a bundle not yet exported, and its Core ML package), would not fit in `available`.
    /// - Parameter what: what the message says needs the space; by default the compiled
    ///   artifacts, with the bundle when `besides` is not 0.
    /// - Throws: `ResourceError.notEnoughDisk`.
    public static func checkDisk(
        _ plans: [CompilePlan], otherFilesBytes: Int, besides: Int = 0, what: ResourceError.DiskNeed? = nil,
        outputDirectory: URL, available: Int?
    ) throws {
        guard let available else { return }
        let needed = plans.map { [$0.memory.weightsBytes, $0.memory.tablesBytes, otherFilesBytes].saturatingSum }
            .saturatingSum.saturatingAdding(besides)
        guard needed <= available else {
            throw ResourceError.notEnoughDisk(
                directory: outputDirectory.physicallyStandardized.path, neededBytes: needed, availableBytes: available,
                what: what ?? (besides > 0 ? .bundleAndCompiledArtifacts : .compiledArtifacts))
        }
    }
}

/// Writes one `.aimodelc` (docs/FORMAT.md): `weights.bin` region by region, the static tables,
/// `static.json`, the bundle's graph and tokenizer files, and last the manifest.
enum CompiledArtifactWriter {
    /// - Parameter written: told the bytes of `weights.bin` written, before the first region and after each.
    static func write(
        _ plan: CompilePlan, bundle: BundleReader, destination: URL, request: CompileRequest,
        written: (Int) -> Void = { _ in }
    ) throws -> Manifest {
        let directory = try ArtifactDirectory(
            destination: destination, overwrite: request.overwrite, marker: BundleWriter.manifestName,
            faults: request.faults)
        var files: [Manifest.File] = []
        func record(_ path: String, _ file: OutputFile) {
            files.append(Manifest.File(path: path, bytes: file.size, crc32: BundleWriter.hex(file.crc.value)))
        }

        // weights.bin: header, then each region's parts, copied from the bundle's weights file,
        // which is read once front to back and checked against its size and CRC-32 in the
        // manifest the compile read (`finish`), before the artifact is published.
        guard let sourceRecord = bundle.manifest.files.first(where: { $0.path == BundleWriter.weightsName }) else {
            throw BundleError.notABundle(
                path: bundle.url.path, reason: "the manifest lists no \(BundleWriter.weightsName)")
        }
        let source = try Compiler.whenReplaced(bundle, file: BundleWriter.weightsName) {
            try SequentialSource(url: bundle.url.appendingPathComponent(BundleWriter.weightsName))
        }
        let weights = try directory.createFile(Compiler.weightsName, bypassPageCache: true)
        try weights.write(plan.header())
        written(0)
        for region in plan.regions {
            try weights.pad(toMultipleOf: plan.device.pageSize)
            guard weights.size == region.offset else {
                throw BundleError.invalidTensor(
                    tensor: region.placements.first?.name ?? "",
                    reason: "region \(region.index) starts at \(weights.size), planned \(region.offset)")
            }
            for placement in region.placements {
                for (part, sourcePart) in zip(placement.parts, placement.sourceParts) {
                    try weights.pad(toMultipleOf: CompilePlan.partAlignment)
                    guard weights.size == part.offset else {
                        throw BundleError.invalidTensor(
                            tensor: placement.name, reason: "\(part.kind) at \(weights.size), planned \(part.offset)")
                    }
                    try Compiler.whenReplaced(bundle, file: BundleWriter.weightsName) {
                        try source.copy(offset: sourcePart.offset, count: sourcePart.bytes, to: weights)
                    }
                }
            }
            written(weights.size)
        }
        try weights.pad(toMultipleOf: plan.device.pageSize)
        written(weights.size)
        try Compiler.whenReplaced(bundle, file: BundleWriter.weightsName) { try source.finish(expected: sourceRecord) }
        try weights.finish()
        record(Compiler.weightsName, weights)

        // Static tables.
        let graph = bundle.graph
        let rope = try RopeTables.make(graph)
        for (name, table) in [(StaticDescription.ropeCosName, rope.cos), (StaticDescription.ropeSinName, rope.sin)] {
            let file = try directory.createFile(name)
            try table.withUnsafeBytes { try file.write($0) }
            try file.finish()
            record(name, file)
        }
        let staticFile = try directory.createFile(StaticDescription.fileName)
        try staticFile.write(try CanonicalJSON.encode(StaticDescription(plan: plan)))
        try staticFile.finish()
        record(StaticDescription.fileName, staticFile)

        // The graph and tokenizer files, byte for byte, each checked against the manifest the compile
        // read: a bundle replaced since it was opened (an export with --overwrite) fails the compile
        // rather than mixing its files into this artifact.
        for file in bundle.manifest.files where file.path != BundleWriter.weightsName {
            let bytes = try Compiler.readUnchanged(file, of: bundle)
            let copy = try directory.createFile(file.path)
            try copy.write(bytes)
            try copy.finish()
            record(file.path, copy)
        }

        // The manifest as the compile read it, not as it may be at the bundle's path by now.
        let manifestBytes = bundle.manifestData
        let manifest = compiledManifest(
            plan, bundle: bundle.manifest, files: files.sorted { $0.path < $1.path },
            portable: Manifest.Portable(
                name: CompiledArtifactWriter.portableName(of: bundle.manifest),
                bytes: bundle.manifest.sizes.bundleBytes ?? 0,
                manifestCRC32: BundleWriter.hex(manifestBytes.withUnsafeBytes { CRC32.checksum($0) }),
                toolVersion: bundle.manifest.tool.version),
            minimumDeploymentVersion: request.minimumDeploymentVersion)
        let manifestFile = try directory.createFile(BundleWriter.manifestName)
        try manifestFile.write(try manifest.canonicalJSON())
        try manifestFile.finish()
        try directory.publish()
        return manifest
    }

    /// The name of the bundle `manifest` describes as its export wrote it, `<model.name>.aimodel`,
    /// which a compiled artifact records (`compiled.portable.name`): not the name of the folder it
    /// was compiled from (a link, a renamed copy), which its build key does not cover.
    static func portableName(of manifest: Manifest) -> String { manifest.model.name + ".aimodel" }

    /// The bundle's manifest turned into the artifact's: kind, parts, files, sizes, `compiled`.
    static func compiledManifest(
        _ plan: CompilePlan, bundle: Manifest, files: [Manifest.File], portable: Manifest.Portable,
        minimumDeploymentVersion: DeploymentVersion
    ) -> Manifest {
        var manifest = bundle
        manifest.kind = "compiled"
        // The compiler wrote it; its bundle's version is `compiled.portable.tool_version`.
        manifest.tool.version = ToolVersion.current
        var placed = Set<Int>()
        for region in plan.regions {
            for placement in region.placements where placed.insert(placement.tensorIndex).inserted {
                manifest.tensors[placement.tensorIndex].parts = placement.parts.map {
                    Manifest.Part(
                        kind: $0.kind, dtype: $0.dtype, file: Compiler.weightsName, offset: $0.offset, bytes: $0.bytes)
                }
            }
        }
        manifest.files = files
        let bytes = files.reduce(0) { $0 + $1.bytes }
        manifest.sizes.bundleBytes = bytes
        let verdict = plan.verdict
        // As a plan warns of its verdicts, then each region over budget with its footprint.
        if let warning = verdict.memoryWarning { manifest.warnings.append(warning) }
        for region in plan.regionsOverBudget {
            manifest.warnings.append(
                "\(plan.device.id) (\(plan.device.platform.rawValue)): region \(region.index) (\(region.label)) needs "
                    + "\(region.footprintBytes) bytes, over the Neural Engine budget of \(region.budgetBytes); it will run "
                    + "on a slower compute unit")
        }
        manifest.verdicts = []
        manifest.buildKey = bundle.buildKey.map {
            BuildKey.compiled(
                bundleKey: $0, device: plan.device, minimumDeploymentVersion: minimumDeploymentVersion.description)
        }
        manifest.compiled = Manifest.Compiled(
            architecture: plan.device.id, platform: plan.device.platform.rawValue, chip: plan.device.chip,
            products: plan.device.products, minDeploymentVersion: minimumDeploymentVersion.description,
            pageSize: plan.device.pageSize,
            regions: plan.regions.map { region in
                Manifest.Region(
                    index: region.index, kind: region.kind.rawValue, firstLayer: region.layers?.lowerBound,
                    lastLayer: region.layers?.upperBound, offset: region.offset, bytes: region.bytes,
                    storedBytes: region.storedBytes, kvCacheBytes: region.kvCacheBytes,
                    workingBytes: region.workingBytes,
                    footprintBytes: region.footprintBytes, budgetBytes: region.budgetBytes,
                    withinBudget: region.withinBudget,
                    tensors: region.placements.map { placement in
                        Manifest.RegionTensor(
                            name: placement.name,
                            parts: placement.parts.map {
                                Manifest.Part(
                                    kind: $0.kind, dtype: $0.dtype, file: Compiler.weightsName, offset: $0.offset,
                                    bytes: $0.bytes)
                            })
                    })
            },
            memory: Manifest.CompiledMemory(
                weightsBytes: plan.memory.weightsBytes, kvCacheBytes: plan.memory.kvCacheBytes,
                workingBytes: plan.memory.workingBytes, tablesBytes: plan.memory.tablesBytes,
                totalBytes: plan.memory.totalBytes, peakRegion: plan.memory.peakRegion),
            verdict: verdict, portable: portable, sizeDeltaBytes: bytes - portable.bytes)
        return manifest
    }

    static func readWhole(_ url: URL) throws -> [UInt8] {
        do { return [UInt8](try Data(contentsOf: url)) } catch {
            throw BundleError.readFailed(path: url.path, reason: fileSystemFailureReason(error))
        }
    }
}

/// Reads a file front to back in large chunks and serves copies of spans at increasing offsets
/// from the chunk in hand; a span behind the current chunk (a tied head's copy of the embedding)
/// is read again with `pread`. Every byte of the file is checksummed exactly once: each copied
/// span's CRC-32 is computed as it is copied, given to the output (which then need not read it
/// again) and folded into the file's CRC-32 with the gaps between spans.
final class SequentialSource {
    private let path: String
    private let descriptor: Int32
    private let chunkBytes = 8 << 20
    private var chunk: [UInt8]
    private var chunkStart = 0
    private var chunkCount = 0
    /// CRC-32 of the file's first `checksummed` bytes.
    private var crc = CRC32()
    private var checksummed = 0
    /// CRC-32 of each span copied, by (offset, count), for spans copied again.
    private var spanChecksums: [Int: (count: Int, crc: UInt32)] = [:]

    init(url: URL) throws {
        path = url.path
        descriptor = open(url.path, O_RDONLY)
        guard descriptor >= 0 else { throw BundleError.fileMismatch(path: url.lastPathComponent, reason: "missing") }
        chunk = [UInt8](repeating: 0, count: chunkBytes)
    }

    deinit { _ = close(descriptor) }

    /// Reads the next chunk; false at the end of the file.
    private func advance() throws -> Bool {
        chunkStart += chunkCount
        chunkCount = 0
        let count = chunkBytes
        while chunkCount < count {
            let got = chunk.withUnsafeMutableBytes { raw -> Int in
                guard let base = raw.baseAddress else { return 0 }
                return read(descriptor, base + chunkCount, count - chunkCount)
            }
            if got < 0 {
                if errno == EINTR { continue }
                throw BundleError.readFailed(path: path, reason: String(cString: strerror(errno)))
            }
            if got == 0 { break }
            chunkCount += got
        }
        return chunkCount > 0
    }

    /// Calls `body` with the file's bytes in `[offset, end)`, slice by slice, reading ahead as needed.
    private func walk(from offset: Int, to end: Int, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        var position = offset
        while position < end {
            while position >= chunkStart + chunkCount {
                guard try advance() else {
                    throw BundleError.readFailed(path: path, reason: "short read at offset \(position)")
                }
            }
            let from = position - chunkStart
            let take = min(end - position, chunkCount - from)
            try chunk.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[from..<(from + take)])) }
            position += take
        }
    }

    /// Folds the gap before `offset` into the file's checksum.
    private func checksumGap(upTo offset: Int) throws {
        guard offset > checksummed else { return }
        try walk(from: checksummed, to: offset) { crc.update($0) }
        checksummed = offset
    }

    /// Writes `count` bytes at `offset` of the file to `output`.
    func copy(offset: Int, count: Int, to output: OutputFile) throws {
        if offset < checksummed {
            try copyBehind(offset: offset, count: count, to: output)
            return
        }
        try checksumGap(upTo: offset)
        var span = CRC32()
        try walk(from: offset, to: offset + count) { slice in
            let sliceCRC = CRC32.checksum(slice)
            span.append(checksum: sliceCRC, length: slice.count)
            try output.write(slice, checksum: sliceCRC)
        }
        crc.append(checksum: span.value, length: count)
        checksummed = offset + count
        spanChecksums[offset] = (count, span.value)
    }

    private func copyBehind(offset: Int, count: Int, to output: OutputFile) throws {
        var buffer = [UInt8](repeating: 0, count: min(count, chunkBytes))
        var span = CRC32()
        var position = offset
        while position < offset + count {
            let want = min(buffer.count, offset + count - position)
            let got = buffer.withUnsafeMutableBytes { raw -> Int in
                guard let base = raw.baseAddress else { return 0 }
                return pread(descriptor, base, want, off_t(position))
            }
            if got < 0, errno == EINTR { continue }
            guard got > 0 else {
                throw BundleError.readFailed(
                    path: path, reason: got < 0 ? String(cString: strerror(errno)) : "short read at offset \(position)")
            }
            try buffer.withUnsafeBytes { raw in
                let slice = UnsafeRawBufferPointer(rebasing: raw[0..<got])
                let sliceCRC = CRC32.checksum(slice)
                span.append(checksum: sliceCRC, length: got)
                try output.write(slice, checksum: sliceCRC)
            }
            position += got
        }
        // A span read again must be what it was on the first pass (the artifact is not published otherwise).
        if let first = spanChecksums[offset], first.count == count, first.crc != span.value {
            throw BundleError.fileMismatch(
                path: (path as NSString).lastPathComponent, reason: "changed while it was being read")
        }
    }

    /// Reads the rest and compares size and CRC-32 with the bundle's manifest.
    /// - Throws: `BundleError.fileMismatch` naming the file.
    func finish(expected: Manifest.File) throws {
        try checksumGap(upTo: chunkStart + chunkCount)
        while try advance() { try checksumGap(upTo: chunkStart + chunkCount) }
        let size = checksummed
        guard size == expected.bytes else {
            throw BundleError.fileMismatch(
                path: expected.path, reason: "size is \(size) bytes, the manifest says \(expected.bytes)")
        }
        let actual = BundleWriter.hex(crc.value)
        guard actual == expected.crc32 else {
            throw BundleError.fileMismatch(
                path: expected.path, reason: "CRC-32 is \(actual), the manifest says \(expected.crc32)")
        }
    }
}

/// The artifacts beside a bundle that were made from another bundle than it (an export
/// replaced it since): the compiled artifacts and Core ML package of the bundle's name that
/// record another manifest's CRC-32 than the bundle's. What cannot be read is left to `verify`.
public struct StaleSiblings: Sendable {
    /// The stale compiled artifacts' device architectures, platforms and minimum deployment
    /// versions, by name.
    public var compiled: [(architecture: String, platform: String, minimumDeploymentVersion: String)] = []
    /// The Core ML package, when stale.
    public var package: URL?

    /// Whether nothing beside the bundle is stale.
    public var isEmpty: Bool { compiled.isEmpty && package == nil }

    /// The stale siblings of the bundle at `bundleURL`, named `name` (`<name>.<arch>.aimodelc`).
    public init(ofBundle bundleURL: URL, name: String) {
        guard let data = try? BundleReader.readDocument(bundleURL.appendingPathComponent(BundleWriter.manifestName))
        else { return }
        let bundleCRC = BundleWriter.hex(data.withUnsafeBytes { CRC32.checksum($0) })
        let folder = bundleURL.deletingLastPathComponent()
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        for entry in entries.sorted(by: FileSystemName.byteOrder)
        where entry.hasPrefix(name + ".") && entry.hasSuffix("." + Compiler.artifactExtension) {
            guard
                let compiled =
                    (try? CompiledArtifactReader(
                        url: folder.appendingPathComponent(entry), verifyFiles: false))?.manifest.compiled,
                compiled.portable.manifestCRC32 != bundleCRC
            else { continue }
            self.compiled.append((compiled.architecture, compiled.platform, compiled.minDeploymentVersion))
        }
        let package = MLPackageWriter.defaultDestination(forBundle: bundleURL)
        if let source = (try? MLPackageVerifier.readManifest(package: package))?.sourceBundle,
            source.manifestCRC32 != bundleCRC
        {
            self.package = package
        }
    }
}
