import Foundation
import ExporterKit

/// Entry point of the command-line tool: parse, run, print errors, return the exit status.
public enum ExporterCommandLine {
    /// Runs the tool with the process's arguments and exits with its status.
    public static func main() -> Never {
        exit(run(CommandContext.process()))
    }

    /// Runs one command line in `context` and returns its exit status.
    public static func run(_ context: CommandContext) -> Int32 {
        let invocation = ExportCommand.spec.resolve(context.arguments)
        do {
            switch try invocation.parse() {
            case .showHelp:
                context.print(invocation.helpText)
                return ExitStatus.success.rawValue
            case .showVersion(let version):
                context.print(version)
                return ExitStatus.success.rawValue
            case .run(let arguments):
                let status: ExitStatus
                switch invocation.command.name {
                case PlanCommand.spec.name: status = try PlanCommand.run(arguments, context: context)
                case ListCommand.spec.name: status = try ListCommand.run(arguments, context: context)
                case SynthCommand.spec.name: status = try SynthCommand.run(arguments, context: context)
                default: status = try ExportCommand.run(arguments, context: context)
                }
                return status.rawValue
            }
        } catch let error as UsageError {
            context.printError(invocation.usageErrorText(for: error))
            return UsageError.exitCode
        } catch let error as ExporterError {
            context.printError("Error: \(TerminalText.sanitized(error.description))")
            return error.exitStatus.rawValue
        } catch {
            context.printError("Error: \(TerminalText.sanitized("\(error)"))")
            return ExitStatus.internalError.rawValue
        }
    }
}
