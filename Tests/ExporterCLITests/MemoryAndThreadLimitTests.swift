import ExporterKit
import Foundation
import TestSupport
import Testing

/// The built binary run under `ulimit -v` (any user) and `ulimit -u` (an unprivileged one:
/// root ignores it): a run that cannot have its memory or its threads stops at once with 71 and
/// the limit's name, never hangs in Dispatch or aborts in the allocator.
@Suite("process limits: ulimit -v and -u end in 71 with the limit named, never a hang or an abort")
struct MemoryAndThreadLimitTests {
    /// What a thread reserves: its stack and guard page.
    private static let thread = SystemResources.threadReserveBytes

    /// Limits can be set by a shell on this system, and mean what they say: Linux (macOS does not
    /// enforce `ulimit -v`), no sanitizer (whose shadow memory needs terabytes of address space),
    /// and `timeout`, which ends the run that would hang without the fix.
    static let canLimit =
        FileManager.default.fileExists(atPath: "/proc/self/status")
        && ProcessInfo.processInfo.environment["ASAN_OPTIONS"] == nil
        && ProcessInfo.processInfo.environment["TSAN_OPTIONS"] == nil
        && FileManager.default.isExecutableFile(atPath: "/usr/bin/timeout")

    /// `ulimit -u` binds only an unprivileged user: the suite runs as root and `setpriv` is there
    /// to drop to uid 65534 (nobody); bash sets it (dash, Debian's `sh`, has no `-u`).
    static let canLimitProcesses =
        canLimit && geteuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")
        && FileManager.default.isExecutableFile(atPath: "/bin/bash")

    /// Runs the binary with `arguments` under `limit` (`-v 102400`), ended after 120 s (exit 124)
    /// if it hangs; as nobody when `unprivileged`.
    private func run(limit: String, _ arguments: [String], unprivileged: Bool = false) throws -> BuiltExporter.Outcome {
        let drop = unprivileged ? "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups /bin/bash" : "/bin/sh"
        // The limit is set by the shell that then becomes the binary: `timeout` and `setpriv` run unlimited.
        let script =
            "exec /usr/bin/timeout -k 5 120 \(drop) -c 'ulimit \(limit) && exec \"$0\" \"$@\"' \"$0\" \"$@\""
        return try BuiltExporter.run(
            ["-c", script, BuiltExporter.url.path] + arguments, executable: URL(fileURLWithPath: "/bin/sh"))
    }

    /// `text` with the figures a run's own address space decides replaced: what it leaves, by how
    /// much to raise the limit, how many threads could be started.
    private func withoutFigures(_ text: String) -> String {
        text.replacingOccurrences(
            of: #"leaves it [0-9.]+ [KMG]?i?B; raise the limit by [0-9.]+ [KMG]?i?B"#, with: "leaves it …; raise …",
            options: .regularExpression
        )
        .replacingOccurrences(
            of: #"and [0-9]+ could be started"#, with: "and … could be started", options: .regularExpression)
    }

    /// Expects `run` refused with 71 and `refusal`'s message (its run-decided figures aside),
    /// leaving `output` empty.
    private func expectRefused(
        _ run: BuiltExporter.Outcome, with refusal: ResourceError, leaving output: URL,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        #expect(run.status == 71, sourceLocation: sourceLocation)
        #expect(
            withoutFigures(run.error) == withoutFigures("Error: " + refusal.description + "\n"),
            sourceLocation: sourceLocation)
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: output.path).isEmpty, sourceLocation: sourceLocation)
    }

    /// A tiny checkpoint whose `architectures` names its family, so that nothing else is said.
    private func checkpoint() throws -> URL {
        try Fixtures.syntheticCheckpoint(overrides: ["architectures": ["Qwen2ForCausalLM"]])
    }

    @Test(
        "under ulimit -v, plan and the export count the limit less what the process maps: 71, naming it",
        .enabled(if: canLimit, "needs Linux, timeout and no sanitizer"))
    func addressSpaceRefusesTheExport() throws {
        let model = try checkpoint()
        let output = try Fixtures.temporaryDirectory()
        let arguments = [model.path, "--experimental", "--compute-precision", "float16"]
        let forecast = ExportRunner.conversionForecast(try Fixtures.plan(model), availableBytes: nil)
        // Room for the threads and the process, not for the conversion on top.
        let limit = "-v \(((120 << 20) + WorkerThreads.export() * Self.thread) / 1024)"
        let expected = withoutFigures(
            "Error: "
                + ResourceError.notEnoughMemory(
                    model: "Tiny", neededBytes: forecast.peakBytes, availableBytes: 0, peakTensor: forecast.peakTensor,
                    limit: .addressSpace
                ).description + "\n")

        let plan = try run(limit: limit, ["plan"] + arguments + ["--json"])
        #expect(plan.status == 71)
        #expect(withoutFigures(plan.error) == expected)
        let conversion = try JSONParser.parse(Array(plan.output.utf8)).objectValue?["conversion"]?.objectValue
        #expect(conversion?["available_limit"]?.stringValue == "RLIMIT_AS")
        let available = try #require(conversion?["available_bytes"]?.intValue)
        #expect(available < forecast.peakBytes)
        let text = try run(limit: limit, ["plan"] + arguments)
        #expect(text.status == 71)
        #expect(
            text.output.split(separator: "\n").contains {
                $0.hasPrefix("  conversion ") && $0.hasSuffix(" available (ulimit -v): refused")
            }, "\(text.output)")

        let export = try run(limit: limit, arguments + ["--output-dir", output.path])
        #expect(export.status == 71)
        #expect(withoutFigures(export.error) == expected)
        // Refused before anything was written.
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path).isEmpty)
    }

    @Test(
        "under ulimit -v without room for the threads' stacks, the export stops at once with 71, not a hang",
        .enabled(if: canLimit, "needs Linux, timeout and no sanitizer"))
    func addressSpaceRefusesTheThreads() throws {
        let output = try Fixtures.temporaryDirectory()
        let run = try run(
            limit: "-v 102400",
            [try checkpoint().path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path])
        try expectRefused(
            run,
            with: ResourceError.cannotStartThread(
                needed: WorkerThreads.export(), started: 0, reason: "resource temporarily unavailable",
                limit: .memory(.addressSpace, bytes: 102_400 * 1024, threadBytes: Self.thread)
            ),
            leaving: output)
    }

    @Test(
        "under ulimit -v, a compile refuses with 71 what its forecast does not fit, before writing anything",
        .enabled(if: canLimit, "needs Linux, timeout and no sanitizer"))
    func addressSpaceRefusesTheCompile() throws {
        let bundle = try Fixtures.export(try checkpoint())
        let output = try Fixtures.temporaryDirectory()
        let manifestBytes = try Data(contentsOf: bundle.appendingPathComponent("manifest.json")).count
        let run = try run(
            limit: "-v \(((120 << 20) + WorkerThreads.compile() * Self.thread) / 1024)",
            ["compile", bundle.path, "--device", "h17p", "--output", output.path])
        try expectRefused(
            run,
            with: ResourceError.notEnoughMemoryFor(
                .compile(bundle: "Tiny", devices: nil),
                neededBytes: Compiler.memoryForecast(manifestBytes: manifestBytes, devices: 1),
                availableBytes: 0, limit: .addressSpace
            ),
            leaving: output)
    }

    @Test(
        "under ulimit -v, convert refuses with 71 what its forecast does not fit, before writing anything",
        .enabled(if: canLimit, "needs Linux, timeout and no sanitizer"))
    func addressSpaceRefusesTheConversion() throws {
        let bundle = try Fixtures.export(try checkpoint())
        let output = try Fixtures.temporaryDirectory()
        let manifestBytes = try Data(contentsOf: bundle.appendingPathComponent("manifest.json")).count
        let run = try run(
            limit: "-v \(((120 << 20) + WorkerThreads.convert() * Self.thread) / 1024)",
            ["convert", bundle.path, "--output", output.appendingPathComponent("Tiny.mlpackage").path])
        try expectRefused(
            run,
            with: ResourceError.notEnoughMemoryFor(
                .package(bundle: "Tiny.aimodel"),
                neededBytes: MLPackageWriter.memoryForecast(manifestBytes: manifestBytes),
                availableBytes: 0, limit: .addressSpace
            ),
            leaving: output)
    }

    @Test(
        "under ulimit -u, the export and the farm stop at once with 71 naming the limit, not a hang",
        .enabled(if: canLimitProcesses, "needs root, setpriv (uid 65534: root ignores ulimit -u), Linux and timeout"))
    func processLimitRefusesThreads() throws {
        // Nothing is read before the threads are tried: a preset with generated weights will do.
        let folder = try Fixtures.temporaryDirectory()
        _ = chmod(folder.path, 0o777)
        let export = try run(
            limit: "-u 1", ["qwen2.5-1.5b", "--synthetic", "--output-dir", folder.appendingPathComponent("out").path],
            unprivileged: true)
        #expect(export.status == 71)
        #expect(
            export.error
                == "Error: "
                + ResourceError.cannotStartThread(
                    needed: WorkerThreads.export(), started: 0, reason: "resource temporarily unavailable",
                    limit: .processes(1)
                ).description + "\n")
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("out").path))

        let farm = folder.appendingPathComponent("farm.json")
        try Data(
            #"{"schema": "exporter.farm/1", "jobs": [{"name": "t", "model": "qwen2.5-1.5b", "synthetic": true}]}"#.utf8
        ).write(to: farm)
        _ = chmod(farm.path, 0o644)
        let batch = try run(
            limit: "-u 1", ["batch", farm.path, "--output", folder.appendingPathComponent("farm").path, "--jobs", "2"],
            unprivileged: true)
        #expect(batch.status == 71)
        #expect(
            batch.error
                == "Error: "
                + ResourceError.cannotStartThread(
                    needed: WorkerThreads.farm(jobs: 1), started: 0, reason: "resource temporarily unavailable",
                    limit: .processes(1)
                ).description + "\n")
    }
}
