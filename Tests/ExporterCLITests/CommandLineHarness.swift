import ExporterCLI
import ExporterKit
import Foundation
import TestSupport

/// Runs one command line in-process and captures what it prints.
struct CommandLineRun {
    let status: Int32
    let output: String
    let error: String
}

/// Collects a stream's text.
final class TextSink: @unchecked Sendable {
    private(set) var text = ""
    func append(_ piece: String) { text += piece }
}

/// - Parameter terminal: whether standard error counts as a terminal (progress is drawn).
func runExporter(
    _ arguments: [String], environment: [String: String] = [:], faults: FaultInjector? = nil, terminal: Bool = false
) -> CommandLineRun {
    let output = TextSink()
    let error = TextSink()
    var fullEnvironment = ["HOME": "/nonexistent-home", "HF_HOME": "/nonexistent-hf-home"]
    fullEnvironment["EXPORTER_PRESETS"] = Fixtures.presetsDirectory.path
    for (key, value) in environment { fullEnvironment[key] = value }
    var context = CommandContext(
        arguments: arguments, environment: fullEnvironment,
        currentDirectory: URL(fileURLWithPath: FileManager.default.currentDirectoryPath),
        executable: URL(fileURLWithPath: "/nonexistent/exporter"),
        writeOutput: output.append, writeError: error.append, errorIsTerminal: terminal)
    context.faults = faults
    let status = ExporterCommandLine.run(context)
    return CommandLineRun(status: status, output: output.text, error: error.text)
}
