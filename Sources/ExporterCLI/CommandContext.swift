import ExporterKit
import Foundation

/// What a command sees of the world: arguments, environment, folders and output streams.
/// The real process builds one from itself; tests build one that captures the output.
public struct CommandContext {
    /// Arguments after the program name.
    public var arguments: [String]
    /// Environment variables.
    public var environment: [String: String]
    /// The current folder.
    public var currentDirectory: URL
    /// The executable's path (to find `Presets/` beside a build).
    public var executable: URL
    /// Writes to standard output.
    public var writeOutput: (String) -> Void
    /// Writes to standard error.
    public var writeError: (String) -> Void
    /// Whether standard error is a terminal (progress is drawn only then).
    public var errorIsTerminal: Bool
    /// The width of that terminal in columns, when the system says (else `COLUMNS`, else 80).
    public var terminalColumns: () -> Int? = { nil }
    /// Fault injection for the writes of an export (tests only; nil in real runs).
    public var faults: FaultInjector?
    /// Whether SIGINT, SIGTERM and SIGHUP remove the staging folders and temporary files being
    /// filled before the process ends (``InterruptCleanup``): the real process's choice, never
    /// a test runner's.
    public var removesPartialFilesOnSignals = false

    /// A context; every field is explicit so tests control all of them.
    public init(
        arguments: [String], environment: [String: String], currentDirectory: URL, executable: URL,
        writeOutput: @escaping (String) -> Void, writeError: @escaping (String) -> Void, errorIsTerminal: Bool
    ) {
        self.arguments = arguments
        self.environment = environment
        self.currentDirectory = currentDirectory
        self.executable = executable
        self.writeOutput = writeOutput
        self.writeError = writeError
        self.errorIsTerminal = errorIsTerminal
    }

    /// The context of this process.
    public static func process() -> CommandContext {
        var context = CommandContext(
            arguments: Array(CommandLine.arguments.dropFirst()),
            environment: ProcessInfo.processInfo.environment,
            currentDirectory: URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true),
            executable: (Bundle.main.executableURL
                ?? URL(fileURLWithPath: CommandLine.arguments.first ?? "exporter")).physicallyStandardized.absoluteURL,
            writeOutput: StandardStream.output.write, writeError: StandardStream.error.write,
            errorIsTerminal: isatty(2) == 1 && ProcessInfo.processInfo.environment["CI"] == nil)
        context.removesPartialFilesOnSignals = true
        context.terminalColumns = {
            var size = winsize()
            guard ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
            return Int(size.ws_col)
        }
        return context
    }

    /// The terminal's width in columns, asked each time (a window can be resized).
    var columns: Int {
        terminalColumns() ?? Int(environment["COLUMNS"] ?? "").flatMap { $0 > 0 ? $0 : nil } ?? 80
    }

    /// What returns to the start of the line and erases it: without the escape sequence on a
    /// terminal that knows none (`TERM=dumb`), spaces over the width.
    var clearLine: String {
        environment["TERM"] == "dumb" ? "\r" + String(repeating: " ", count: columns - 1) + "\r" : "\r\u{1B}[K"
    }

    /// Prints a line on standard output, its control characters escaped (newlines included:
    /// text from inputs cannot drive the terminal or forge a line).
    func print(_ line: String = "") { writeOutput(Format.escaped(line) + "\n") }

    /// Prints each line on standard output as `print(_:)` does.
    func print(lines: [String]) {
        for line in lines { print(line) }
    }

    /// Prints a line on standard error, its control characters escaped as `print(_:)` does.
    func printError(_ line: String) { writeError(Format.escaped(line) + "\n") }

    /// The file `path` names, a relative one from the current folder, `..` taken as the
    /// kernel takes it (``URL/resolvingFilePath(_:from:)``).
    func fileURL(_ path: String) -> URL { URL.resolvingFilePath(path, from: currentDirectory) }

    /// The shipped presets.
    /// - Throws: `PresetError` when no `Presets/` folder is found.
    func catalog() throws -> PresetCatalog {
        try PresetCatalog(
            directory: PresetCatalog.locateDirectory(
                environment: environment, executable: executable, currentDirectory: currentDirectory))
    }

    /// The checkpoint `--against` names: a folder, else an `org/model` id's snapshot in the local
    /// Hugging Face cache, as the export reads them (a folder that is not there is left for the
    /// reader to refuse).
    func checkpointFolder(_ argument: String) -> URL {
        let folder = fileURL(argument)
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: folder.path, isDirectory: &isDirectory), isDirectory.boolValue {
            return folder
        }
        guard HuggingFaceCache.isRepositoryID(argument),
            let snapshot = try? HuggingFaceCache(environment: environment).snapshot(of: argument)
        else { return folder }
        return snapshot.directory
    }

    /// A model resolver over the presets and the local Hugging Face cache.
    /// - Throws: `PresetError` when no `Presets/` folder is found.
    func resolver() throws -> ModelResolver {
        let cache = HuggingFaceCache(environment: environment)
        return ModelResolver(
            catalog: try catalog(),
            locateInCache: { repoID in (try? cache.snapshot(of: repoID)).map { ($0.directory, $0.revision) } },
            cacheDescription: { repoID in
                ((try? cache.repositoryDirectory(for: repoID)) ?? cache.hubDirectory).path
            },
            cacheMissReason: { cache.missingSnapshotReason(of: $0) },
            cacheUnusableReason: { cache.unusableSnapshotReason(of: $0) })
    }
}
