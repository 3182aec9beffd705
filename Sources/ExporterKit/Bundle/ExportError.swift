/// Why an export cannot start.
public enum ExportError: ExporterError, Equatable {
    /// A preset's weights are not on this machine.
    case noWeights(model: String, repoID: String, lookedIn: String)
    /// A preset's repository is in the Hugging Face cache without a snapshot to read (`reason`).
    case noSnapshot(model: String, repoID: String, reason: String)
    /// A weights file of a snapshot in the Hugging Face cache is missing (`problem`): what an
    /// interrupted download leaves, as the links of shards not yet downloaded are not made.
    case unfinishedDownload(repoID: String, problem: CheckpointError)
    /// `--calibration` with generated weights: there are no activations worth measuring.
    case calibrationNeedsCheckpoint

    /// The message: for missing weights, the ways to proceed, one per line.
    public var description: String {
        switch self {
        case .noWeights(let model, let repoID, let lookedIn):
            return """
                no weights for '\(model)' on this machine (looked in \(lookedIn)); to proceed, either:
                  - download them into the Hugging Face cache: huggingface-cli download \(repoID)
                  - pass a checkpoint folder: exporter /path/to/checkpoint --preset \(model)
                  - see sizes only: exporter plan \(model)
                  - try the pipeline on generated weights: exporter \(model) --synthetic
                """
        case .noSnapshot(let model, let repoID, let reason):
            return "the Hugging Face cache holds \(repoID) for '\(model)', but no snapshot of it to read: \(reason); "
                + "finish its download (huggingface-cli download \(repoID)), or pass the folder of a snapshot to export"
        case .unfinishedDownload(let repoID, let problem):
            return "\(problem); the download of \(repoID) looks unfinished: finish it "
                + "(huggingface-cli download \(repoID))"
        case .calibrationNeedsCheckpoint:
            return "--calibration needs a checkpoint's weights, not --synthetic"
        }
    }

    /// `notFound` (66) for missing weights, `usage` (64) for a flag that cannot apply.
    public var exitStatus: ExitStatus {
        switch self {
        case .noWeights, .noSnapshot, .unfinishedDownload: return .notFound
        case .calibrationNeedsCheckpoint: return .usage
        }
    }
}

extension ExportError {
    /// The refusal of an export of `plan` from a preset whose Hugging Face cache folder has no
    /// snapshot to read; nil for any other source.
    static func noSnapshot(of plan: ExportPlan) -> ExportError? {
        guard case .presetConfigOnly(let repoID, let reason?) = plan.model.source else { return nil }
        return .noSnapshot(model: plan.model.preset?.id ?? plan.model.argument, repoID: repoID, reason: reason)
    }

    /// The lines of the message: `noWeights` lists what to do, one way a line. Its fields come
    /// from the preset catalog (id, repository) and the cache's location, not from a file read.
    public var descriptionLines: [String] {
        description.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    }
}
