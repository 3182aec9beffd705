/// A command line the tool cannot accept. The message is lowercase without a trailing
/// period; `CommandInvocation.usageErrorText(for:)` adds `Error: `, the usage line and
/// the pointer to `--help`. The tool exits with `UsageError.exitCode`.
enum UsageError: Error, Equatable, CustomStringConvertible {
    /// An option no one declared, as typed, with the closest declared spelling if any.
    case unknownOption(String, suggestion: String?)
    /// An option given last, or followed by another option, instead of its value.
    case missingValue(option: String)
    /// A flag given a value with `=` (`--overwrite=yes`).
    case unexpectedValue(option: String)
    /// A non-repeating option or flag given a second time.
    case repeatedOption(String)
    /// A value outside the option's choices.
    case invalidChoice(value: String, option: String, choices: [String])
    /// A value of the wrong form; `expected` reads "a positive integer".
    case invalidValue(value: String, option: String, expected: String)
    /// A positional beyond those the command takes.
    case unexpectedArgument(String)
    /// A required positional that is absent, by its name without brackets.
    case missingArgument(String)
    /// A positional given as an empty string, by its name without brackets.
    case emptyArgument(String)
    /// A required option that is absent, as usage shows it (`--out <dir>`).
    case missingOption(String)
    /// A command's own check of its arguments ("--experimental requires --compute-precision").
    case validation(String)

    /// The exit status of the tool for a usage error (`EX_USAGE` in `sysexits.h`).
    static let exitCode: Int32 = 64

    /// The message, without the `Error: ` prefix.
    var description: String {
        switch self {
        case .unknownOption(let option, let suggestion):
            return "unknown option '\(option)'" + (suggestion.map { "; did you mean '\($0)'?" } ?? "")
        case .missingValue(let option):
            return "missing value for '\(option)'"
        case .unexpectedValue(let option):
            return "'\(option)' does not take a value"
        case .repeatedOption(let option):
            return "'\(option)' given more than once"
        case .invalidChoice(let value, let option, let choices):
            return "invalid value '\(value)' for '\(option)'; expected one of: \(choices.joined(separator: ", "))"
        case .invalidValue(let value, let option, let expected):
            return "\(option) expects \(expected), got '\(value)'"
        case .unexpectedArgument(let argument):
            return "unexpected argument '\(argument)'"
        case .missingArgument(let name):
            return "missing argument '<\(name)>'"
        case .emptyArgument(let name):
            return "'<\(name)>' must not be empty"
        case .missingOption(let option):
            return "missing '\(option)'"
        case .validation(let message):
            return message
        }
    }
}
