/// How a failed run ends: each failure kind has its own documented exit status
/// (README "Exit codes"), so scripts and build farms can tell them apart.
public enum ExitStatus: Int32, Sendable, CaseIterable {
    /// Everything held.
    case success = 0
    /// A verification or release-gate check found a problem.
    case verificationFailed = 1
    /// The command line is wrong (sysexits `EX_USAGE`).
    case usage = 64
    /// An input is malformed: config, checkpoint, compression config, farm file (`EX_DATAERR`).
    case badInput = 65
    /// An input does not exist: model, weights, file (`EX_NOINPUT`).
    case notFound = 66
    /// The registry refuses the model or the target (`EX_UNAVAILABLE`).
    case unsupported = 69
    /// Not enough memory or disk to do the work safely.
    case resourceLimit = 71
    /// An unexpected failure inside the tool (`EX_SOFTWARE`): a bug to report.
    case internalError = 70
    /// The output exists and `--overwrite` was not given (`EX_CANTCREAT`).
    case outputExists = 73
    /// Reading or writing failed (`EX_IOERR`).
    case ioFailure = 74
}

/// An error the tool reports to its user: a message and an exit status.
///
/// Each library area has its own enum conforming to this; the command line prints
/// `description` after `Error: ` and exits with `exitStatus`.
public protocol ExporterError: Error, CustomStringConvertible {
    /// The exit status a command ends with when this error stops it.
    var exitStatus: ExitStatus { get }
    /// The message as the lines it is printed in: one, `description`, unless the message is
    /// meant to span several. The command line escapes control characters in each line, a
    /// newline too, so a newline taken from an input cannot forge a line.
    var descriptionLines: [String] { get }
}

extension ExporterError {
    /// One line: `description`.
    public var descriptionLines: [String] { [description] }
}
