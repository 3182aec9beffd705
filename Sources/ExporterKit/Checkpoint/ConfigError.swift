/// Why a checkpoint's `config.json` cannot be used.
public enum ConfigError: ExporterError, Equatable {
    /// The file is absent.
    case unreadable(path: String, reason: String)
    /// The file is there but cannot be read (permission denied, an I/O error).
    case readFailed(path: String, reason: String)
    /// The file is not valid JSON (or not UTF-8).
    case invalidJSON(path: String, reason: String)
    /// A required field is absent (or null).
    case missingField(path: String, field: String)
    /// A field has the wrong JSON type.
    case wrongType(path: String, field: String, expected: String, found: String)
    /// A field has a value the tool cannot use.
    case invalidValue(path: String, field: String, reason: String)
    /// Each field is plausible but together they describe a model no machine could hold
    /// (products that would overflow, absurd tensor counts).
    case impossibleModel(path: String, reason: String)
    /// A valid field describes a model the graph format cannot express (attention windows that
    /// differ between layers).
    case unsupportedFeature(path: String, field: String, reason: String)

    /// The message, naming the config file and the field.
    public var description: String {
        switch self {
        case .unreadable(let path, let reason), .readFailed(let path, let reason):
            return "cannot read config '\(path)': \(reason)"
        case .invalidJSON(let path, let reason):
            return "config '\(path)' is not valid JSON: \(reason)"
        case .missingField(let path, let field):
            return "config '\(path)' has no '\(field)'"
        case .wrongType(let path, let field, let expected, let found):
            return "config '\(path)': '\(field)' should be \(expected), found \(found)"
        case .invalidValue(let path, let field, let reason):
            return "config '\(path)': '\(field)' \(reason)"
        case .impossibleModel(let path, let reason):
            return "config '\(path)' describes an impossible model: \(reason)"
        case .unsupportedFeature(let path, let field, let reason):
            return "config '\(path)': '\(field)' \(reason)"
        }
    }

    /// `notFound` (66) for a file not there, `ioFailure` (74) for one that cannot be read,
    /// `badInput` (65) otherwise.
    public var exitStatus: ExitStatus {
        switch self {
        case .unreadable: return .notFound
        case .readFailed: return .ioFailure
        case .unsupportedFeature: return .unsupported
        default: return .badInput
        }
    }
}
