import ExporterKit
import Foundation
import Testing

@testable import TestSupport

@Suite("command line: closed standard streams and process limits")
struct ProcessLimitTests {
    /// Runs the built exporter with `arguments` from a shell that first runs `prelude` (closing
    /// streams with `exec`, setting limits with `ulimit`), then becomes the export.
    private func run(_ prelude: String, _ arguments: [String]) throws -> BuiltExporter.Outcome {
        try BuiltExporter.run(
            ["-c", prelude + "; exec \"$0\" \"$@\"", BuiltExporter.url.path] + arguments,
            executable: URL(fileURLWithPath: "/bin/sh"))
    }

    @Test("with standard streams closed, nothing the run opens takes their numbers: the exit status is 0 or 74")
    func closedStandardStreams() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let export = [checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir"]
        // The signal pipe got 1 and 2 and read the run's own text as signal numbers: exit 128 + 'w'.
        let bothClosed = try run("exec >&- 2>&-", export + [output.appendingPathComponent("both").path])
        #expect(bothClosed.status == 74 && bothClosed.exitedNormally)
        // No text went into a file of the bundle: its bytes are a normal run's.
        let normal = try BuiltExporter.run(export + [output.appendingPathComponent("normal").path])
        #expect(normal.status == 0, "\(normal.error)")
        let bundle = output.appendingPathComponent("both/tiny/Tiny.aimodel")
        let names = try FileManager.default.subpathsOfDirectory(atPath: bundle.path).sorted()
        #expect(names.contains("weights.bin"))
        for name in names where !name.hasSuffix("/") {
            let normalFile = output.appendingPathComponent("normal/tiny/Tiny.aimodel/\(name)")
            #expect(
                FileManager.default.contentsEqual(
                    atPath: bundle.appendingPathComponent(name).path, andPath: normalFile.path),
                "\(name)")
        }
        // Output to a file, error and input closed: the summary reaches the file, and the run succeeds.
        let log = output.appendingPathComponent("log.txt")
        let toFile = try run(
            "exec 2>&- <&- >'\(log.path)'", export + [output.appendingPathComponent("file").path])
        #expect(toFile.status == 0)
        #expect(try String(contentsOf: log, encoding: .utf8).hasPrefix("wrote "))
        // All three closed: as with output alone closed, 74 once the bundle is written.
        let allClosed = try run("exec >&- 2>&- <&-", export + [output.appendingPathComponent("all").path])
        #expect(allClosed.status == 74)
        #expect(FileManager.default.fileExists(atPath: output.appendingPathComponent("all/tiny/Tiny.aimodel").path))
    }

    @Test("too few open files allowed is refused before any work (71); a low soft limit is raised to the hard one")
    func openFileLimit() throws {
        let refused = try run("ulimit -n 8", ["--version"])
        #expect(refused.status == 71)
        #expect(refused.error == "Error: only 8 files may be open at once (ulimit -n); exporter needs at least 16\n")
        // Exactly the fewest it needs is enough; one fewer is not.
        let fewest = try run("ulimit -n 16", ["--version"])
        #expect(fewest.status == 0, "\(fewest.error)")
        #expect(try run("ulimit -n 15", ["--version"]).status == 71)
        // Every shard is open at once: 26 of them need more than a soft limit of 16.
        let sharded = try Fixtures.syntheticCheckpoint(shardBytes: 1)
        let shards = try FileManager.default.contentsOfDirectory(atPath: sharded.path).filter {
            $0.hasSuffix(".safetensors")
        }
        #expect(shards.count > 16)
        let raised = try run(
            "ulimit -Sn 16", ["plan", sharded.path, "--experimental", "--compute-precision", "float16"])
        #expect(raised.status == 0, "\(raised.error)")
    }

    @Test(
        "a file beyond ulimit -f fails with 'file too large' (74) in synth too, its temporary file removed",
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")))
    func fileSizeLimit() throws {
        let folder = try Fixtures.temporaryDirectory().appendingPathComponent("ck")
        // SIGXFSZ back to its default and unblocked (the test runner's threads block it, and a
        // shell cannot undo that), then the limit: 20 KiB, as `ulimit -f 20`.
        let limited = """
            import os, resource, signal, sys
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            resource.setrlimit(resource.RLIMIT_FSIZE, (20480, 20480))
            os.execv(sys.argv[1], sys.argv[1:])
            """
        let synth = try BuiltExporter.run(
            [
                "-c", limited, BuiltExporter.url.path, "synth", Fixtures.syntheticCheckpoint().path, "--out",
                folder.path,
            ],
            executable: URL(fileURLWithPath: "/usr/bin/python3"))
        #expect(synth.exitedNormally && synth.status == 74, "\(synth)")
        #expect(synth.error == "Error: cannot write '\(folder.path)/model.safetensors': file too large\n")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).isEmpty)
    }
}
