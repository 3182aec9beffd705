import ExporterKit

/// A file an option names (`--calibration`, `--tokens-file`) that cannot be used: not a
/// usage error, so the message stands alone and the exit status says what went wrong.
enum InputFileError: ExporterError, Equatable {
    /// Nothing at `path`.
    case notFound(option: String, path: String)
    /// Something at `path` that cannot be read as text (`reason` says why).
    case unreadable(option: String, path: String, reason: String)

    var description: String {
        switch self {
        case .notFound(let option, let path):
            return "cannot read \(option) '\(path)': no such file"
        case .unreadable(let option, let path, let reason):
            return "cannot read \(option) '\(path)': \(reason)"
        }
    }

    var exitStatus: ExitStatus {
        switch self {
        case .notFound: return .notFound
        case .unreadable: return .badInput
        }
    }
}
