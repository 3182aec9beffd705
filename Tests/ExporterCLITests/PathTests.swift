import Foundation
import TestSupport
import Testing

/// Paths as the file system reads them: `..` after a symbolic link, a working folder removed.
@Suite("command line: paths as the kernel resolves them")
struct PathTests {
    let options = ["--experimental", "--compute-precision", "float16", "--context", "64"]

    @Test("`link/..` is the parent of the link's target, for the model and the output folder alike")
    func dotDotAfterLink() throws {
        let root = try Fixtures.temporaryDirectory("paths")
        // `near/q` and `far/q` differ in layers; `near/link` points into `far`.
        for (folder, layers) in [("near", 3), ("far", 2)] {
            let checkpoint = try Fixtures.syntheticCheckpoint(overrides: ["num_hidden_layers": layers])
            try FileManager.default.createDirectory(
                at: root.appendingPathComponent(folder), withIntermediateDirectories: true)
            try FileManager.default.moveItem(at: checkpoint, to: root.appendingPathComponent("\(folder)/q"))
        }
        try FileManager.default.createDirectory(
            at: root.appendingPathComponent("far/inner"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(
            at: root.appendingPathComponent("near/link"), withDestinationURL: root.appendingPathComponent("far/inner"))
        let run = try BuiltExporter.run(
            ["near/link/../q"] + options + ["--output-dir", "near/link/../out"], directory: root)
        #expect(run.status == 0, "\(run.error)")
        // Written beside the link's target, from the checkpoint there (2 layers).
        let graph = try String(
            contentsOf: root.appendingPathComponent("far/out/q/q.aimodel/graph.json"), encoding: .utf8)
        #expect(graph.contains(#""layers" : 2,"#))
        #expect(!FileManager.default.fileExists(atPath: root.appendingPathComponent("near/out").path))
        // Without a link before it, `..` is the same as ever.
        let plain = try BuiltExporter.run(["plan", "near/../near/q", "--json"] + options, directory: root)
        #expect(plain.status == 0)
        #expect(plain.output.contains("\"layers\" : 3\n"))
    }

    @Test("a working folder that was removed: every command stops at once (74), never hangs or writes elsewhere")
    func removedWorkingFolder() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(overrides: ["num_hidden_layers": 2])
        let gone = try Fixtures.temporaryDirectory("gone")
        let out = try Fixtures.temporaryDirectory("out")
        // A shell enters the folder, removes it and runs exporter there: Process cannot start
        // a child in a folder that is not.
        func run(_ arguments: [String]) throws -> BuiltExporter.Outcome {
            try FileManager.default.createDirectory(at: gone, withIntermediateDirectories: true)
            let quoted = arguments.map { "'" + $0.replacingOccurrences(of: "'", with: #"'\''"#) + "'" }
            return try BuiltExporter.run(
                [
                    "-c",
                    "cd '\(gone.path)' && rmdir '\(gone.path)' && exec timeout 60 \(quoted.joined(separator: " "))",
                ],
                executable: URL(fileURLWithPath: "/bin/sh"))
        }
        let exporter = BuiltExporter.url.path
        // Relative paths (the default Artifacts, `x/..` that once led out of nowhere), or none at all.
        let relativeOut = "x/.." + out.path + "/r"
        for command in [
            [exporter, checkpoint.path] + options, [exporter, "plan", checkpoint.path] + options,
            [exporter, checkpoint.path, "--output-dir", relativeOut] + options,
            [exporter, "synth", checkpoint.path, "--out", "rel/x"], [exporter, "list"],
        ] {
            let outcome = try run(command)
            #expect(outcome.status == 74, "\(command)")
            #expect(
                outcome.error
                    == "Error: cannot read the current folder: it was removed; run exporter from a folder that exists\n"
            )
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: out.path).isEmpty)
        #expect(try run([exporter, "--version"]).status == 0)
    }
}
