import Foundation

/// Why a checkpoint could not be read, converted or written.
///
/// Every case carries the file (or folder) and, where one is involved, the tensor, so a
/// message alone says where to look. Messages are lowercase without a trailing period:
/// the command line prefixes `error: `.
public enum CheckpointError: Error, Equatable, Sendable {
    // MARK: Files

    /// The file could not be opened or inspected (`reason` is the system's).
    case cannotOpen(path: String, reason: String)
    /// The path names a FIFO, a device or a folder where a file is read
    /// (`kind` says which: "a FIFO"); refused before any read could block.
    case notARegularFile(path: String, kind: String)
    /// A read failed or came back short (`reason` says which).
    case readFailed(path: String, reason: String)
    /// A write, sync or rename failed.
    case writeFailed(path: String, reason: String)

    // MARK: Safetensors header

    /// The file is shorter than the 8-byte header length.
    case fileTooShort(path: String, byteCount: Int)
    /// The declared header length runs past the end of the file.
    case headerTruncated(path: String, headerLength: UInt64, bytesAvailable: Int)
    /// The declared header length is larger than any sane header; refused before allocating.
    case headerTooLarge(path: String, headerLength: UInt64, limit: Int)
    /// The header is not valid JSON.
    case headerNotJSON(path: String, reason: String)
    /// The header is JSON but not the expected structure (`reason` says what).
    case invalidHeader(path: String, reason: String)
    /// One tensor's entry is malformed: bad shape, offsets, sizes (`reason` says what).
    case invalidTensorEntry(path: String, tensor: String, reason: String)
    /// A tensor names a dtype the safetensors format does not define.
    case unknownDType(path: String, tensor: String, dtype: String)
    /// Two tensors claim some of the same bytes.
    case overlappingTensors(path: String, first: String, second: String)
    /// Part of the data section belongs to no tensor (a hole or trailing bytes).
    case unclaimedData(path: String, byteRange: Range<Int>)

    // MARK: Reading tensors

    /// The tensor exists but its dtype cannot be read as floating-point weights.
    case unsupportedDType(path: String, tensor: String, dtype: TensorDType)
    /// No tensor of that name in the file or checkpoint.
    case tensorNotFound(path: String, tensor: String)
    /// A read asked for elements past the end of the tensor.
    case elementRangeOutOfBounds(tensor: String, requested: Range<Int>, elementCount: Int)
    /// The caller's buffer does not hold exactly the elements asked for.
    case destinationSizeMismatch(tensor: String, expected: Int, actual: Int)
    /// A read of raw bytes asked for bytes outside the tensor's data.
    case byteRangeOutOfBounds(tensor: String, offset: Int, count: Int, byteCount: Int)

    // MARK: Precision

    /// Values beyond ±65504 met while converting to float16 without clamping allowed, in the
    /// tensor of the file at `path`.
    case float16RangeExceeded(path: String, tensor: String, count: Int, largestMagnitude: Float)
    /// NaN or infinite values in a weight tensor of the file at `path` (always refused).
    case nonFiniteValues(path: String, tensor: String, count: Int)

    // MARK: Checkpoint folders

    /// The folder holds no safetensors weights at all.
    case noWeights(directory: String)
    /// `model.safetensors.index.json` is malformed (`reason` says what).
    case invalidIndex(path: String, reason: String)
    /// An index names a shard by a path that could leave the checkpoint folder.
    case unsafeShardName(indexPath: String, shard: String, tensor: String)
    /// A weight file, once symbolic links are resolved, lies outside the folder it must stay in.
    case fileOutsideCheckpoint(path: String, resolvedPath: String, root: String)
    /// The index names a shard that does not exist.
    case missingShard(indexPath: String, shard: String, tensor: String)
    /// The index maps a tensor to a shard that does not contain it.
    case tensorMissingFromShard(indexPath: String, tensor: String, shard: String)
    /// A shard contains a tensor the index does not map to it.
    case tensorNotInIndex(indexPath: String, tensor: String, shard: String)
    /// The same tensor name appears in two weight files.
    case duplicateTensor(tensor: String, firstPath: String, secondPath: String)
    /// Two weight files of the folder have one name in two Unicode forms (`é` composed and
    /// decomposed): two files to Linux, one to this tool's string comparisons and to a Mac.
    case equivalentFileNames(directory: String, first: String, second: String)

    // MARK: Hugging Face cache

    /// Not of the form `org/model`.
    case invalidRepositoryID(String)
    /// The cache has no folder for the repository.
    case repositoryNotCached(repository: String, path: String)
    /// The revision's ref is missing and the snapshot cannot be chosen unambiguously.
    case revisionNotResolved(repository: String, revision: String, snapshotCount: Int, refPath: String)
    /// A ref holds something that is not a usable revision.
    case invalidRevision(repository: String, revision: String, refPath: String)
    /// The resolved snapshot folder does not exist.
    case snapshotMissing(repository: String, revision: String, path: String)

    // MARK: Writing

    /// The writer was given data for a tensor other than the next one, or after the end.
    case writeOutOfOrder(path: String, expected: String?, received: String)
    /// More bytes than the tensor's declared size.
    case tooMuchData(path: String, tensor: String, expected: Int, received: Int)
    /// `finish()` was called before every tensor had all its bytes.
    case incompleteTensor(path: String, tensor: String, written: Int, expected: Int)
    /// The writer was used after it finished or failed.
    case writerClosed(path: String)
    /// Synthetic checkpoints are written in bf16, f16 or f32 only.
    case unsupportedSyntheticDType(TensorDType)
    /// The shard size limit must be positive.
    case invalidShardSize(Int)
    /// A tokenizer file a bundle would carry that no loader reads: JSON that is not, or holds
    /// no object (`reason`).
    case invalidTokenizerFile(path: String, reason: String)
}

extension CheckpointError: CustomStringConvertible {
    /// The message shown after `error: `.
    public var description: String {
        switch self {
        case .cannotOpen(let path, let reason):
            return "cannot open '\(path)': \(reason)"
        case .notARegularFile(let path, let kind):
            return "cannot read '\(path)': \(kind), not a regular file"
        case .readFailed(let path, let reason):
            return "cannot read '\(path)': \(reason)"
        case .writeFailed(let path, let reason):
            return "cannot write '\(path)': \(reason)"
        case .fileTooShort(let path, let byteCount):
            return "'\(path)' is \(byteCount) bytes, too short for a safetensors file"
        case .headerTruncated(let path, let headerLength, let bytesAvailable):
            return "'\(path)': header length \(headerLength) exceeds the \(bytesAvailable) bytes after it"
        case .headerTooLarge(let path, let headerLength, let limit):
            return "'\(path)': header length \(headerLength) exceeds the limit of \(limit) bytes"
        case .headerNotJSON(let path, let reason):
            return "'\(path)': header is not valid JSON: \(reason)"
        case .invalidHeader(let path, let reason):
            return "'\(path)': invalid header: \(reason)"
        case .invalidTensorEntry(let path, let tensor, let reason):
            return "'\(path)': tensor '\(tensor)': \(reason)"
        case .unknownDType(let path, let tensor, let dtype):
            return "'\(path)': tensor '\(tensor)' has unknown dtype '\(dtype)'"
        case .overlappingTensors(let path, let first, let second):
            return "'\(path)': tensors '\(first)' and '\(second)' have overlapping data ranges"
        case .unclaimedData(let path, let byteRange):
            return "'\(path)': data bytes \(byteRange.lowerBound)..<\(byteRange.upperBound) belong to no tensor"
        case .unsupportedDType(let path, let tensor, let dtype):
            return "'\(path)': tensor '\(tensor)' has unsupported dtype \(dtype) (expected BF16, F16 or F32)"
        case .tensorNotFound(let path, let tensor):
            return "no tensor '\(tensor)' in '\(path)'"
        case .elementRangeOutOfBounds(let tensor, let requested, let elementCount):
            return "tensor '\(tensor)': elements \(requested.lowerBound)..<\(requested.upperBound) "
                + "are outside its \(elementCount) elements"
        case .destinationSizeMismatch(let tensor, let expected, let actual):
            return "tensor '\(tensor)': destination holds \(actual) elements, expected \(expected)"
        case .byteRangeOutOfBounds(let tensor, let offset, let count, let byteCount):
            return "tensor '\(tensor)': \(count) bytes at offset \(offset) are outside its \(byteCount) bytes"
        case .float16RangeExceeded(let path, let tensor, let count, let largestMagnitude):
            let noun = count == 1 ? "value exceeds" : "values exceed"
            return "'\(path)': tensor '\(tensor)': \(count) \(noun) the float16 range of ±65504 (largest magnitude "
                + "\(CheckpointError.exactMagnitude(largestMagnitude))); pass --allow-clamp to clamp them"
        case .nonFiniteValues(let path, let tensor, let count):
            return "'\(path)': tensor '\(tensor)': \(count) \(count == 1 ? "value is" : "values are") NaN or infinite"
        case .equivalentFileNames(let directory, let first, let second):
            return "'\(directory)': \(CheckpointWeights.equivalentNamesReason(first, second))"
        case .noWeights(let directory):
            return "no model.safetensors, model.safetensors.index.json or other *.safetensors file in '\(directory)'"
        case .invalidIndex(let path, let reason):
            return "'\(path)': invalid index: \(reason)"
        case .unsafeShardName(let indexPath, let shard, let tensor):
            return
                "'\(indexPath)': shard '\(shard)' of tensor '\(tensor)' is not a file name inside the checkpoint folder"
        case .fileOutsideCheckpoint(let path, let resolvedPath, let root):
            return "'\(path)' resolves to '\(resolvedPath)', outside '\(root)'"
        case .missingShard(let indexPath, let shard, let tensor):
            return "'\(indexPath)': shard '\(shard)' of tensor '\(tensor)' does not exist"
        case .tensorMissingFromShard(let indexPath, let tensor, let shard):
            return "'\(indexPath)': tensor '\(tensor)' is mapped to '\(shard)', which does not contain it"
        case .tensorNotInIndex(let indexPath, let tensor, let shard):
            return "'\(indexPath)': tensor '\(tensor)' in '\(shard)' is not mapped to that shard"
        case .duplicateTensor(let tensor, let firstPath, let secondPath):
            return "tensor '\(tensor)' appears in both '\(firstPath)' and '\(secondPath)'"
        case .invalidRepositoryID(let repository):
            return "'\(repository)' is not a Hugging Face repository id (expected 'org/model')"
        case .repositoryNotCached(let repository, let path):
            return "'\(repository)' is not in the Hugging Face cache (no '\(path)')"
        case .revisionNotResolved(let repository, let revision, let snapshotCount, let refPath):
            return "'\(repository)': no '\(refPath)' and \(snapshotCount) snapshots, "
                + "cannot tell which one is revision '\(revision)'"
        case .invalidRevision(let repository, let revision, let refPath):
            return "'\(repository)': '\(refPath)' holds an invalid revision '\(revision)'"
        case .snapshotMissing(let repository, let revision, let path):
            return "'\(repository)': revision '\(revision)' has no snapshot folder '\(path)'"
        case .writeOutOfOrder(let path, let expected, let received):
            guard let expected else {
                return "'\(path)': got data for tensor '\(received)' after every tensor was written"
            }
            return "'\(path)': expected data for tensor '\(expected)', got '\(received)'"
        case .tooMuchData(let path, let tensor, let expected, let received):
            return "'\(path)': tensor '\(tensor)' takes \(expected) bytes, got \(received)"
        case .incompleteTensor(let path, let tensor, let written, let expected):
            return "'\(path)': tensor '\(tensor)' has \(written) of its \(expected) bytes"
        case .writerClosed(let path):
            return "'\(path)': the writer is already finished"
        case .unsupportedSyntheticDType(let dtype):
            return "synthetic weights can be BF16, F16 or F32, not \(dtype)"
        case .invalidShardSize(let bytes):
            return "shard size must be positive, got \(bytes)"
        case .invalidTokenizerFile(let path, let reason):
            return "'\(path)': \(reason); no tokenizer library would load it on a device"
        }
    }

    /// The shortest decimal that reads back as `value`, without a trailing `.0` (`65520`,
    /// `65504.004`, `3.4028235e+38`; no locale involved): exact enough to see a value beyond
    /// 65504, which a rounded `6.6e+04` hid.
    static func exactMagnitude(_ value: Float) -> String {
        let text = value.description
        return text.hasSuffix(".0") ? String(text.dropLast(2)) : text
    }
}
