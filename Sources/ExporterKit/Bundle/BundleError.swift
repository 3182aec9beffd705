import Foundation

/// Why a bundle could not be written or read.
public enum BundleError: ExporterError, Equatable {
    /// The artifact exists and `--overwrite` was not given.
    case outputExists(path: String)
    /// Something that is not an artifact of the kind being written is where one would go:
    /// `--overwrite` does not replace it.
    case notReplaceable(path: String, reason: String)
    /// Another entry of the folder is one name with the artifact's where file names ignore
    /// case and Unicode normalization form (macOS): `Tiny.aimodel` beside `TINY.aimodel`.
    case nameClash(path: String, existing: String)
    /// A write, rename or removal failed.
    case writeFailed(path: String, reason: String)
    /// A read failed.
    case readFailed(path: String, reason: String)
    /// Nothing exists at the path given as an artifact.
    case artifactNotFound(path: String)
    /// The artifact is not a bundle this version can read.
    case notABundle(path: String, reason: String)
    /// The graph description decodes but describes what `docs/FORMAT.md` gives no meaning
    /// (``GraphDescription/Rope/problem``).
    case invalidGraph(path: String, reason: String)
    /// A portable bundle was needed; the artifact is of another kind (compiled, plan).
    case notPortable(path: String, kind: String, portable: String?)
    /// The manifest's schema is newer (or other) than this version reads.
    case unsupportedSchema(path: String, found: String, supported: String)
    /// A file does not match what the manifest says of it.
    case fileMismatch(path: String, reason: String)
    /// A tensor's record is inconsistent with the format.
    case invalidTensor(tensor: String, reason: String)
    /// No tensor of that name in the bundle.
    case unknownTensor(String)
    /// The weights source gave something other than the plan expects.
    case sourceMismatch(tensor: String, reason: String)

    /// The message, naming the path or the tensor at fault.
    public var description: String {
        switch self {
        case .outputExists(let path):
            return "'\(path)' already exists; pass --overwrite to replace it"
        case .notReplaceable(let path, let reason):
            return "'\(path)' already exists and is not an artifact to replace (\(reason)); "
                + "--overwrite replaces artifacts only: move or remove it"
        case .nameClash(let path, let existing):
            let names = [path, existing].map { FileSystemName.shownByScalars(($0 as NSString).lastPathComponent) }
            return "cannot write '\(path)': '\(existing)' is there, and '\(names[0])' and '\(names[1])' are one name "
                + "on macOS, whose file names ignore case and Unicode form; move that one away or choose another name"
        case .writeFailed(let path, let reason):
            return "cannot write '\(path)': \(reason)"
        case .readFailed(let path, let reason):
            return "cannot read '\(path)': \(reason)"
        case .artifactNotFound(let path):
            return "no artifact at '\(path)': no such file or folder"
        case .notABundle(let path, let reason):
            return "'\(path)' is not an exporter artifact: \(reason)"
        case .invalidGraph(let path, let reason):
            return "'\(path)': \(reason)"
        case .notPortable(let path, let kind, let portable):
            let what = kind == "compiled" ? "a compiled artifact" : kind == "plan" ? "a plan" : "of kind '\(kind)'"
            return "'\(path)' is \(what), not a portable bundle (.aimodel)"
                + (portable.map { "; use the bundle it was compiled from, '\($0)'" } ?? "")
        case .unsupportedSchema(let path, let found, let supported):
            return "'\(path)' has schema '\(found)'; this version reads '\(supported)'"
        case .fileMismatch(let path, let reason):
            return "'\(path)': \(reason)"
        case .invalidTensor(let tensor, let reason):
            return "tensor '\(tensor)': \(reason)"
        case .unknownTensor(let name):
            return "no tensor '\(name)' in the bundle"
        case .sourceMismatch(let tensor, let reason):
            return "tensor '\(tensor)': \(reason)"
        }
    }

    /// By kind: `outputExists` (73), `ioFailure` (74), `verificationFailed` (1) when the artifact
    /// disagrees with its manifest, `badInput` (65), `usage` (64), `notFound` (66).
    public var exitStatus: ExitStatus {
        switch self {
        case .outputExists, .notReplaceable, .nameClash: return .outputExists
        case .writeFailed, .readFailed: return .ioFailure
        case .fileMismatch, .invalidTensor: return .verificationFailed
        case .notABundle, .invalidGraph, .notPortable, .unsupportedSchema, .sourceMismatch: return .badInput
        case .unknownTensor: return .usage
        case .artifactNotFound: return .notFound
        }
    }
}

extension BundleError {
    /// ``notPortable(path:kind:portable:)`` for the artifact at `path` with `manifest`.
    static func notPortable(path: String, manifest: Manifest) -> BundleError {
        .notPortable(path: path, kind: manifest.kind, portable: manifest.compiled?.portable.name)
    }

    /// Runs `body`, which opens and reads the file at `path` with ``ReadOnlyFile``, reporting
    /// the reader's failures as ``readFailed(path:reason:)`` of that path; other errors pass.
    static func readingFile<Result>(_ path: String, _ body: () throws -> Result) throws -> Result {
        do {
            return try body()
        } catch let error as CheckpointError {
            switch error {
            case .cannotOpen(_, let reason): throw BundleError.readFailed(path: path, reason: reason)
            case .notARegularFile(_, let kind):
                throw BundleError.readFailed(path: path, reason: "\(kind), not a regular file")
            case .readFailed(_, let reason): throw BundleError.readFailed(path: path, reason: reason)
            default: throw BundleError.readFailed(path: path, reason: error.description)
            }
        }
    }
}
