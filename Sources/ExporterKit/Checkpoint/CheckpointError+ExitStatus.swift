import Foundation

extension CheckpointError: ExporterError {
    /// Missing files and weights are "not found"; failed I/O, and a file that is not one (a folder,
    /// a FIFO: any input's, as for the files options name), are I/O failures; the rest is bad input.
    public var exitStatus: ExitStatus {
        switch self {
        case .cannotOpen, .noWeights, .missingShard, .repositoryNotCached, .snapshotMissing, .tensorNotFound:
            return .notFound
        case .readFailed, .writeFailed, .notARegularFile:
            return .ioFailure
        default:
            return .badInput
        }
    }
}

extension CheckpointError {
    /// A weights file that is not there (a shard the index names, a link to nothing), rather
    /// than one there but unreadable or malformed.
    var isMissingFile: Bool {
        switch self {
        case .missingShard: return true
        case .cannotOpen(let path, _): return !FileManager.default.fileExists(atPath: path)
        default: return false
        }
    }
}
