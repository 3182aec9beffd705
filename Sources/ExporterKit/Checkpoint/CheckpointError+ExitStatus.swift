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
