extension CheckpointError: ExporterError {
    /// Missing files and weights are "not found"; failed I/O is an I/O failure; the rest is bad input.
    public var exitStatus: ExitStatus {
        switch self {
        case .cannotOpen, .noWeights, .missingShard, .repositoryNotCached, .snapshotMissing, .tensorNotFound:
            return .notFound
        case .readFailed, .writeFailed:
            return .ioFailure
        default:
            return .badInput
        }
    }
}
