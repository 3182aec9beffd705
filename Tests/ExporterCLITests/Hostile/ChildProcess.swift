import Foundation
import TestSupport

/// What the built `exporter` binary did when run as a child process.
struct ChildRun {
    /// The exit status (or the signal number when `reason` is `.uncaughtSignal`).
    let status: Int32
    /// How it ended: `.exit`, or `.uncaughtSignal` for a trap, a crash or a kill.
    let reason: Process.TerminationReason
    /// Standard output.
    let output: String
    /// Standard error.
    let error: String

    /// Whether the process ended by itself with an exit status (no trap, no signal).
    var exitedNormally: Bool { reason == .exit }
}

enum ChildProcess {
    /// The built `exporter` binary: beside the test bundle (`swift build --build-tests` builds
    /// both into the same folder), else in the repository's `.build/debug`.
    static let executable: URL? = {
        var candidates: [URL] = []
        if let first = CommandLine.arguments.first {
            let testBinary = URL(fileURLWithPath: first).standardizedFileURL
            candidates.append(testBinary.deletingLastPathComponent().appendingPathComponent("exporter"))
            // On macOS the tests live in `<folder>/<name>.xctest/Contents/MacOS/`.
            candidates.append(
                testBinary.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                    .deletingLastPathComponent().appendingPathComponent("exporter"))
        }
        candidates.append(Bundle.main.bundleURL.appendingPathComponent("exporter"))
        candidates.append(Fixtures.repositoryRoot.appendingPathComponent(".build/debug/exporter"))
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }()

    /// Runs `exporter arguments` with a clean environment (no real Hugging Face cache, the
    /// repository's presets) plus `environment`, and waits for it.
    /// - Throws: when the binary is missing or cannot be started.
    static func run(_ arguments: [String], environment: [String: String] = [:]) throws -> ChildRun {
        guard let executable else {
            throw ChildProcessError.binaryMissing(
                "no built 'exporter' binary beside the tests or in .build/debug; run 'swift build --build-tests'")
        }
        let scratch = try Fixtures.temporaryDirectory("exporter-child")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let outputURL = scratch.appendingPathComponent("stdout")
        let errorURL = scratch.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: outputURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errorURL.path, contents: nil)
        let outputHandle = try FileHandle(forWritingTo: outputURL)
        let errorHandle = try FileHandle(forWritingTo: errorURL)
        defer {
            try? outputHandle.close()
            try? errorHandle.close()
        }
        var fullEnvironment = [
            "HOME": "/nonexistent-home", "HF_HOME": "/nonexistent-hf-home", "CI": "1",
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
            "EXPORTER_PRESETS": Fixtures.presetsDirectory.path,
        ]
        for (key, value) in environment { fullEnvironment[key] = value }
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.environment = fullEnvironment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = outputHandle
        process.standardError = errorHandle
        try process.run()
        process.waitUntilExit()
        return ChildRun(
            status: process.terminationStatus, reason: process.terminationReason,
            output: (try? String(contentsOf: outputURL, encoding: .utf8)) ?? "<not UTF-8>",
            error: (try? String(contentsOf: errorURL, encoding: .utf8)) ?? "<not UTF-8>")
    }
}

enum ChildProcessError: Error {
    case binaryMissing(String)
}
