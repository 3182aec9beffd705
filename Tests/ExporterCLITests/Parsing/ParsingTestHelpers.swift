@testable import ExporterCLI

/// Thrown by the helpers when a parse asked for help or the version instead of running.
struct DidNotRun: Error {}

/// Resolves and parses `arguments` for `command` and returns the
/// values to run with.
func parsed(_ arguments: [String], for command: CommandSpec = SampleCommands.plan) throws -> ParsedArguments {
    guard case .run(let parsedArguments) = try command.resolve(arguments).parse()
    else {
        throw DidNotRun()
    }
    return parsedArguments
}

/// The usage-error message parsing `arguments` for `command` produces, or `nil` if it parses.
func usageMessage(_ arguments: [String], for command: CommandSpec = SampleCommands.plan) -> String? {
    usageMessage { _ = try command.resolve(arguments).parse() }
}

/// The usage-error message `body` throws, or `nil` if it does not throw.
func usageMessage(_ body: () throws -> Void) -> String? {
    do {
        try body()
        return nil
    } catch let error as UsageError {
        return error.description
    } catch {
        return "not a usage error: \(error)"
    }
}
