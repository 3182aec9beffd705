/// A minimum deployment version, `MAJOR.MINOR` (`27.0`).
public struct DeploymentVersion: Comparable, Sendable, CustomStringConvertible {
    /// The first version whose runtime loads compiled artifacts.
    public static let minimum = DeploymentVersion(major: 27, minor: 0)

    /// Major version.
    public let major: Int
    /// Minor version.
    public let minor: Int

    /// A version.
    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }

    /// Parses `27`, `27.0` or `27.1`, and refuses one below `minimum`.
    /// - Throws: `CompileError.invalidDeploymentVersion` or `.deploymentVersionTooLow`.
    public init(parsing text: String) throws {
        let pieces = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...2).contains(pieces.count), pieces.allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isASCII) }),
            let major = Int(pieces[0]), major >= 0, let minor = pieces.count == 2 ? Int(pieces[1]) : 0, minor >= 0
        else { throw CompileError.invalidDeploymentVersion(text) }
        self.init(major: major, minor: minor)
        guard self >= DeploymentVersion.minimum else {
            throw CompileError.deploymentVersionTooLow(given: text, minimum: DeploymentVersion.minimum.description)
        }
    }

    /// `27.0`.
    public var description: String { "\(major).\(minor)" }

    /// Ordered by major, then minor version.
    public static func < (lhs: DeploymentVersion, rhs: DeploymentVersion) -> Bool {
        (lhs.major, lhs.minor) < (rhs.major, rhs.minor)
    }
}
