import Foundation

/// The weights of a checkpoint folder, single-file or sharded, seen as one name → tensor map.
///
/// A folder is read, in this order of preference (the order `transformers` uses):
/// 1. `model.safetensors`;
/// 2. `model.safetensors.index.json`, whose `weight_map` maps every tensor to its shard — the
///    index and the shards must agree exactly (no tensor missing from its shard, none in a
///    shard without being mapped to it);
/// 3. otherwise every `*.safetensors` file in the folder, merged (a name in two files is an error).
///
/// Every weight file must resolve, symbolic links followed, inside `containmentRoot`: the
/// checkpoint folder itself, or for a Hugging Face cache snapshot the repository's cache
/// folder (`models--Org--Name`), whose snapshots link into its `blobs/`.
///
/// Single-file and sharded checkpoints of the same tensors read identically.
public final class CheckpointWeights: Sendable {
    /// The name of a single-file checkpoint's weights.
    public static let singleFileName = "model.safetensors"
    /// The name of a sharded checkpoint's index.
    public static let indexFileName = "model.safetensors.index.json"

    /// The checkpoint folder.
    public let directory: URL
    /// The index file, when the checkpoint is read through one.
    public let indexURL: URL?
    /// `metadata.total_size` from the index, when given (not checked: tools disagree on it).
    public let declaredTotalSize: Int?
    /// The weight files, ordered by file name.
    public let files: [SafetensorsFile]
    /// Every tensor name, in ascending order.
    public let tensorNames: [String]
    /// Every tensor, by name.
    public let tensors: [String: TensorDescriptor]

    private let fileByTensor: [String: SafetensorsFile]

    /// Opens the checkpoint in `directory`.
    /// - Parameter containmentRoot: the folder every weight file must resolve into; defaults
    ///   to `directory`, or, for a Hugging Face cache snapshot, its repository folder
    ///   (``HuggingFaceCache/repositoryFolder(ofSnapshot:)``).
    /// - Throws: `CheckpointError` for a missing or malformed index, a shard name or link
    ///   leaving the allowed folder, a missing shard, index/shard disagreement, a tensor in two
    ///   files, or any error of `SafetensorsFile.init(url:)`.
    public init(directory: URL, containmentRoot: URL? = nil) throws {
        let directoryPath = directory.path
        let root = containmentRoot ?? HuggingFaceCache.repositoryFolder(ofSnapshot: directory) ?? directory
        guard let containment = Containment(root: root) else {
            throw CheckpointError.cannotOpen(path: root.path, reason: "no such directory")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directoryPath, isDirectory: &isDirectory), isDirectory.boolValue
        else { throw CheckpointError.cannotOpen(path: directoryPath, reason: "no such directory") }

        func openContained(_ url: URL) throws -> SafetensorsFile {
            try containment.check(url.path)
            return try SafetensorsFile(url: url)
        }

        let singleURL = directory.appendingPathComponent(CheckpointWeights.singleFileName)
        let indexURL = directory.appendingPathComponent(CheckpointWeights.indexFileName)
        var files: [SafetensorsFile] = []
        var fileByTensor: [String: SafetensorsFile] = [:]
        var declaredTotalSize: Int?
        var usedIndex: URL?

        if CheckpointWeights.entryExists(singleURL) {
            let file = try openContained(singleURL)
            files = [file]
            for name in file.tensorNames { fileByTensor[name] = file }
        } else if CheckpointWeights.entryExists(indexURL) {
            let index = try CheckpointWeights.readIndex(indexURL, containment: containment)
            declaredTotalSize = index.totalSize
            usedIndex = indexURL
            if let (first, second) = FileSystemName.equivalentPair(
                index.weightMap.values.sorted(by: FileSystemName.byteOrder))
            {
                throw CheckpointError.invalidIndex(
                    path: indexURL.path, reason: CheckpointWeights.equivalentNamesReason(first, second))
            }
            var tensorsByShard: [String: [String]] = [:]
            for (tensor, shard) in index.weightMap { tensorsByShard[shard, default: []].append(tensor) }
            // Every shard must exist before any is compared with the index: otherwise a tensor
            // the index maps to a missing shard is reported as unmapped in the shard holding it.
            for shard in tensorsByShard.keys.sorted() {
                let shardURL = directory.appendingPathComponent(shard)
                // A link to nothing is a missing shard too; a link loop is there, refused when opened.
                let leadsNowhere = resolvedRealPath(shardURL.path) == nil && [ENOENT, ENOTDIR].contains(errno)
                guard CheckpointWeights.entryExists(shardURL), !leadsNowhere else {
                    throw CheckpointError.missingShard(
                        indexPath: indexURL.path, shard: shard, tensor: tensorsByShard[shard, default: []].min() ?? "")
                }
            }
            for shard in tensorsByShard.keys.sorted() {
                let tensorsOfShard = tensorsByShard[shard, default: []].sorted()
                let file = try openContained(directory.appendingPathComponent(shard))
                for tensor in tensorsOfShard where file.tensors[tensor] == nil {
                    throw CheckpointError.tensorMissingFromShard(indexPath: indexURL.path, tensor: tensor, shard: shard)
                }
                for tensor in file.tensorNames where index.weightMap[tensor] != shard {
                    throw CheckpointError.tensorNotInIndex(indexPath: indexURL.path, tensor: tensor, shard: shard)
                }
                files.append(file)
                for tensor in tensorsOfShard { fileByTensor[tensor] = file }
            }
        } else {
            let names = ((try? FileManager.default.contentsOfDirectory(atPath: directoryPath)) ?? []).filter {
                $0.hasSuffix(".safetensors") && !$0.hasPrefix(".")
            }
            if let (first, second) = FileSystemName.equivalentPair(names.sorted(by: FileSystemName.byteOrder)) {
                throw CheckpointError.equivalentFileNames(directory: directoryPath, first: first, second: second)
            }
            for name in names.sorted() {
                let file = try openContained(directory.appendingPathComponent(name))
                for tensor in file.tensorNames {
                    if let earlier = fileByTensor[tensor] {
                        throw CheckpointError.duplicateTensor(
                            tensor: tensor, firstPath: earlier.url.path, secondPath: file.url.path)
                    }
                    fileByTensor[tensor] = file
                }
                files.append(file)
            }
            guard !files.isEmpty else { throw CheckpointError.noWeights(directory: directoryPath) }
        }

        self.directory = directory
        self.indexURL = usedIndex
        self.declaredTotalSize = declaredTotalSize
        self.files = files
        self.fileByTensor = fileByTensor
        self.tensorNames = fileByTensor.keys.sorted()
        var tensors: [String: TensorDescriptor] = [:]
        for (name, file) in fileByTensor { tensors[name] = file.tensors[name] }
        self.tensors = tensors
    }

    /// Why two weight files whose names are one text in two Unicode forms are refused.
    static func equivalentNamesReason(_ first: String, _ second: String) -> String {
        "the weight files '\(FileSystemName.shownByScalars(first))' and '\(FileSystemName.shownByScalars(second))' "
            + "have one name in two Unicode forms, which this tool (and a Mac's file system) takes as one file; "
            + "rename one"
    }

    /// Refuses a file of the checkpoint in `directory` (its config, a tokenizer file) that
    /// resolves, symbolic links followed, outside the folder its weights must resolve into
    /// (`directory`, or a Hugging Face cache snapshot's repository folder), as a weight file
    /// would be: its bytes would ship in the artifact. A file that is not there is left to its
    /// reader to report; a symbolic link that leads nowhere is refused (`resolvedExistingPath`).
    /// - Throws: `CheckpointError.fileOutsideCheckpoint`, `.cannotOpen` for a link to nothing,
    ///   `.readFailed` for a link loop.
    public static func checkContained(_ url: URL, checkpoint directory: URL) throws {
        let root = HuggingFaceCache.repositoryFolder(ofSnapshot: directory) ?? directory
        guard entryExists(url), let containment = Containment(root: root) else { return }
        try containment.check(url.path)
    }

    /// The folders a checkpoint's files may resolve into: its root, and for a Hugging Face
    /// cache repository the blobs of its `blobs/` wherever a link put that folder (moved to a
    /// larger disk, as users do): only files directly in it named as the cache names blobs, by
    /// their SHA-256 or git SHA-1 in hexadecimal. A `blobs` link into any other folder (a home's
    /// `.ssh`, `/etc`) must not make its files part of an artifact.
    struct Containment {
        /// The root, resolved: named by a refusal.
        let root: String
        /// The repository's `blobs/`, resolved, when it is outside the root.
        let movedBlobs: String?

        init?(root url: URL) {
            guard let root = resolvedRealPath(url.path) else { return nil }
            self.root = root
            let blobs =
                HuggingFaceCache.repositoryID(ofFolder: url) == nil
                ? nil : resolvedRealPath(url.appendingPathComponent("blobs").path)
            movedBlobs = blobs.flatMap { isPath($0, inside: root) ? nil : $0 }
        }

        /// Refuses `path` when it resolves, symbolic links followed, outside the allowed folders.
        /// - Throws: `CheckpointError.fileOutsideCheckpoint`, `.cannotOpen` for a link to
        ///   nothing, `.readFailed` for a link loop.
        func check(_ path: String) throws {
            let resolved = try resolvedExistingPath(path)
            let file = URL(fileURLWithPath: resolved)
            let inMovedBlobs =
                movedBlobs == file.deletingLastPathComponent().path && Containment.isBlobName(file.lastPathComponent)
            guard isPath(resolved, inside: root) || inMovedBlobs else {
                throw CheckpointError.fileOutsideCheckpoint(path: path, resolvedPath: resolved, root: root)
            }
        }

        /// Whether `name` is a blob's: 40 (git SHA-1) or 64 (SHA-256) lowercase hexadecimal digits.
        static func isBlobName(_ name: String) -> Bool {
            [40, 64].contains(name.utf8.count)
                && name.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
        }
    }

    /// Whether a directory entry exists at `url`, even a dangling symbolic link.
    static func entryExists(_ url: URL) -> Bool {
        (try? FileManager.default.attributesOfItem(atPath: url.path)) != nil
    }

    private static func readIndex(
        _ url: URL, containment: Containment
    ) throws -> (weightMap: [String: String], totalSize: Int?) {
        let path = url.path
        try containment.check(path)
        let file = try ReadOnlyFile(path: path)
        // An index is a few hundred KB even for the largest models; refuse absurd ones up front.
        guard file.byteCount <= SafetensorsFile.maximumHeaderLength else {
            throw CheckpointError.invalidIndex(
                path: path,
                reason: "\(file.byteCount) bytes exceeds the limit of \(SafetensorsFile.maximumHeaderLength)")
        }
        let bytes = try file.bytes(at: 0, count: file.byteCount)
        let json: JSONValue
        do {
            json = try JSONParser.parse(bytes)
        } catch let error as JSONParseError {
            throw CheckpointError.invalidIndex(path: path, reason: "not valid JSON: \(error)")
        }
        guard let object = json.objectValue else {
            throw CheckpointError.invalidIndex(
                path: path, reason: "expected a JSON object, found \(json.typeDescription)")
        }
        var totalSize: Int?
        if let metadata = object["metadata"], !metadata.isNull {
            guard let metadataObject = metadata.objectValue else {
                throw CheckpointError.invalidIndex(
                    path: path, reason: "'metadata' must be an object, found \(metadata.typeDescription)")
            }
            if let total = metadataObject["total_size"] {
                guard let size = total.intValue, size >= 0 else {
                    throw CheckpointError.invalidIndex(
                        path: path, reason: "'metadata.total_size' must be a non-negative integer")
                }
                totalSize = size
            }
        }
        guard let weightMapValue = object["weight_map"] else {
            throw CheckpointError.invalidIndex(path: path, reason: "missing 'weight_map'")
        }
        guard let weightMapObject = weightMapValue.objectValue else {
            throw CheckpointError.invalidIndex(
                path: path, reason: "'weight_map' must be an object, found \(weightMapValue.typeDescription)")
        }
        var weightMap: [String: String] = [:]
        for (tensor, value) in weightMapObject.members {
            guard let shard = value.stringValue else {
                throw CheckpointError.invalidIndex(
                    path: path,
                    reason: "'weight_map' value of tensor '\(tensor)' must be a string, found \(value.typeDescription)")
            }
            guard isPlainRelativePath(shard) else {
                throw CheckpointError.unsafeShardName(indexPath: path, shard: shard, tensor: tensor)
            }
            weightMap[tensor] = shard
        }
        guard !weightMap.isEmpty else {
            throw CheckpointError.invalidIndex(path: path, reason: "'weight_map' is empty")
        }
        return (weightMap, totalSize)
    }

    /// A shard name must stay below the folder before any link is followed: relative, no `..`,
    /// no empty or `.` components, no NUL. Links are then checked on the resolved path.
    private static func isPlainRelativePath(_ name: String) -> Bool {
        guard !name.isEmpty, !name.hasPrefix("/"), !name.contains("\0"), !name.contains("\\") else { return false }
        return name.split(separator: "/", omittingEmptySubsequences: false).allSatisfy {
            !$0.isEmpty && $0 != "." && $0 != ".."
        }
    }
}

// MARK: Reading

extension CheckpointWeights {
    /// The tensor called `name`.
    /// - Throws: `CheckpointError.tensorNotFound` naming the checkpoint folder.
    public func tensor(named name: String) throws -> TensorDescriptor {
        guard let tensor = tensors[name] else {
            throw CheckpointError.tensorNotFound(path: directory.path, tensor: name)
        }
        return tensor
    }

    /// The file holding `name`.
    /// - Throws: `CheckpointError.tensorNotFound` naming the checkpoint folder.
    public func file(holding name: String) throws -> SafetensorsFile {
        guard let file = fileByTensor[name] else {
            throw CheckpointError.tensorNotFound(path: directory.path, tensor: name)
        }
        return file
    }

    /// Each weight file's size in bytes, by file name.
    public var fileSizes: [String: Int] {
        Dictionary(uniqueKeysWithValues: files.map { ($0.url.lastPathComponent, $0.byteCount) })
    }

    /// Each weight file's `__metadata__`, by file name.
    public var fileMetadata: [String: [String: String]] {
        Dictionary(uniqueKeysWithValues: files.map { ($0.url.lastPathComponent, $0.metadata) })
    }

    /// Starts reading the tensor's bytes into the system's cache (a hint; unknown names are ignored).
    public func willRead(_ name: String) {
        (try? file(holding: name))?.willRead(name)
    }

    /// Copies the tensor's stored bytes from `byteOffset` on into `destination`.
    /// - Throws: as `SafetensorsFile.readRawBytes(of:byteOffset:into:)`.
    public func readRawBytes(of name: String, byteOffset: Int = 0, into destination: UnsafeMutableRawBufferPointer)
        throws
    {
        try file(holding: name).readRawBytes(of: name, byteOffset: byteOffset, into: destination)
    }

    /// Reads a range of a float32 tensor's elements as unchecked float16 bit patterns.
    /// - Throws: as `SafetensorsFile.readFloat16Patterns(_:elements:into:)`.
    public func readFloat16Patterns(
        _ name: String, elements: Range<Int>, into destination: UnsafeMutableBufferPointer<UInt16>
    ) throws {
        try file(holding: name).readFloat16Patterns(name, elements: elements, into: destination)
    }

    /// Reads the whole tensor as float16.
    /// - Throws: as `SafetensorsFile.readFloat16(_:into:outOfRange:)`.
    @discardableResult
    public func readFloat16(
        _ name: String, into destination: UnsafeMutableBufferPointer<Float16>, outOfRange: Float16RangePolicy = .refuse
    ) throws -> Float16ReadReport {
        try file(holding: name).readFloat16(name, into: destination, outOfRange: outOfRange)
    }

    /// Reads a range of the tensor's elements as float16.
    /// - Throws: as `SafetensorsFile.readFloat16(_:elements:into:outOfRange:)`.
    @discardableResult
    public func readFloat16(
        _ name: String, elements: Range<Int>, into destination: UnsafeMutableBufferPointer<Float16>,
        outOfRange: Float16RangePolicy = .refuse
    ) throws -> Float16ReadReport {
        try file(holding: name).readFloat16(name, elements: elements, into: destination, outOfRange: outOfRange)
    }

    /// Reads the whole tensor as float32.
    /// - Throws: as `SafetensorsFile.readFloat(_:into:)`.
    public func readFloat(_ name: String, into destination: UnsafeMutableBufferPointer<Float>) throws {
        try file(holding: name).readFloat(name, into: destination)
    }

    /// Reads a range of the tensor's elements as float32.
    /// - Throws: as `SafetensorsFile.readFloat(_:elements:into:)`.
    public func readFloat(_ name: String, elements: Range<Int>, into destination: UnsafeMutableBufferPointer<Float>)
        throws
    {
        try file(holding: name).readFloat(name, elements: elements, into: destination)
    }
}
