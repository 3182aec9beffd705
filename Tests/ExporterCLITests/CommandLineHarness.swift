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
/// - Parameter currentDirectory: the folder relative paths start from (default: the process's).
func runExporter(
    _ arguments: [String], environment: [String: String] = [:], faults: FaultInjector? = nil, terminal: Bool = false,
    currentDirectory: URL? = nil
) -> CommandLineRun {
    let output = TextSink()
    let error = TextSink()
    var fullEnvironment = ["HOME": "/nonexistent-home", "HF_HOME": "/nonexistent-hf-home"]
    fullEnvironment["EXPORTER_PRESETS"] = Fixtures.presetsDirectory.path
    for (key, value) in environment { fullEnvironment[key] = value }
    var context = CommandContext(
        arguments: arguments, environment: fullEnvironment,
        currentDirectory: URL(
            fileURLWithPath: currentDirectory?.path ?? FileManager.default.currentDirectoryPath, isDirectory: true),
        executable: URL(fileURLWithPath: "/nonexistent/exporter"),
        writeOutput: output.append, writeError: error.append, errorIsTerminal: terminal)
    context.faults = faults
    let status = ExporterCommandLine.run(context)
    return CommandLineRun(status: status, output: output.text, error: error.text)
}

/// The words a POSIX shell reads from a command line the tool suggests: split at spaces, with
/// single-quoted runs taken as they are and a backslash escaping the next character.
func shellWords(_ line: String) -> [String] {
    var words: [String] = []
    var word: String?
    var quoted = false
    var escaped = false
    for character in line {
        if escaped {
            word = (word ?? "") + String(character)
            escaped = false
        } else if quoted {
            if character == "'" { quoted = false } else { word = (word ?? "") + String(character) }
        } else if character == "'" {
            quoted = true
            word = word ?? ""
        } else if character == "\\" {
            escaped = true
        } else if character == " " {
            if let done = word { words.append(done) }
            word = nil
        } else {
            word = (word ?? "") + String(character)
        }
    }
    if let done = word { words.append(done) }
    return words
}
