/// Why a Core ML package could not be written or does not check out.
public enum CoreMLError: ExporterError, Equatable {
    /// The bundle cannot be expressed as a Core ML program.
    case unsupported(reason: String)
    /// A tensor the program needs is missing from the bundle, or stored in a way it cannot use.
    case tensor(name: String, reason: String)
    /// A package file is not as its manifest or the blob storage format says.
    case invalidPackage(path: String, reason: String)
    /// The package does not hold what the bundle holds.
    case bundleMismatch(tensor: String, reason: String)

    /// The message, naming the tensor or the package file at fault.
    public var description: String {
        switch self {
        case .unsupported(let reason):
            return "cannot write an mlpackage: \(reason)"
        case .tensor(let name, let reason):
            return "tensor '\(name)': \(reason)"
        case .invalidPackage(let path, let reason):
            return "'\(path)': \(reason)"
        case .bundleMismatch(let tensor, let reason):
            return "tensor '\(tensor)' differs from the bundle: \(reason)"
        }
    }

    /// `unsupported` (69), `badInput` (65) for a bundle's tensor, `verificationFailed` (1) for a
    /// package that does not match.
    public var exitStatus: ExitStatus {
        switch self {
        case .unsupported: return .unsupported
        case .tensor: return .badInput
        case .invalidPackage, .bundleMismatch: return .verificationFailed
        }
    }
}
