import Foundation

/// The built `exporter` binary, run as a child process: what end-to-end tests exercise.
public enum BuiltExporter {
    /// The binary next to the test bundle (`swift build --build-tests` builds it), or in `.build/debug`.
    public static var url: URL {
        let testBinary = URL(fileURLWithPath: CommandLine.arguments.first ?? "").standardizedFileURL
        let candidates = [
            testBinary.deletingLastPathComponent().appendingPathComponent("exporter"),
            // On macOS the tests live in `<folder>/<name>.xctest/Contents/MacOS/`.
            testBinary.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("exporter"),
            Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent("exporter"),
            Fixtures.repositoryRoot.appendingPathComponent(".build/debug/exporter"),
        ]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) } ?? candidates[3]
    }

    /// What a finished child process did.
    public struct Outcome: Sendable {
        /// Exit status (or the signal number when `signaled`).
        public let status: Int32
        /// Whether it ended by a signal rather than an exit.
        public let signaled: Bool
        /// Standard output.
        public let output: String
        /// Standard error.
        public let error: String

        /// Whether the process ended by itself with an exit status (no trap, no signal).
        public var exitedNormally: Bool { !signaled }
    }

    /// Runs the binary (or `executable`, a shell that starts it) with `arguments` and waits for it.
    public static func run(
        _ arguments: [String], environment: [String: String] = [:], directory: URL? = nil, executable: URL? = nil
    ) throws -> Outcome {
        let process = try start(arguments, environment: environment, directory: directory, executable: executable)
        return process.finish()
    }

    /// A running child with its captured streams.
    public final class Running: @unchecked Sendable {
        /// The process.
        public let process: Process
        private let outputPipe: Pipe
        private let errorPipe: Pipe

        init(process: Process, outputPipe: Pipe, errorPipe: Pipe) {
            self.process = process
            self.outputPipe = outputPipe
            self.errorPipe = errorPipe
        }

        /// Waits for the end and collects the output.
        public func finish() -> Outcome {
            // Standard error is drained on its own thread while standard output is read: a child
            // that fills one pipe while the other is read would otherwise wait forever (a pipe
            // holds 64 KiB on Linux, as little as 16 KiB on macOS).
            let errorHandle = errorPipe.fileHandleForReading
            let errorData = Locked(Data())
            let drained = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                let data = errorHandle.readDataToEndOfFile()
                errorData.mutate { $0 = data }
                drained.signal()
            }
            let output = outputPipe.fileHandleForReading.readDataToEndOfFile()
            drained.wait()
            let error = errorData.value
            process.waitUntilExit()
            return Outcome(
                status: process.terminationStatus, signaled: process.terminationReason == .uncaughtSignal,
                output: String(decoding: output, as: UTF8.self), error: String(decoding: error, as: UTF8.self))
        }
    }

    /// The environment children start in: no real Hugging Face cache, the repository's presets,
    /// no terminal, and this process's sanitizer options (`make sanitize`): the children are
    /// built with the suite's sanitizer and run with its settings and suppressions.
    public static var cleanEnvironment: [String: String] {
        let inherited = ProcessInfo.processInfo.environment
        var environment = [
            "HOME": "/nonexistent-home", "HF_HOME": "/nonexistent-hf-home", "CI": "1",
            "PATH": inherited["PATH"] ?? "/usr/bin:/bin",
            "EXPORTER_PRESETS": Fixtures.presetsDirectory.path,
        ]
        for key in ["ASAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS", "UBSAN_OPTIONS"] {
            environment[key] = inherited[key]
        }
        return environment
    }

    /// Starts the binary with `arguments` without waiting, in a clean environment (no real
    /// Hugging Face cache, the repository's presets, no terminal) plus `environment`.
    public static func start(
        _ arguments: [String], environment: [String: String] = [:], directory: URL? = nil, executable: URL? = nil
    ) throws -> Running {
        let process = Process()
        process.executableURL = executable ?? url
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        var full = cleanEnvironment
        for (key, value) in environment { full[key] = value }
        process.environment = full
        if let directory { process.currentDirectoryURL = directory }
        let outputPipe = Pipe()
        let errorPipe = Pipe()
        process.standardOutput = outputPipe
        process.standardError = errorPipe
        try process.run()
        return Running(process: process, outputPipe: outputPipe, errorPipe: errorPipe)
    }
}
