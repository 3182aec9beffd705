import Foundation
import TestSupport
import Testing

@testable import ExporterCLI
@testable import ExporterKit

@Suite("command line: export and synth")
struct ExportCommandTests {
    @Test(
        "an export or a synth stopped by a signal (SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM) removes what it was filling, then ends by it",
        .enabled(if: FileManager.default.fileExists(atPath: "/proc/self/stat")))
    func interruptedRunsCleanUp() throws {
        let folder = try Fixtures.temporaryDirectory()
        /// Starts `arguments` as a shell would, waits for `partial` to show an entry being filled,
        /// then sends `signal`; returns the status and the signal that ended the run.
        func interrupt(_ arguments: [String], by signal: Int32, partial: () -> Bool) throws -> (Int32, Int32?) {
            let running = try ExporterKit.ChildProcess.start(
                BuiltExporter.url, arguments: arguments, environment: BuiltExporter.cleanEnvironment)
            let deadline = Date().addingTimeInterval(60)
            while !partial() && Date() < deadline { usleep(1_000) }
            #expect(partial(), "nothing was being filled: \(arguments)")
            kill(running.id, signal)
            let (status, caught, _) = running.finish()
            return (status, caught)
        }
        func entries(_ url: URL) -> [String] { (try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? [] }
        // SIGUSR1, SIGUSR2 and SIGALRM end a run by default too (some CI wrappers send them).
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM] {
            // The output folder and the model's folder are the export's own: they go too.
            let out = folder.appendingPathComponent("out-\(signal)")
            let model = out.appendingPathComponent("qwen3-0.6b")
            let export = try interrupt(
                ["qwen3-0.6b", "--synthetic", "--output-dir", out.path], by: signal,
                partial: { entries(model).contains { $0.hasPrefix(".partial-Qwen3-0.6B.aimodel-") } })
            #expect(export.0 == 128 + signal && export.1 == signal)
            #expect(!FileManager.default.fileExists(atPath: out.path), "\(entries(model))")
        }
        // synth's temporary weight file, and the folders it made for it; a folder it was given stays.
        let given = folder.appendingPathComponent("given")
        try FileManager.default.createDirectory(at: given, withIntermediateDirectories: true)
        for checkpoint in [folder.appendingPathComponent("made/ck"), given] {
            let synth = try interrupt(
                ["synth", "qwen3-0.6b", "--out", checkpoint.path], by: SIGTERM,
                partial: { entries(checkpoint).contains { $0.hasPrefix(".model.safetensors.partial-") } })
            #expect(synth.0 == 128 + SIGTERM && synth.1 == SIGTERM)
            #expect(FileManager.default.fileExists(atPath: checkpoint.path) == (checkpoint == given))
            #expect(entries(checkpoint) == [])
        }
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("made").path))
    }

    @Test(
        "a run's handlers of the signals that end it replace the defaults in one step: no signal is ignored meanwhile",
        .enabled(if: FileManager.default.fileExists(atPath: "/proc/self/stat")))
    func signalsNeverIgnoredOnTheWay() throws {
        let out = try Fixtures.temporaryDirectory()
        // SIGQUIT too: the Swift runtime answered it with a crash report, and the run went on.
        let handled = ProcessTable.set(of: [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM])
        for signal in [SIGINT, SIGTERM, SIGHUP] {
            let running = try ExporterKit.ChildProcess.start(
                BuiltExporter.url, arguments: ["qwen3-0.6b", "--synthetic", "--output-dir", out.path],
                environment: BuiltExporter.cleanEnvironment)
            // Dispatch's signal sources ignored each signal until their manager thread registered
            // it: a SIGTERM sent then was lost, and a farm's job ran on (once in CI). The gap
            // showed in nearly every run, as a SigIgn with the three signals.
            var ignoredOnTheWay: [UInt64] = []
            var caught: UInt64 = 0
            let deadline = Date().addingTimeInterval(30)
            while caught & handled != handled && Date() < deadline,
                let ignored = ProcessTable.signalSet("SigIgn", of: running.id)
            {
                if ignored & handled != 0 { ignoredOnTheWay.append(ignored) }
                caught = ProcessTable.signalSet("SigCgt", of: running.id) ?? 0
            }
            kill(running.id, signal)
            let (status, caughtBy, _) = running.finish()
            #expect(ignoredOnTheWay == [])
            #expect(caught & handled == handled, "SigCgt \(String(caught, radix: 16))")
            #expect(status == 128 + signal && caughtBy == signal)
            #expect(!FileManager.default.fileExists(atPath: out.appendingPathComponent("qwen3-0.6b").path))
        }
    }

    /// Starts a synthetic qwen3-0.6b export into `out` from a shell that runs `prelude` (a trap,
    /// a limit), then becomes the export.
    private func exportFromShell(_ prelude: String, into out: URL) throws -> ExporterKit.ChildProcess {
        try ExporterKit.ChildProcess.start(
            URL(fileURLWithPath: "/bin/sh"),
            arguments: [
                "-c", prelude + "; exec \"$0\" \"$@\"", BuiltExporter.url.path, "qwen3-0.6b", "--synthetic",
                "--output-dir", out.path,
            ],
            environment: BuiltExporter.cleanEnvironment)
    }

    @Test(
        "a signal the run started with ignored (as nohup starts it) stays ignored: no handler replaces it",
        .enabled(if: FileManager.default.fileExists(atPath: "/proc/self/stat")))
    func ignoredSignalStaysIgnored() throws {
        let out = try Fixtures.temporaryDirectory()
        let handled = ProcessTable.set(of: [SIGINT, SIGTERM])
        let hangUp = ProcessTable.set(of: [SIGHUP])
        // The shell ignores SIGHUP, which exec keeps, then becomes the export.
        let running = try exportFromShell("trap '' HUP", into: out)
        let deadline = Date().addingTimeInterval(30)
        while (ProcessTable.signalSet("SigCgt", of: running.id) ?? 0) & handled != handled && Date() < deadline {
            usleep(1_000)
        }
        // Every handler is in place a moment after the first ones.
        usleep(100_000)
        let caught = ProcessTable.signalSet("SigCgt", of: running.id) ?? 0
        let ignored = ProcessTable.signalSet("SigIgn", of: running.id) ?? 0
        kill(running.id, SIGTERM)
        let (status, caughtBy, _) = running.finish()
        #expect(caught & handled == handled, "SigCgt \(String(caught, radix: 16))")
        #expect(caught & hangUp == 0, "SigCgt \(String(caught, radix: 16))")
        #expect(ignored & hangUp == hangUp, "SigIgn \(String(ignored, radix: 16))")
        #expect(status == 128 + SIGTERM && caughtBy == SIGTERM)
        #expect(!FileManager.default.fileExists(atPath: out.appendingPathComponent("qwen3-0.6b").path))
    }

    @Test(
        "SIGQUIT ends a run as the other signals do: its staging folder removed, status 131, no crash report",
        .enabled(if: FileManager.default.fileExists(atPath: "/proc/self/stat")))
    func quitEndsTheRun() throws {
        let out = try Fixtures.temporaryDirectory()
        let model = out.appendingPathComponent("qwen3-0.6b")
        // No core file.
        let running = try exportFromShell("ulimit -c 0", into: out)
        let quit = ProcessTable.set(of: [SIGQUIT])
        let deadline = Date().addingTimeInterval(60)
        func filling() -> Bool {
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: model.path)) ?? []
            return entries.contains { $0.hasPrefix(".partial-Qwen3-0.6B.aimodel-") }
                && (ProcessTable.signalSet("SigCgt", of: running.id) ?? 0) & quit == quit
        }
        while !filling() && Date() < deadline { usleep(1_000) }
        #expect(filling())
        kill(running.id, SIGQUIT)
        let (status, caughtBy, standardError) = running.finish()
        #expect(status == 128 + SIGQUIT && caughtBy == SIGQUIT)
        #expect(!String(decoding: standardError, as: UTF8.self).contains("crashed"))
        #expect(!FileManager.default.fileExists(atPath: model.path))
    }

    @Test("artifacts made from the bundle an export replaced are named with the commands that renew them")
    func staleSiblings() throws {
        let checkpoint = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(), name: "Mini")
        let output = try Fixtures.temporaryDirectory()
        let arguments = [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--synthetic", "--output-dir",
            output.path,
        ]
        let first = runExporter(arguments + ["--compile", "--format", "mlpackage"])
        #expect(first.status == 0, "\(first.error)")
        #expect(!first.error.contains("warning"))
        let bundle = "\(output.path)/mini/Mini.aimodel"
        // Other weights, the bundle alone replaced: its compiled artifacts and package are stale.
        let replaced = runExporter(arguments + ["--seed", "1", "--overwrite"])
        #expect(replaced.status == 0, "\(replaced.error)")
        #expect(
            replaced.error
                == "warning: 'Mini.h16p.aimodelc', 'Mini.h17p.aimodelc' were compiled from the bundle this export "
                + "replaced; to bring them up to date: exporter compile '\(bundle)' --platform iOS --device h16p "
                + "--device h17p --overwrite\n"
                + "warning: 'Mini.mlpackage' was converted from the bundle this export replaced; to bring it up to "
                + "date: exporter convert '\(bundle)' --to mlpackage --overwrite\n")
        // The re-run's hint renews the stale ones and makes the missing one.
        try FileManager.default.removeItem(atPath: "\(output.path)/mini/Mini.h16p.aimodelc")
        let steps = runExporter(arguments + ["--seed", "1", "--compile", "--format", "mlpackage"])
        #expect(steps.status == 73)
        #expect(
            steps.error
                == "Error: '\(bundle)' already exists; pass --overwrite to replace it\n"
                + "or keep it and run the other steps from it:\n"
                + "  exporter compile '\(bundle)' --platform iOS --overwrite\n"
                + "  exporter convert '\(bundle)' --to mlpackage --overwrite\n")
        // The hint's commands leave nothing stale.
        for command in steps.error.split(separator: "\n").filter({ $0.hasPrefix("  exporter ") }) {
            let words = Array(shellWords(String(command.dropFirst(2))).dropFirst())
            #expect(runExporter(words).status == 0, "\(command)")
        }
        #expect(StaleSiblings(ofBundle: URL(fileURLWithPath: bundle), name: "Mini").isEmpty)
        #expect(
            runExporter(arguments + ["--seed", "1", "--compile", "--format", "mlpackage"]).error
                == "Error: '\(bundle)' already exists; pass --overwrite to replace it\n")
        // A bundle an earlier version wrote is another export: no step is suggested from it.
        let manifestURL = URL(fileURLWithPath: bundle).appendingPathComponent("manifest.json")
        let text = try String(contentsOf: manifestURL, encoding: .utf8)
        try text.replacingOccurrences(of: #""version" : "\#(ToolVersion.current)""#, with: #""version" : "0.7.0""#)
            .write(to: manifestURL, atomically: true, encoding: .utf8)
        let older = runExporter(arguments + ["--seed", "1", "--compile"])
        #expect(
            older.error
                == "Error: '\(bundle)' already exists; pass --overwrite to replace it\n"
                + "it holds another export than this one (written by exporter 0.7.0, this is \(ToolVersion.current))\n")
        // Compiled for another deployment version, from a device table: the renewing command keeps both.
        let table = output.appendingPathComponent("devices.json")
        try Data(#"{"schema": "exporter.devices/1", "devices": []}"#.utf8).write(to: table)
        #expect(
            runExporter(["compile", bundle, "--device", "h17p", "--min-deployment-version", "28.0", "--overwrite"])
                .status == 0)
        let renewed = runExporter(arguments + ["--seed", "2", "--overwrite", "--devices", table.path])
        #expect(
            renewed.error.contains(
                "'Mini.h17p.aimodelc' was compiled from the bundle this export replaced; to bring it up to date: "
                    + "exporter compile '\(bundle)' --platform iOS --device h17p --min-deployment-version 28.0 "
                    + "--devices '\(table.path)' --overwrite\n"), "\(renewed.error)")
    }

    @Test("an export without --compile warns of the devices it does not fit, in the plan's words; with it, not")
    func exportWarnsOfVerdicts() throws {
        let checkpoint = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(), name: "Mini")
        let folder = try Fixtures.temporaryDirectory()
        let table = folder.appendingPathComponent("small-devices.json")
        try Data(
            """
            {"schema": "exporter.devices/1", "devices": [
              {"id": "x1", "platform": "iOS", "chip": "Small chip", "products": ["Small phone"], "ahead_of_time": true,
               "ram_bytes": 2000000, "app_memory_limit_bytes": 1000000, "increased_memory_limit_bytes": null,
               "entitlements": [], "ane_region_budget_bytes": 1000, "page_size": 4096}
            ]}
            """.utf8
        ).write(to: table)
        let arguments = [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--synthetic", "--devices", table.path,
        ]
        let plan = runExporter(["plan"] + arguments + ["--json"])
        let manifest = try #require(try JSONParser.parse(Array(plan.output.utf8)).objectValue)
        // Its memory, then its regions over the Neural Engine budget.
        let warnings = manifest["warnings"]?.arrayValue?.compactMap(\.stringValue).filter { $0.hasPrefix("x1 (iOS): ") }
        #expect(warnings?.count == 2)
        let warning = try #require(warnings?.first)
        #expect(warning.hasSuffix(": the app is killed at load"), "\(warning)")
        #expect(warnings?.last?.contains("over the Neural Engine budget of 1000 bytes") == true)
        let export = runExporter(arguments + ["--output-dir", folder.appendingPathComponent("out").path])
        #expect(export.status == 0, "\(export.error)")
        #expect(export.error == (warnings ?? []).map { "warning: \($0)\n" }.joined())
        // With --compile, the compile step's verdicts say it: the export does not say it again.
        let compiled = runExporter(
            arguments + ["--output-dir", folder.appendingPathComponent("out2").path, "--compile"])
        #expect(compiled.status == 0, "\(compiled.error)")
        #expect(compiled.error.components(separatedBy: "warning: \(warning)").count <= 2, "\(compiled.error)")
    }

    @Test("two synth runs never write one folder at once: the later fails (74) and writes nothing there")
    func synthFolderLock() throws {
        let config = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(), name: "Mini")
        let out = try Fixtures.temporaryDirectory()
        // Another run holds the folder (a flock is per open file, so this process can play it).
        try CheckpointFolderLock.holding(out, .writing) {
            let run = runExporter(["synth", config.path, "--out", out.path, "--overwrite"])
            #expect(run.status == 74)
            #expect(
                run.error
                    == "Error: cannot write '\(out.path)': another run is writing a checkpoint there; wait for it to end\n"
            )
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: out.path).isEmpty)
        #expect(runExporter(["synth", config.path, "--out", out.path]).status == 0)
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: out.path).sorted() == [
                "config.json", "model.safetensors",
            ])
    }

    @Test(
        "an export reads a checkpoint folder under its lock: not while a synth writes it (74), nor a synth while it reads"
    )
    func exportFolderLock() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let arguments = [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
        ]
        let weights = try Data(contentsOf: checkpoint.appendingPathComponent("model.safetensors"))
        // A synth holds the folder: the export fails at once and writes nothing.
        try CheckpointFolderLock.holding(checkpoint, .writing) {
            let run = runExporter(arguments)
            #expect(run.status == 74)
            #expect(
                run.error
                    == "Error: cannot read '\(checkpoint.path)': a synth run is writing a checkpoint there; wait for it to end\n"
            )
            // Generated weights read no checkpoint: nothing to wait for.
            #expect(runExporter(arguments + ["--synthetic", "--output-name", "Generated"]).status == 0)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == ["generated"])
        // An export reads it (another export may too): a synth fails at once and changes nothing.
        try CheckpointFolderLock.holding(checkpoint, .reading) {
            let synth = runExporter(["synth", checkpoint.path, "--out", checkpoint.path, "--seed", "7", "--overwrite"])
            #expect(synth.status == 74)
            #expect(
                synth.error
                    == "Error: cannot write '\(checkpoint.path)': an export is reading the checkpoint there; wait for it to end\n"
            )
            let after = try Data(contentsOf: checkpoint.appendingPathComponent("model.safetensors"))
            #expect(after == weights)
            let run = runExporter(arguments)
            #expect(run.status == 0, "\(run.error)")
        }
        // verify --against and eval read the checkpoint too: not while a synth writes it.
        let bundle = output.appendingPathComponent("tiny/Tiny.aimodel").path
        try CheckpointFolderLock.holding(checkpoint, .writing) {
            for command in [
                ["verify", bundle, "--against", checkpoint.path],
                ["eval", bundle, "--against", checkpoint.path, "--tokens", "1,2,3"],
            ] {
                let run = runExporter(command)
                #expect(run.status == 74, "\(command)")
                #expect(
                    run.error
                        == "Error: cannot read '\(checkpoint.path)': a synth run is writing a checkpoint there; wait for "
                        + "it to end\n", "\(command)")
            }
        }
        #expect(runExporter(["verify", bundle, "--against", checkpoint.path]).status == 0)
        // A folder that cannot be opened holds no lock to respect: the reader says what is wrong with it.
        let missing = output.appendingPathComponent("no-such-checkpoint").path
        for command in [
            ["verify", bundle, "--against", missing], ["eval", bundle, "--against", missing, "--tokens", "1,2,3"],
        ] {
            let run = runExporter(command)
            #expect(run.status == 66, "\(command)")
            #expect(run.error == "Error: cannot open '\(missing)': no such directory\n", "\(command)")
        }
    }

    @Test("an export whose name is another artifact's on a Mac (case, Unicode form) is refused (73), naming both")
    func outputNameClash() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        func export(_ name: String, _ extra: [String] = []) -> CommandLineRun {
            runExporter(
                [
                    checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
                    "--output-name", name,
                ] + extra)
        }
        #expect(export("Tiny", ["--compile"]).status == 0)
        let folder = output.appendingPathComponent("tiny")
        for extra in [[], ["--overwrite"], ["--compile", "--overwrite"]] {
            let clash = export("TINY", extra)
            #expect(clash.status == 73)
            #expect(
                clash.error
                    == "Error: cannot write '\(folder.path)/TINY.aimodel': '\(folder.path)/Tiny.aimodel' is there, and "
                    + "'TINY.aimodel' and 'Tiny.aimodel' are one name on macOS, whose file names ignore case and "
                    + "Unicode form; move that one away or choose another name\n")
        }
        let contents = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(contents == ["Tiny.aimodel", "Tiny.h16p.aimodelc", "Tiny.h17p.aimodelc"])
        // The library refuses it too, before reading a weight.
        var options = ExportOptions(model: checkpoint.path)
        (options.experimental, options.computePrecision, options.outputName) = (true, .float16, "TINY")
        let plan = try ExportPlan.make(options: options, resolver: try Fixtures.resolver())
        #expect(
            throws: BundleError.nameClash(
                path: folder.appendingPathComponent("TINY.aimodel").path,
                existing: folder.appendingPathComponent("Tiny.aimodel").path)
        ) { try ExportRunner.run(plan, settings: ExportSettings(outputDirectory: output)) }
        // One name in two Unicode forms: the model's folder is the clash.
        let (composed, decomposed) = ("Caf\u{E9}", "Cafe\u{301}")
        #expect(export(composed).status == 0)
        let second = export(decomposed)
        #expect(second.status == 73)
        #expect(
            second.error
                == "Error: cannot write '\(output.path)/\(decomposed.lowercased())': '\(output.path)/\(composed.lowercased())' "
                + "is there, and 'cafe\\u{301}' and 'caf\\u{E9}' are one name on macOS, whose file names ignore case "
                + "and Unicode form; move that one away or choose another name\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path).count == 2)
        // Refused before anything else is weighed (a disk too small here), and by the library too.
        let small = runExporter(
            [
                checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
                "--output-name", decomposed,
            ], environment: ["EXPORTER_TEST_AVAILABLE_DISK": "1"])
        #expect(small.status == 73)
        #expect(small.error == second.error)
        options.outputName = decomposed
        do {
            _ = try ExportRunner.run(
                try ExportPlan.make(options: options, resolver: try Fixtures.resolver()),
                settings: ExportSettings(outputDirectory: output))
            Issue.record("the library wrote a model folder that is another's on a Mac")
        } catch {
            // The names are equal to Swift in either form: the text tells them apart.
            #expect("Error: \(error)\n" == second.error)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path).count == 2)
    }

    @Test("a compiled artifact or package that is another entry's name on a Mac is refused before the export writes")
    func stepNameClash() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let folder = output.appendingPathComponent("tiny")
        let arguments = [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
        ]
        func clash(_ name: String, _ existing: String) -> String {
            "Error: cannot write '\(folder.path)/\(name)': '\(folder.path)/\(existing)' is there, and '\(name)' and "
                + "'\(existing)' are one name on macOS, whose file names ignore case and Unicode form; move that one "
                + "away or choose another name\n"
        }
        for (entry, extra, name) in [
            ("TINY.h17p.aimodelc", ["--compile"], "Tiny.h17p.aimodelc"),
            ("tiny.MLPACKAGE", ["--format", "mlpackage"], "Tiny.mlpackage"),
        ] {
            let there = folder.appendingPathComponent(entry)
            try FileManager.default.createDirectory(at: there, withIntermediateDirectories: true)
            let run = runExporter(arguments + extra)
            #expect(run.status == 73)
            #expect(run.error == clash(name, entry))
            // Nothing written: no bundle left without the step asked of it.
            #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path) == [entry])
            try FileManager.default.removeItem(at: there)
        }
        // Two entries that are the bundle's name on a Mac: the one first by its bytes is named.
        for entry in ["Tiny.aimodel", "TINY.aimodel"] {
            try FileManager.default.createDirectory(
                at: folder.appendingPathComponent(entry), withIntermediateDirectories: true)
        }
        let run = runExporter(arguments + ["--output-name", "tiny"])
        #expect(run.status == 73)
        #expect(run.error == clash("tiny.aimodel", "TINY.aimodel"))
    }

    @Test("standard output that cannot be written (its reader gone): every step still runs, then exit 74, no trap")
    func lostStandardOutput() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        func run(_ arguments: [String]) throws -> (status: Int32, reason: Process.TerminationReason, error: String) {
            let process = Process()
            process.executableURL = BuiltExporter.url
            process.arguments = arguments
            process.environment = ["EXPORTER_PRESETS": Fixtures.presetsDirectory.path, "HOME": "/nonexistent-home"]
            let closed = Pipe()
            let error = Pipe()
            process.standardOutput = closed
            process.standardError = error
            try closed.fileHandleForReading.close()
            try process.run()
            let text = String(decoding: error.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return (process.terminationStatus, process.terminationReason, text)
        }
        let export = try run([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
            "--compile",
        ])
        #expect(export.reason == .exit)
        #expect(export.status == 74)
        #expect(export.error.hasSuffix("Error: cannot write standard output: broken pipe\n"))
        let folder = output.appendingPathComponent("tiny")
        let artifacts = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(artifacts.contains("Tiny.aimodel"))
        #expect(artifacts.contains("Tiny.h17p.aimodelc"))
        let version = try run(["--version"])
        #expect(version.reason == .exit && version.status == 74)
        // A failure keeps its own status, and says its report was lost too.
        let bundle = folder.appendingPathComponent("Tiny.aimodel")
        try Data("{}".utf8).write(to: bundle.appendingPathComponent("graph.json"))
        let verify = try run(["verify", bundle.path])
        #expect(verify.reason == .exit && verify.status == 1)
        #expect(verify.error.hasSuffix("Error: cannot write standard output: broken pipe\n"))
    }

    @Test("a calibrated export's record of its text is in its plan before it runs, and in the text views")
    func calibrationRecord() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let tokens = try Fixtures.temporaryDirectory().appendingPathComponent("tokens.txt")
        try Data("[3, 1, 4, 1, 5, 9, 2, 6]".utf8).write(to: tokens)
        let output = try Fixtures.temporaryDirectory()
        let arguments = [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--calibration", tokens.path,
            "--output-dir", output.path,
        ]
        let plan = runExporter(["plan"] + arguments + ["--json"])
        #expect(plan.status == 0, "\(plan.error)")
        let planned = try Manifest.decoded(from: Data(plan.output.utf8), path: "plan")
        let expected = Manifest.CalibrationRecord(
            weighting: "activation_energy", tokens: 8,
            tokensCRC32: BundleWriter.hex(Array("3,1,4,1,5,9,2,6".utf8).withUnsafeBytes { CRC32.checksum($0) }))
        #expect(planned.compression.calibration == expected)
        #expect(runExporter(["plan"] + arguments).output.contains(", calibrated on 8 tokens\n"))
        let export = runExporter(arguments)
        #expect(export.status == 0, "\(export.error)")
        let bundle = output.appendingPathComponent("tiny/Tiny.aimodel")
        #expect(try BundleReader(url: bundle).manifest.compression.calibration == expected)
        #expect(runExporter(["inspect", bundle.path]).output.contains(", calibrated on 8 tokens\n"))
        // Without a calibration text, the record is absent, and the text views say nothing of it.
        let plain = runExporter(["plan", checkpoint.path, "--experimental", "--compute-precision", "float16", "--json"])
        #expect(try Manifest.decoded(from: Data(plain.output.utf8), path: "plan").compression.calibration == nil)
        #expect(!plain.output.contains("calibration"))
    }

    @Test("artifacts take the umask's modes: a group-writable umask gives a teammate an artifact to replace")
    func umaskModes() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = [
            "-c", #"umask 002 && exec "$0" "$@" > /dev/null"#, BuiltExporter.url.path, checkpoint.path,
            "--experimental", "--compute-precision", "float16", "--output-dir", output.path, "--compile",
        ]
        process.environment = ["EXPORTER_PRESETS": Fixtures.presetsDirectory.path, "HOME": "/nonexistent-home"]
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        func mode(_ path: String) throws -> Int {
            try #require(
                try FileManager.default.attributesOfItem(atPath: output.appendingPathComponent(path).path)[
                    .posixPermissions] as? Int)
        }
        #expect(try mode("tiny") == 0o775)
        #expect(try mode("tiny/Tiny.aimodel") == 0o775)
        #expect(try mode("tiny/Tiny.aimodel/weights.bin") == 0o664)
        #expect(try mode("tiny/Tiny.aimodel/manifest.json") == 0o664)
        #expect(try mode("tiny/Tiny.h17p.aimodelc/weights.bin") == 0o664)
        // synth's safetensors files too.
        let synth = Process()
        synth.executableURL = URL(fileURLWithPath: "/bin/sh")
        synth.arguments = [
            "-c", #"umask 002 && exec "$0" "$@" > /dev/null"#, BuiltExporter.url.path, "synth", checkpoint.path,
            "--out",
            output.appendingPathComponent("weights").path,
        ]
        synth.environment = process.environment
        try synth.run()
        synth.waitUntilExit()
        #expect(synth.terminationStatus == 0)
        #expect(try mode("weights/model.safetensors") == 0o664)
    }

    @Test("a path too long for the staging folder fails (74) and leaves none of the folders the run made")
    func pathTooLong() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let base = try Fixtures.temporaryDirectory()
        // Folders of 200 bytes up to about 3,900 bytes; the run makes two more levels and the
        // model folder, and the staging folder's path then passes PATH_MAX (4,096).
        var existing = base
        while existing.path.utf8.count < 3_850 {
            existing = existing.appendingPathComponent(String(repeating: "d", count: 200))
        }
        try FileManager.default.createDirectory(at: existing, withIntermediateDirectories: true)
        let made = existing.appendingPathComponent(String(repeating: "e", count: 4_050 - existing.path.utf8.count))
        let output = made.appendingPathComponent("out")
        let run = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
        ])
        #expect(run.status == 74, "\(run.error)")
        #expect(run.error.hasSuffix(": file name too long\n"), "\(run.error)")
        #expect(!FileManager.default.fileExists(atPath: made.path))
        #expect(try FileManager.default.contentsOfDirectory(atPath: existing.path) == [])
        // synth and batch too, on a folder name past NAME_MAX (255 bytes).
        let folder = try Fixtures.temporaryDirectory()
        let tooLong = folder.appendingPathComponent("new1/new2/" + String(repeating: "x", count: 300)).path
        let synth = runExporter(["synth", checkpoint.path, "--out", tooLong])
        #expect(synth.status == 74)
        #expect(synth.error == "Error: cannot write '\(tooLong)': file name too long\n")
        let farm = folder.appendingPathComponent("farm.json")
        try Data(#"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "qwen3-0.6b"}]}"#.utf8).write(to: farm)
        let batch = runExporter(["batch", farm.path, "--output", tooLong])
        #expect(batch.status == 74)
        #expect(batch.error == "Error: cannot write '\(tooLong)': file name too long\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path) == ["farm.json"])
    }

    @Test("--overwrite replaces a read-only artifact (as build caches keep them) and leaves nothing of it behind")
    func overwriteReadOnlyArtifact() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        // Permissions bind a user other than root: as root, the exports run as nobody.
        let asUser = getuid() == 0 ? ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] : []
        #expect(chmod(output.path, 0o777) == 0)
        func export(_ context: String) throws -> Int32 {
            let process = Process()
            let command = asUser + [BuiltExporter.url.path]
            process.executableURL = URL(fileURLWithPath: command[0])
            process.arguments =
                Array(command.dropFirst()) + [
                    checkpoint.path, "--experimental", "--compute-precision", "float16", "--context", context,
                    "--output-dir", output.path, "--overwrite",
                ]
            process.environment = ["EXPORTER_PRESETS": Fixtures.presetsDirectory.path, "HOME": "/nonexistent-home"]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
            return process.terminationStatus
        }
        #expect(try export("256") == 0)
        let folder = output.appendingPathComponent("tiny")
        let bundle = folder.appendingPathComponent("Tiny.aimodel")
        for path in ["Tiny.aimodel/tokenizer", "Tiny.aimodel"] {
            #expect(chmod(folder.appendingPathComponent(path).path, 0o555) == 0)
        }
        #expect(try export("512") == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path) == ["Tiny.aimodel"])
        #expect(try BundleReader(url: bundle).manifest.contextLength == 512)
        // Another user's artifact it cannot make writable: refused before the export, left whole.
        guard getuid() == 0 else { return }
        let theirs = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--context", "128", "--output-dir",
            output.path, "--overwrite",
        ])
        #expect(theirs.status == 0, "\(theirs.error)")
        #expect(chmod(folder.path, 0o777) == 0)
        #expect(try export("256") == 74)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path) == ["Tiny.aimodel"])
        #expect(try BundleReader(url: bundle).manifest.contextLength == 128)
    }

    @Test("a preset without weights says where it looked and how to proceed")
    func noWeights() {
        let run = runExporter(["qwen2.5-1.5b", "--output-dir", "/nonexistent-output"])
        #expect(run.status == 66)
        #expect(
            run.error == """
                Error: no weights for 'qwen2.5-1.5b-instruct' on this machine (looked in the Hugging Face cache, models--Qwen--Qwen2.5-1.5B-Instruct); to proceed, either:
                  - download them into the Hugging Face cache: huggingface-cli download Qwen/Qwen2.5-1.5B-Instruct
                  - pass a checkpoint folder: exporter /path/to/checkpoint --preset qwen2.5-1.5b-instruct
                  - see sizes only: exporter plan qwen2.5-1.5b-instruct
                  - try the pipeline on generated weights: exporter qwen2.5-1.5b-instruct --synthetic

                """)
    }

    @Test("synth into a folder whose weights have another name: refused (73) naming them; --overwrite replaces them")
    func synthOverOtherWeights() throws {
        let config = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(), name: "Mini")
        let folder = try Fixtures.temporaryDirectory().appendingPathComponent("cons")
        #expect(runExporter(["synth", config.path, "--out", folder.path]).status == 0)
        let consolidated = folder.appendingPathComponent("consolidated.safetensors")
        try FileManager.default.moveItem(at: folder.appendingPathComponent("model.safetensors"), to: consolidated)
        let weights = try Data(contentsOf: consolidated)
        let refused = runExporter(["synth", config.path, "--out", folder.path, "--seed", "5"])
        #expect(refused.status == 73)
        #expect(refused.error == "Error: '\(consolidated.path)' already exists; pass --overwrite to replace it\n")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted() == [
                "config.json", "consolidated.safetensors",
            ])
        #expect(try Data(contentsOf: consolidated) == weights)
        #expect(runExporter(["synth", config.path, "--out", folder.path, "--seed", "5", "--overwrite"]).status == 0)
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted() == [
                "config.json", "model.safetensors",
            ])
    }

    @Test("synth writes a checkpoint that exports, and the summary names the bundle")
    func synthThenExport() throws {
        let config = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "mistral"), name: "Mini")
        let checkpoint = try Fixtures.temporaryDirectory().appendingPathComponent("Mini")
        let synth = runExporter([
            "synth", config.path, "--out", checkpoint.path, "--seed", "5", "--shard-size", "50000",
        ])
        #expect(synth.status == 0, "\(synth.error)")
        #expect(
            FileManager.default.fileExists(
                atPath: checkpoint.appendingPathComponent("model.safetensors.index.json").path))
        let synthAgain = runExporter(["synth", config.path, "--out", checkpoint.path, "--shard-size", "50000"])
        #expect(synthAgain.status == 73)
        #expect(
            synthAgain.error
                == "Error: '\(checkpoint.path)/model-00001-of-00004.safetensors' already exists; pass --overwrite to replace it\n"
        )
        #expect(
            runExporter([
                "synth", config.path, "--out", checkpoint.path, "--seed", "5", "--shard-size", "50000", "--overwrite",
            ]).status == 0)
        try Data(#"{"model": {"vocab": {"<|im_start|>": 0}}}"#.utf8).write(
            to: checkpoint.appendingPathComponent("tokenizer.json"))
        let output = try Fixtures.temporaryDirectory()
        let arguments = [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
        ]
        let run = runExporter(arguments)
        #expect(run.status == 0, "\(run.error)")
        #expect(run.output.hasPrefix("wrote \(output.path)/mini/Mini.aimodel\n"))
        #expect(run.output.contains("lowest SQNR:"))
        // The summary's bits per weight are the manifest's (the weights file's), tokenizer aside.
        let manifest = try BundleReader(url: output.appendingPathComponent("mini/Mini.aimodel")).manifest
        #expect(manifest.tokenizer?.files.isEmpty == false)
        #expect(run.output.contains(", \(Format.decimal(manifest.sizes.bitsPerWeight)) bits per weight\n"))
        let again = runExporter(arguments)
        #expect(again.status == 73)
        #expect(
            again.error == "Error: '\(output.path)/mini/Mini.aimodel' already exists; pass --overwrite to replace it\n")
        // With further steps, the refusal names the commands that run them from the bundle there.
        let steps = runExporter(arguments + ["--compile", "--min-deployment-version", "27.0", "--format", "mlpackage"])
        #expect(steps.status == 73)
        let bundle = "\(output.path)/mini/Mini.aimodel"
        #expect(
            steps.error
                == "Error: '\(bundle)' already exists; pass --overwrite to replace it\n"
                + "or keep it and run the other steps from it:\n"
                + "  exporter compile '\(bundle)' --platform iOS --min-deployment-version 27.0\n"
                + "  exporter convert '\(bundle)' --to mlpackage\n")
        // Another export's bundle there (another context): no step is suggested from it.
        let context = manifest.contextLength
        let other = runExporter(arguments + ["--compile", "--context", String(context / 2)])
        #expect(other.status == 73)
        #expect(
            other.error
                == "Error: '\(bundle)' already exists; pass --overwrite to replace it\n"
                + "it holds another export than this one (context \(context) there, \(context / 2) asked)\n")
        let elsewhere = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float32", "--output-dir", output.path,
            "--platform", "macOS", "--compression", "none",
        ])
        #expect(elsewhere.status == 73)
        #expect(
            elsewhere.error
                == "Error: '\(bundle)' already exists; pass --overwrite to replace it\n"
                + "it holds another export than this one (platform iOS there, macOS asked; compute precision float16 "
                + "there, float32 asked; compression \(manifest.compression.config) there, none asked)\n")
        // Compiled artifacts there without their bundle: refused before exporting it.
        let compileArguments = arguments + ["--compile"]
        #expect(runExporter(compileArguments + ["--overwrite"]).status == 0)
        // Every step done: no step to suggest. One compiled artifact missing: its compile alone.
        #expect(
            runExporter(compileArguments).error
                == "Error: '\(bundle)' already exists; pass --overwrite to replace it\n")
        try FileManager.default.removeItem(atPath: "\(output.path)/mini/Mini.h16p.aimodelc")
        #expect(
            runExporter(compileArguments).error
                == "Error: '\(bundle)' already exists; pass --overwrite to replace it\n"
                + "or keep it and run the other steps from it:\n"
                + "  exporter compile '\(bundle)' --platform iOS --device h16p\n")
        #expect(runExporter(compileArguments + ["--overwrite"]).status == 0)
        try FileManager.default.removeItem(atPath: bundle)
        let orphans = runExporter(compileArguments)
        #expect(orphans.status == 73)
        #expect(
            orphans.error
                == "Error: '\(output.path)/mini/Mini.h16p.aimodelc', '\(output.path)/mini/Mini.h17p.aimodelc' already "
                + "exist; pass --overwrite to replace them\n")
        #expect(!FileManager.default.fileExists(atPath: bundle))
        // A plan writes nothing: it shows the same export whether or not the artifact is there (README).
        #expect(runExporter(arguments + ["--dry-run"]).status == 0)
        #expect(runExporter(arguments + ["--overwrite"]).status == 0)
        // A finished --format mlpackage export: its package is there, so no conversion is suggested.
        #expect(runExporter(arguments + ["--format", "mlpackage", "--overwrite"]).status == 0)
        #expect(
            runExporter(arguments + ["--format", "mlpackage"]).error
                == "Error: '\(bundle)' already exists; pass --overwrite to replace it\n")
    }

    @Test(
        "--palette-search thorough and exact are recorded per palettised tensor, never lose SQNR to the standard search; other values are refused"
    )
    func paletteSearch() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        func export(_ extra: [String]) throws -> [(name: String, search: String?, sqnr: Double)] {
            let output = try Fixtures.temporaryDirectory()
            let run = runExporter(
                [checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path]
                    + extra)
            #expect(run.status == 0, "\(run.error)")
            let manifest = output.appendingPathComponent("tiny/Tiny.aimodel/manifest.json")
            let object = try #require(
                try JSONSerialization.jsonObject(with: Data(contentsOf: manifest)) as? [String: Any])
            let tensors = try #require(object["tensors"] as? [[String: Any]])
            return tensors.compactMap { tensor in
                guard let compression = tensor["compression"] as? [String: Any],
                    compression["mode"] as? String == "palettize",
                    let name = tensor["name"] as? String, let sqnr = tensor["sqnr_db"] as? Double
                else { return nil }
                return (name, compression["search"] as? String, sqnr)
            }
        }
        let standard = try export([])
        let thorough = try export(["--palette-search", "thorough"])
        let exact = try export(["--palette-search", "exact"])
        #expect(!standard.isEmpty)
        #expect(standard.allSatisfy { $0.search == nil })
        #expect(thorough.allSatisfy { $0.search == "thorough" })
        #expect(exact.allSatisfy { $0.search == "exact" })
        #expect(standard.map(\.name) == exact.map(\.name) && thorough.map(\.name) == exact.map(\.name))
        for ((short, long), best) in zip(zip(standard, thorough), exact) {
            #expect(short.sqnr <= best.sqnr && long.sqnr <= best.sqnr, "\(best.name)")
        }
        #expect(try export(["--palette-search", "standard"]).map(\.sqnr) == standard.map(\.sqnr))
        let plan = runExporter(["plan", "Qwen2.5-1.5B", "--palette-search", "exact"])
        #expect(
            plan.output.contains(
                "compression     4bit_weight_palettized_group8, embedding int8 per tensor, exact LUT search\n"))
        let thoroughPlan = runExporter(["plan", "Qwen2.5-1.5B", "--palette-search", "thorough"])
        #expect(thoroughPlan.output.contains("embedding int8 per tensor, thorough LUT search\n"))
        let refused = runExporter([checkpoint.path, "--experimental", "--palette-search", "fast"])
        #expect(refused.status == 64)
        #expect(
            refused.error.contains(
                "invalid value 'fast' for '--palette-search'; expected one of: standard, thorough, exact"))
    }

    @Test("a rule matching nothing is a warning on standard error and in the manifest, unless it says it is optional")
    func unusedRules() throws {
        // qwen3 has no biases: the shipped configs' optional *.bias rule says nothing.
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        let output = try Fixtures.temporaryDirectory()
        let base = [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
            "--overwrite",
        ]
        let shipped = runExporter(base)
        #expect(shipped.status == 0 && shipped.error.isEmpty, "\(shipped.error)")
        let bundle = output.appendingPathComponent("tiny/Tiny.aimodel")
        #expect(try BundleReader(url: bundle).manifest.warnings == [])
        let config = output.appendingPathComponent("mine.json")
        func write(_ optional: String) throws {
            try Data(
                (#"{"schema": "exporter.compression/1", "name": "mine", "rules": [{"match": "*.nothing", "mode": "keep"}, "#
                    + #"{"match": "*.bias", "mode": "keep", "optional": \#(optional)}], "#
                    + #""default": {"mode": "palettize", "bits": 4, "granularity": "per_tensor"}}"#).utf8
            ).write(to: config)
        }
        try write("true")
        let mine = runExporter(base + ["--compression-config", config.path])
        #expect(mine.status == 0)
        #expect(mine.error == "warning: compression config 'mine': rule '*.nothing' matches no tensor\n")
        #expect(
            try BundleReader(url: bundle).manifest.warnings == [
                "compression config 'mine': rule '*.nothing' matches no tensor"
            ])
        try write(#""yes""#)
        let invalid = runExporter(base + ["--compression-config", config.path])
        #expect(invalid.status == 65)
        #expect(
            invalid.error == "Error: compression config '\(config.path)': rule 2: 'optional' must be true or false\n")
    }

    @Test(
        "real weights from a folder without tokenizer files warn, in the summary, the manifest and the plan; synthetic ones do not"
    )
    func noTokenizerFiles() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3", name: "Bare")
        try FileManager.default.removeItem(at: checkpoint.appendingPathComponent("tokenizer.json"))
        let output = try Fixtures.temporaryDirectory()
        let base = [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
            "--overwrite",
        ]
        // The manifest names no folder (its name is no input of the bundle); the terminal does.
        let warning =
            "no tokenizer file in the checkpoint folder (looked for tokenizer.json, tokenizer_config.json, "
            + "special_tokens_map.json, generation_config.json, vocab.json, merges.txt, tokenizer.model, "
            + "added_tokens.json, chat_template.jinja): the bundle cannot tokenize text on a device, and its default "
            + "response budget (512 tokens) assumes no reasoning marker"
        let printed = warning.replacingOccurrences(of: "checkpoint folder (", with: "checkpoint folder 'Bare' (")
        let export = runExporter(base)
        #expect(export.status == 0)
        #expect(export.error == "warning: \(printed)\n")
        let bundle = output.appendingPathComponent("bare/Bare.aimodel")
        let manifest = try BundleReader(url: bundle).manifest
        #expect(manifest.warnings == [warning])
        #expect(manifest.tokenizer == Manifest.Tokenizer(files: [], reasoningMarker: nil, defaultResponseTokens: 512))
        #expect(runExporter(["verify", bundle.path]).status == 0)

        let plan = runExporter(["plan"] + base)
        #expect(plan.status == 0)
        #expect(plan.output.contains("\nwarning: \(printed)\n"))
        let planJSON = runExporter(["plan", "--json"] + base)
        #expect(try Manifest.decoded(from: Data(planJSON.output.utf8), path: "plan").warnings == [warning])

        // Generated weights carry no tokenizer whatever the folder holds: nothing to warn of.
        let synthetic = runExporter(base + ["--synthetic"])
        #expect(synthetic.status == 0 && synthetic.error.isEmpty, "\(synthetic.error)")
        #expect(try BundleReader(url: bundle).manifest.warnings == [])
        #expect(runExporter(["plan", "--synthetic"] + base).output.contains("warning:") == false)

        // A tokenizer file named in another case: said on the terminal, not in the manifest (no key input).
        try Data("{}".utf8).write(to: checkpoint.appendingPathComponent("Tokenizer.json"))
        let otherCase = runExporter(base)
        #expect(
            otherCase.error
                == "warning: \(printed); 'Tokenizer.json' is there, named in another case, which tokenizer libraries do "
                + "not look for\n")
        #expect(try BundleReader(url: bundle).manifest.warnings == [warning])
    }

    @Test("the same checkpoint without tokenizer files in folders of other names: equal keys, equal manifest bytes")
    func noTokenizerFilesRenamed() throws {
        let first = try Fixtures.syntheticCheckpoint(modelType: "qwen3", name: "notokA")
        try FileManager.default.removeItem(at: first.appendingPathComponent("tokenizer.json"))
        let second = first.deletingLastPathComponent().appendingPathComponent("notokB")
        try FileManager.default.copyItem(at: first, to: second)
        var manifests: [Data] = []
        for checkpoint in [first, second] {
            let output = try Fixtures.temporaryDirectory()
            let export = runExporter([
                checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-name", "Tiny",
                "--output-dir", output.path,
            ])
            #expect(export.status == 0)
            #expect(
                export.error.hasPrefix(
                    "warning: no tokenizer file in the checkpoint folder '\(checkpoint.lastPathComponent)' ("))
            manifests.append(try Data(contentsOf: output.appendingPathComponent("tiny/Tiny.aimodel/manifest.json")))
        }
        let keys = try manifests.map { try Manifest.decoded(from: $0, path: "manifest.json").buildKey }
        #expect(keys[0] != nil && keys[0] == keys[1])
        #expect(manifests[0] == manifests[1])
    }

    @Test("a checkpoint whose tensor has the wrong shape names file, tensor and both shapes")
    func wrongShape() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        var config = Fixtures.tinyConfig(modelType: "qwen3", overrides: ["intermediate_size": 96])
        config["intermediate_size"] = 96
        let data = try JSONSerialization.data(withJSONObject: config, options: [.sortedKeys])
        try data.write(to: checkpoint.appendingPathComponent("config.json"))
        let run = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir",
            try Fixtures.temporaryDirectory().path,
        ])
        #expect(run.status == 65)
        #expect(
            run.error
                == "Error: '\(checkpoint.path)/model.safetensors': tensor 'model.layers.0.mlp.gate_proj.weight' has shape "
                + "[128, 64], the config implies [96, 64]\n")
    }

    @Test(
        "--synthetic generates what a checkpoint of the config's dtype stores: the same weights as exporting `synth`'s")
    func syntheticFollowsDType() throws {
        // auto names the weights' own type, so none here: float16, as without a torch_dtype; the
        // checkpoint synth writes, whose config says auto too, exports from its headers.
        for (torchDType, dtype) in [("bfloat16", "BF16"), ("float16", "F16"), ("auto", "F16")] {
            let config = try Fixtures.checkpointDirectory(
                config: Fixtures.tinyConfig(modelType: "qwen3", overrides: ["torch_dtype": torchDType]), name: "Small")
            let root = try Fixtures.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: root) }
            let flags = ["--experimental", "--compute-precision", "float16"]
            let direct = runExporter(
                [config.path, "--synthetic", "--seed", "7", "--output-dir", root.appendingPathComponent("direct").path]
                    + flags)
            #expect(direct.status == 0, "\(direct.error)")
            let checkpoint = root.appendingPathComponent("checkpoint/Small")
            let synth = runExporter(["synth", config.path, "--out", checkpoint.path, "--dtype", dtype, "--seed", "7"])
            #expect(synth.status == 0, "\(synth.error)")
            let exported = runExporter(
                [checkpoint.path, "--output-dir", root.appendingPathComponent("exported").path] + flags)
            #expect(exported.status == 0, "\(exported.error)")
            let bundles = ["direct", "exported"].map { root.appendingPathComponent("\($0)/small/Small.aimodel") }
            let weights = try bundles.map { try Data(contentsOf: $0.appendingPathComponent("weights.bin")) }
            #expect(weights[0] == weights[1], "\(torchDType)")
            let manifests = try bundles.map { try BundleReader(url: $0).manifest }
            #expect(manifests[0].tensors.map(\.sqnrDB) == manifests[1].tensors.map(\.sqnrDB))
            #expect(manifests.map(\.model.weights) == ["synthetic", "checkpoint"])
        }
    }

    @Test(
        "progress: on a terminal, tensors, megabytes of the weights file, rate and ETA, cleared at the end; silent in a pipe"
    )
    func progressBar() throws {
        let config = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "qwen3"), name: "Small")
        for terminal in [true, false] {
            let output = try Fixtures.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: output) }
            let run = runExporter(
                [
                    config.path, "--experimental", "--compute-precision", "float16", "--synthetic", "--output-dir",
                    output.path,
                ],
                terminal: terminal)
            #expect(run.status == 0, "\(run.error)")
            guard terminal else {
                #expect(run.error.isEmpty, "\(run.error)")
                continue
            }
            let bundle = output.appendingPathComponent("small/Small.aimodel")
            let tensors = try BundleReader(url: bundle).manifest.tensors.count
            let weightsBytes = try #require(
                try FileManager.default.attributesOfItem(atPath: bundle.appendingPathComponent("weights.bin").path)[
                    .size]
                    as? Int)
            let lines = run.error.split(separator: "\r", omittingEmptySubsequences: true).map(String.init)
            let last = try #require(lines.last { $0.contains("tensors") })
            #expect(
                last.contains(
                    "100%  \(tensors)/\(tensors) tensors  \(ProgressBar.bytes(weightsBytes, of: weightsBytes))  "),
                "\(last)")
            #expect(last.contains("M params/s  ETA 0s"), "\(last)")
            #expect(run.error.hasSuffix("\r\u{1B}[K"), "the bar is cleared before the summary")
        }
    }

    @Test("synth: on a terminal, bytes and tensors written, cleared at the end; silent in a pipe")
    func synthProgress() throws {
        let config = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "qwen3"), name: "Small")
        for terminal in [true, false] {
            let out = try Fixtures.temporaryDirectory().appendingPathComponent("Small")
            defer { try? FileManager.default.removeItem(at: out) }
            let run = runExporter(["synth", config.path, "--out", out.path], terminal: terminal)
            #expect(run.status == 0, "\(run.error)")
            guard terminal else {
                #expect(run.error.isEmpty, "\(run.error)")
                continue
            }
            let weights = try CheckpointWeights(directory: out)
            let bytes = weights.tensors.values.reduce(0) { $0 + $1.byteRange.count }
            let tensors = weights.tensorNames.count
            let last = try #require(run.error.split(separator: "\r").map(String.init).last { $0.contains("%") })
            #expect(
                last.contains("100%  \(ProgressBar.bytes(bytes, of: bytes))  \(tensors)/\(tensors) tensors  ETA 0s"),
                "\(last)")
            #expect(run.error.hasSuffix("\r\u{1B}[K"))
        }
    }

    @Test("synth --out naming a file, or a folder under a file, is a write failure naming the path (74)")
    func synthOutIsAFile() throws {
        let config = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "qwen3"), name: "Small")
        let file = try Fixtures.temporaryDirectory().appendingPathComponent("taken")
        try Data("x".utf8).write(to: file)
        let run = runExporter(["synth", config.path, "--out", file.path])
        #expect(run.status == 74)
        #expect(run.error == "Error: cannot write '\(file.path)': a file is there, not a folder\n")
        let below = file.appendingPathComponent("sub/Small")
        let nested = runExporter(["synth", config.path, "--out", below.path])
        #expect(nested.status == 74)
        #expect(nested.error == "Error: cannot write '\(below.path)': '\(file.path)' is a file, not a folder\n")
        #expect(try String(contentsOf: file, encoding: .utf8) == "x")
    }

    @Test("a progress line draws nothing once finished and cleared, and nothing at all off a terminal")
    func progressAfterFinish() {
        for terminal in [true, false] {
            let error = TextSink()
            let context = CommandContext(
                arguments: [], environment: [:], currentDirectory: URL(fileURLWithPath: "/"),
                executable: URL(fileURLWithPath: "/nonexistent/exporter"), writeOutput: { _ in },
                writeError: error.append,
                errorIsTerminal: terminal)
            let bar = ProgressBar(context: context)
            bar.update(WorkProgress(done: 0, total: 4, stage: "step"))
            bar.update(WorkProgress(done: 4, total: 4, stage: "step"))
            bar.update(WorkProgress(done: 4, total: 4, stage: "again"))
            // Each line erases the one before it; the last is erased once drawn.
            let expected =
                "\r\u{1B}[K░░░░░░░░░░░░░░░░░░░░░░░░   0%  step  ETA -- "
                + "\r\u{1B}[K████████████████████████ 100%  step  ETA 0s \r\u{1B}[K"
            #expect(error.text == (terminal ? expected : ""))
        }
    }

    @Test("the summary's lowest SQNR lists the three lowest, lowest first, ties by name, tensors without one left out")
    func lowestSQNR() throws {
        var manifest = Manifest(plan: try Fixtures.plan(try Fixtures.syntheticCheckpoint()))
        let names = manifest.tensors.map(\.name)
        #expect(names.count > 5)
        let measured: [String: Double] = [names[0]: 30, names[1]: 12.5, names[2]: 40, names[3]: 12.5, names[4]: 20]
        for index in manifest.tensors.indices { manifest.tensors[index].sqnrDB = measured[names[index]] }
        let tied = [names[1], names[3]].sorted()
        #expect(
            ExportSummary.worstSQNR(manifest, count: 3).map { "\($0.name) \($0.sqnr)" } == [
                "\(tied[0]) 12.5", "\(tied[1]) 12.5", "\(names[4]) 20.0",
            ])
    }

    @Test("progress sizes: the unit keeps the total under 1,000, one decimal below 100")
    func progressBytes() {
        #expect(ProgressBar.bytes(412_000_000, of: 891_594_527) == "412/892 MB")
        #expect(ProgressBar.bytes(1_234_000_000, of: 3_900_000_000) == "1.2/3.9 GB")
        #expect(ProgressBar.bytes(512, of: 4096) == "0.5/4.1 kB")
        #expect(ProgressBar.bytes(10, of: 999) == "10/999 B")
        #expect(ProgressBar.bytes(0, of: 0) == "0/0 B")
        #expect(ProgressBar.bytes(150_000_000_000, of: 150_000_000_000) == "150/150 GB")
    }

    @Test("--synthetic exports a preset's exact shapes, marked synthetic in the manifest")
    func syntheticPreset() throws {
        let output = try Fixtures.temporaryDirectory()
        let config = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "qwen3"), name: "Small")
        let run = runExporter([
            config.path, "--experimental", "--compute-precision", "float16", "--synthetic", "--output-dir", output.path,
        ])
        #expect(run.status == 0, "\(run.error)")
        #expect(run.output.contains("SYNTHETIC WEIGHTS"))
        let manifest = try BundleReader(url: output.appendingPathComponent("small/Small.aimodel")).manifest
        #expect(manifest.model.weights == "synthetic")
        #expect(manifest.tokenizer == nil)
        #expect(manifest.model.source.files.isEmpty)
    }
}

@Suite("command line: Hugging Face cache")
struct HuggingFaceCacheCommandTests {
    /// A cache holding `Org/Name` at one revision, files linked into `blobs/` as the hub does.
    private func cache(repo: String, checkpoint: URL) throws -> URL {
        let home = try Fixtures.temporaryDirectory("hf-home")
        let repoFolder = home.appendingPathComponent("hub/models--" + repo.replacingOccurrences(of: "/", with: "--"))
        let revision = "0123456789abcdef0123456789abcdef01234567"
        let snapshot = repoFolder.appendingPathComponent("snapshots/\(revision)")
        let blobs = repoFolder.appendingPathComponent("blobs")
        try FileManager.default.createDirectory(at: snapshot, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: blobs, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(
            at: repoFolder.appendingPathComponent("refs"), withIntermediateDirectories: true)
        try Data((revision + "\n").utf8).write(to: repoFolder.appendingPathComponent("refs/main"))
        for (index, name) in try FileManager.default.contentsOfDirectory(atPath: checkpoint.path).sorted().enumerated()
        {
            let blob = blobs.appendingPathComponent("blob\(index)")
            try FileManager.default.copyItem(at: checkpoint.appendingPathComponent(name), to: blob)
            try FileManager.default.createSymbolicLink(
                atPath: snapshot.appendingPathComponent(name).path, withDestinationPath: "../../blobs/blob\(index)")
        }
        return home
    }

    @Test("a weights file missing from a cache snapshot is refused with how to finish the download")
    func unfinishedDownloadOfSnapshot() throws {
        let sharded = try Fixtures.syntheticCheckpoint(modelType: "qwen3", shardBytes: 40_000)
        let home = try cache(repo: "Acme/Tiny-Qwen3", checkpoint: sharded)
        let snapshot = home.appendingPathComponent(
            "hub/models--Acme--Tiny-Qwen3/snapshots/0123456789abcdef0123456789abcdef01234567")
        // An interrupted download makes no link for the shards it did not get.
        let shard = "model-00002-of-00006.safetensors"
        try FileManager.default.removeItem(at: snapshot.appendingPathComponent(shard))
        let index = try JSONSerialization.jsonObject(
            with: Data(contentsOf: snapshot.appendingPathComponent("model.safetensors.index.json")))
        let weightMap = (index as? [String: Any])?["weight_map"] as? [String: String] ?? [:]
        let firstTensor = try #require(weightMap.filter { $0.value == shard }.keys.min())
        let arguments = ["Acme/Tiny-Qwen3", "--experimental", "--compute-precision", "float16"]
        let out = try Fixtures.temporaryDirectory()
        let hint =
            "; the download of Acme/Tiny-Qwen3 looks unfinished: finish it (huggingface-cli download Acme/Tiny-Qwen3)"
        let missingShard =
            "'\(snapshot.path)/model.safetensors.index.json': shard '\(shard)' of tensor '\(firstTensor)' does not exist"
        for command in [arguments + ["--output-dir", out.path], ["plan"] + arguments] {
            let run = runExporter(command, environment: ["HF_HOME": home.path])
            #expect(run.status == 66)
            #expect(run.error == "Error: \(missingShard)\(hint)\n")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: out.path).isEmpty)
        // A farm's job says it too, from the farm's own look at the checkpoint.
        let farm = home.appendingPathComponent("farm.json")
        try Data(
            #"{"schema": "exporter.farm/1", "jobs": [{"name": "t", "model": "Acme/Tiny-Qwen3", "experimental": true, "compute_precision": "float16"}]}"#
                .utf8
        ).write(to: farm)
        let batch = try BuiltExporter.run(
            ["batch", farm.path, "--output", out.appendingPathComponent("farm").path],
            environment: ["HF_HOME": home.path])
        #expect(batch.status == 1)
        let report = try JSONDecoder().decode(
            FarmReport.self, from: Data(contentsOf: out.appendingPathComponent("farm/farm-report.json")))
        #expect(report.jobs.first?.exitStatus == 66)
        #expect(report.jobs.first?.error?.hasSuffix(hint) == true, "\(report.jobs)")
        // The same checkpoint as a folder of its own: no download to finish, no hint.
        try FileManager.default.removeItem(at: sharded.appendingPathComponent(shard))
        let folder = runExporter(["plan", sharded.path, "--experimental", "--compute-precision", "float16"])
        #expect(folder.status == 66)
        #expect(
            folder.error
                == "Error: '\(sharded.path)/model.safetensors.index.json': shard '\(shard)' of tensor '\(firstTensor)' "
                + "does not exist\n")
        // A single weights file whose blob is not there yet: a link to nothing.
        let single = try cache(
            repo: "Acme/Tiny-Qwen3", checkpoint: try Fixtures.syntheticCheckpoint(modelType: "qwen3"))
        let link = single.appendingPathComponent(
            "hub/models--Acme--Tiny-Qwen3/snapshots/0123456789abcdef0123456789abcdef01234567/model.safetensors")
        let blob = try FileManager.default.destinationOfSymbolicLink(atPath: link.path)
        try FileManager.default.removeItem(at: link.deletingLastPathComponent().appendingPathComponent(blob))
        let dangling = runExporter(
            arguments + ["--output-dir", out.appendingPathComponent("single").path],
            environment: ["HF_HOME": single.path])
        #expect(dangling.status == 66)
        #expect(
            dangling.error == "Error: cannot open '\(link.path)': a symbolic link to a file that is not there\(hint)\n")
    }

    @Test("an org/model id in the cache exports, with its revision and file sizes in the manifest")
    func exportFromCache() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        let home = try cache(repo: "Acme/Tiny-Qwen3", checkpoint: checkpoint)
        let output = try Fixtures.temporaryDirectory()
        let run = runExporter(
            ["Acme/Tiny-Qwen3", "--experimental", "--compute-precision", "float16", "--output-dir", output.path],
            environment: ["HF_HOME": home.path])
        #expect(run.status == 0, "\(run.error)")
        let manifest = try BundleReader(url: output.appendingPathComponent("tiny-qwen3/Tiny-Qwen3.aimodel")).manifest
        #expect(manifest.model.source.kind == "huggingface-cache")
        #expect(manifest.model.source.repoID == "Acme/Tiny-Qwen3")
        #expect(manifest.model.source.revision == "0123456789abcdef0123456789abcdef01234567")
        let size =
            try FileManager.default.attributesOfItem(
                atPath: checkpoint.appendingPathComponent("model.safetensors").path)[.size] as? Int
        #expect(manifest.model.source.files.map(\.name) == ["model.safetensors"])
        #expect(manifest.model.source.files.map(\.bytes) == [try #require(size)])
        #expect(manifest.model.source.files.first?.fingerprint?.hasPrefix("\(try #require(size)):") == true)
        #expect(manifest.tokenizer?.reasoningMarker == nil)
        #expect(manifest.tokenizer?.defaultResponseTokens == 512)
        // verify and eval take the same id for --against.
        let bundle = output.appendingPathComponent("tiny-qwen3/Tiny-Qwen3.aimodel").path
        let verify = runExporter(
            ["verify", bundle, "--against", "Acme/Tiny-Qwen3", "--json"], environment: ["HF_HOME": home.path])
        #expect(verify.status == 0, "\(verify.error) \(verify.output)")
        #expect(verify.output.contains("\"sqnr_db\""))
        let eval = runExporter(
            ["eval", bundle, "--against", "Acme/Tiny-Qwen3", "--tokens", "1,2,3"], environment: ["HF_HOME": home.path])
        #expect(eval.status == 0, "\(eval.error)")
        // refs/main moved on to a new revision since the export: the warning says so.
        let repository = home.appendingPathComponent("hub/models--Acme--Tiny-Qwen3")
        let newer = repository.appendingPathComponent("snapshots/fedcba9876543210fedcba9876543210fedcba98")
        try FileManager.default.createDirectory(at: newer, withIntermediateDirectories: true)
        let retrained = try Fixtures.syntheticCheckpoint(modelType: "qwen3", seed: 9)
        for name in try FileManager.default.contentsOfDirectory(atPath: retrained.path) {
            try FileManager.default.copyItem(
                at: retrained.appendingPathComponent(name), to: newer.appendingPathComponent(name))
        }
        try Data(newer.lastPathComponent.utf8).write(to: repository.appendingPathComponent("refs/main"))
        let moved = runExporter(
            ["verify", bundle, "--against", "Acme/Tiny-Qwen3"], environment: ["HF_HOME": home.path])
        #expect(
            moved.error.hasPrefix(
                "warning: the checkpoint is not the one this artifact was exported from: 'model.safetensors' differs "
                    + "from the file its manifest records (it was exported from revision 0123456789ab; this is "
                    + "revision fedcba987654)\n"), "\(moved.error)")
        try Data("0123456789abcdef0123456789abcdef01234567".utf8).write(
            to: repository.appendingPathComponent("refs/main"))
        // The snapshot folder given by its path: its links into blobs/ stay inside the repository,
        // and it is named and recorded as the id: the same bundle.
        let snapshot = home.appendingPathComponent(
            "hub/models--Acme--Tiny-Qwen3/snapshots/0123456789abcdef0123456789abcdef01234567")
        let byPath = try Fixtures.temporaryDirectory()
        let run2 = runExporter(
            [snapshot.path, "--experimental", "--compute-precision", "float16", "--output-dir", byPath.path])
        #expect(run2.status == 0, "\(run2.error)")
        func files(_ root: URL) throws -> [String: Data] {
            let bundle = root.appendingPathComponent("tiny-qwen3/Tiny-Qwen3.aimodel")
            let names = try FileManager.default.subpathsOfDirectory(atPath: bundle.path).filter {
                var isFolder: ObjCBool = false
                return FileManager.default.fileExists(
                    atPath: bundle.appendingPathComponent($0).path, isDirectory: &isFolder) && !isFolder.boolValue
            }
            return try Dictionary(
                uniqueKeysWithValues: names.map { ($0, try Data(contentsOf: bundle.appendingPathComponent($0))) })
        }
        let (viaID, viaPath) = (try files(output), try files(byPath))
        #expect(viaID.count >= 4 && viaID == viaPath)
        // And by a link to the snapshot folder.
        let link = try Fixtures.temporaryDirectory().appendingPathComponent("snaplink")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: snapshot)
        let byLink = try Fixtures.temporaryDirectory()
        let run3 = runExporter(
            [link.path, "--experimental", "--compute-precision", "float16", "--output-dir", byLink.path])
        #expect(run3.status == 0, "\(run3.error)")
        #expect(try files(byLink) == viaID)
        // Refused as its id is refused: by the id, in the reference tool's words.
        let refused = runExporter([snapshot.path, "--output-dir", byPath.path])
        #expect(refused.status == 69)
        #expect(
            refused.error.hasPrefix(
                "Error: 'Acme/Tiny-Qwen3' has no registry preset. Pass --experimental to try exporting it anyway "
                    + "(requires --compute-precision).\n"), "\(refused.error)")
        let noPrecision = runExporter([snapshot.path, "--experimental", "--output-dir", byPath.path])
        #expect(
            noPrecision.error.hasPrefix(
                "Error: --compute-precision is required for 'Acme/Tiny-Qwen3' (no registry preset found).\n"))
    }

    @Test("a preset's repo in the cache exports with the preset")
    func presetFromCache() throws {
        // A checkpoint with the Qwen3-0.6B config but tiny weights would not validate; the plan is enough here.
        let config = try Fixtures.checkpointDirectory(
            config: try JSONSerialization.jsonObject(
                with: Data(
                    contentsOf: Fixtures.presetsDirectory.appendingPathComponent("checkpoints/Qwen3-0.6B/config.json")))
                as? [String: Any] ?? [:])
        let home = try cache(repo: "Qwen/Qwen3-0.6B", checkpoint: config)
        let run = runExporter(["plan", "Qwen3-0.6B", "--json"], environment: ["HF_HOME": home.path])
        #expect(run.status == 0)
        let json = try #require(try JSONParser.parse(Array(run.output.utf8)).objectValue)
        let source = json["model"]?.objectValue?["source"]?.objectValue
        #expect(source?["kind"]?.stringValue == "huggingface-cache")
        #expect(source?["revision"]?.stringValue == "0123456789abcdef0123456789abcdef01234567")
        #expect(json["model"]?.objectValue?["preset"]?.stringValue == "qwen3-0.6b")
        // Its snapshot folder given by its path gets the preset too, as the id does: the same plan.
        let snapshot = home.appendingPathComponent(
            "hub/models--Qwen--Qwen3-0.6B/snapshots/0123456789abcdef0123456789abcdef01234567")
        let byPath = runExporter(["plan", snapshot.path, "--json"], environment: ["HF_HOME": home.path])
        #expect(byPath.status == 0, "\(byPath.error)")
        // All but the memory this machine has free, which changes from one run to the next.
        func machineFree(_ output: String) -> String {
            output.replacingOccurrences(
                of: #""available_bytes" : [0-9]+"#, with: "", options: .regularExpression)
        }
        #expect(machineFree(byPath.output) == machineFree(run.output))
        #expect(machineFree(byPath.output) != byPath.output)
    }

    @Test("verify's warning names both revisions only when the checkpoint is another snapshot of a cache")
    func revisionsOfAnotherCheckpoint() throws {
        let home = try cache(
            repo: "Acme/Tiny-Qwen3", checkpoint: try Fixtures.syntheticCheckpoint(modelType: "qwen3"))
        let output = try Fixtures.temporaryDirectory()
        let environment = ["HF_HOME": home.path]
        let run = runExporter(
            ["Acme/Tiny-Qwen3", "--experimental", "--compute-precision", "float16", "--output-dir", output.path],
            environment: environment)
        #expect(run.status == 0, "\(run.error)")
        let bundle = output.appendingPathComponent("tiny-qwen3/Tiny-Qwen3.aimodel").path
        let retrained = try Fixtures.syntheticCheckpoint(modelType: "qwen3", seed: 9)
        func copyRetrained(to folder: URL) throws {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            for name in try FileManager.default.contentsOfDirectory(atPath: retrained.path) {
                try FileManager.default.copyItem(
                    at: retrained.appendingPathComponent(name), to: folder.appendingPathComponent(name))
            }
        }
        func warning(against checkpoint: URL) -> String {
            let verify = runExporter(["verify", bundle, "--against", checkpoint.path], environment: environment)
            return String(verify.error.split(separator: "\n").first ?? "")
        }
        let differs =
            "warning: the checkpoint is not the one this artifact was exported from: 'model.safetensors' differs "
            + "from the file its manifest records"
        // Another snapshot of the cache, given by a link to it: its revision is the link's target's.
        let newer = home.appendingPathComponent(
            "hub/models--Acme--Tiny-Qwen3/snapshots/fedcba9876543210fedcba9876543210fedcba98")
        try copyRetrained(to: newer)
        let link = output.appendingPathComponent("newer")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: newer)
        #expect(
            warning(against: link)
                == differs + " (it was exported from revision 0123456789ab; this is revision fedcba987654)")
        // The exported revision's folder in another cache, and a folder of no cache: no revisions to name.
        let sameRevision = try Fixtures.temporaryDirectory("hf-hub").appendingPathComponent(
            "models--Acme--Tiny-Qwen3/snapshots/0123456789abcdef0123456789abcdef01234567")
        try copyRetrained(to: sameRevision)
        #expect(warning(against: sameRevision) == differs)
        let folder = try Fixtures.temporaryDirectory().appendingPathComponent("retrained")
        try copyRetrained(to: folder)
        #expect(warning(against: folder) == differs)
    }

    @Test(
        "a preset whose cache folder has no snapshot is refused as such, by an export and a farm's \"if-missing\" too")
    func presetWithUnfinishedDownload() throws {
        // What an interrupted download of a new revision leaves: refs/main names a snapshot not there yet.
        let hub = try Fixtures.temporaryDirectory().appendingPathComponent("hub")
        let repository = hub.appendingPathComponent("models--Qwen--Qwen3-0.6B")
        try FileManager.default.createDirectory(
            at: repository.appendingPathComponent("refs"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(
            at: repository.appendingPathComponent("snapshots/1111111111111111111111111111111111111111"),
            withIntermediateDirectories: true)
        let revision = String(repeating: "9", count: 40)
        try Data(revision.utf8).write(to: repository.appendingPathComponent("refs/main"))
        let environment = ["HF_HUB_CACHE": hub.path]
        let reason =
            "refs/main names revision \(revision), which has no snapshot folder "
            + "'\(repository.path)/snapshots/\(revision)'"
        let out = try Fixtures.temporaryDirectory()
        let export = runExporter(["qwen3-0.6b", "--output-dir", out.path], environment: environment)
        #expect(export.status == 66)
        #expect(
            export.error
                == "Error: the Hugging Face cache holds Qwen/Qwen3-0.6B for 'qwen3-0.6b', but no snapshot of it to "
                + "read: \(reason); finish its download (huggingface-cli download Qwen/Qwen3-0.6B), or pass the "
                + "folder of a snapshot to export\n")
        let plan = runExporter(["plan", "qwen3-0.6b"], environment: environment)
        #expect(plan.status == 0)
        #expect(
            plan.output.contains(
                "preset config of Qwen/Qwen3-0.6B (its Hugging Face cache folder has no snapshot to read)"))
        let refusal =
            "an export would fail: the Hugging Face cache holds Qwen/Qwen3-0.6B for 'qwen3-0.6b', but no snapshot of it "
            + "to read: \(reason); finish its download (huggingface-cli download Qwen/Qwen3-0.6B), or pass the folder of "
            + "a snapshot to export"
        #expect(plan.output.contains("\nwarning: \(refusal)\n"), "\(plan.output)")
        let planJSON = runExporter(["plan", "qwen3-0.6b", "--json"], environment: environment)
        let warnings = try JSONParser.parse(Array(planJSON.output.utf8)).objectValue?["warnings"]?.arrayValue
        #expect(warnings?.compactMap(\.stringValue).contains(refusal) == true)
        let farm = out.appendingPathComponent("farm.json")
        try Data(
            #"{"schema": "exporter.farm/1", "jobs": [{"name": "q", "model": "qwen3-0.6b", "synthetic": "if-missing"}]}"#
                .utf8
        ).write(to: farm)
        let batch = try BuiltExporter.run(
            ["batch", farm.path, "--output", out.appendingPathComponent("farm").path], environment: environment)
        #expect(batch.status == 1)
        let report = try JSONDecoder().decode(
            FarmReport.self, from: Data(contentsOf: out.appendingPathComponent("farm/farm-report.json")))
        #expect(report.jobs.map(\.status) == ["failed"])
        #expect(report.jobs.first?.exitStatus == 66)
        #expect(
            report.jobs.first?.error
                == "the Hugging Face cache holds Qwen/Qwen3-0.6B for 'qwen3-0.6b', but no snapshot of it to read: "
                + "\(reason); finish its download (huggingface-cli download Qwen/Qwen3-0.6B), or pass the folder of a "
                + "snapshot to export")
        // Without the folder, a download never made: the weights "if-missing" generates.
        #expect(ModelSource.presetConfigOnly(repoID: "Qwen/Qwen3-0.6B").weightsAbsent)
        #expect(!ModelSource.presetConfigOnly(repoID: "Qwen/Qwen3-0.6B", cacheProblem: reason).weightsAbsent)
        #expect(!ModelSource.directory(out).weightsAbsent)
    }
}

@Suite("command line: Core ML packages in inspect and verify")
struct MLPackageCommandTests {
    @Test("inspect and verify read an .mlpackage; a flipped blob byte fails verify naming the file")
    func inspectAndVerify() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        let output = try Fixtures.temporaryDirectory()
        let export = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
            "--format", "mlpackage",
        ])
        #expect(export.status == 0, "\(export.error)")
        let package = output.appendingPathComponent("tiny/Tiny.mlpackage")
        let inspect = runExporter(["inspect", package.path])
        #expect(inspect.status == 0, "\(inspect.error)")
        #expect(inspect.output.hasPrefix("Tiny  (Core ML package, qwen3)\n"))
        #expect(inspect.output.contains("  source    Tiny.aimodel\n"))
        let verify = runExporter(["verify", package.path])
        #expect(verify.status == 0, "\(verify.error) \(verify.output)")
        #expect(verify.output.hasPrefix("verified \(package.path): "))
        #expect(verify.output.contains("tensors equal to Tiny.aimodel's bit for bit"))
        // Comparing with the checkpoint is the bundle's verify: asked of a package, it is refused, not skipped.
        for option in [["--against", checkpoint.path], ["--run"], ["--min-logit-snr", "3"]] {
            let refused = runExporter(["verify", package.path] + option)
            #expect(refused.status == 64)
            #expect(
                refused.error.hasPrefix(
                    "Error: \(option[0]) does not apply to a Core ML package; verify the bundle it was converted from "
                        + "with it\nUsage: exporter verify <artifact> [<options>]\n"), "\(refused.error)")
        }
        let bundle = output.appendingPathComponent("tiny/Tiny.aimodel")
        let notPackage = runExporter(["verify", bundle.path, "--bundle", bundle.path])
        #expect(notPackage.status == 64)
        #expect(notPackage.error.hasPrefix("Error: --bundle applies to a Core ML package (.mlpackage) only\nUsage: "))
        // Away from its bundle it says what it did not compare.
        let alone = try Fixtures.temporaryDirectory().appendingPathComponent("Tiny.mlpackage")
        try FileManager.default.copyItem(at: package, to: alone)
        #expect(
            runExporter(["verify", alone.path]).output.hasSuffix(
                "; not compared with a bundle (none beside it: pass --bundle)\n"))
        let weights = package.appendingPathComponent("Data/com.apple.CoreML/weights/weight.bin")
        var bytes = try Data(contentsOf: weights)
        bytes[bytes.count - 1] ^= 0x01
        try bytes.write(to: weights)
        let broken = runExporter(["verify", package.path])
        #expect(broken.status == 1)
        #expect(broken.error.hasPrefix("Error: 'Data/com.apple.CoreML/weights/weight.bin': CRC-32 is "))
        let brokenJSON = runExporter(["verify", package.path, "--json"])
        #expect(brokenJSON.status == 1)
        let root = try #require(try JSONParser.parse(Array(brokenJSON.output.utf8)).objectValue)
        #expect(root["passed"]?.boolValue == false)
        #expect(root["failures"]?.arrayValue?.count == 1)
        #expect(root["bundle"]?.stringValue == output.appendingPathComponent("tiny/Tiny.aimodel").path)
    }

    @Test(
        "--json: an export prints what it wrote and every manifest; convert its package; nothing else on standard output"
    )
    func exportJSON() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        let output = try Fixtures.temporaryDirectory()
        let run = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
            "--compile", "--format", "mlpackage", "--json",
        ])
        #expect(run.status == 0, "\(run.error)")
        let root = try #require(try JSONParser.parse(Array(run.output.utf8)).objectValue)
        #expect(root.keys.sorted() == ["bundle", "compiled", "manifest", "mlpackage"])
        let folder = output.appendingPathComponent("tiny")
        #expect(root["bundle"]?.stringValue == folder.appendingPathComponent("Tiny.aimodel").path)
        let written = try Data(contentsOf: folder.appendingPathComponent("Tiny.aimodel/manifest.json"))
        #expect(root["manifest"] == (try JSONParser.parse(Array(written))))
        let compiled = try #require(root["compiled"]?.arrayValue)
        #expect(
            compiled.compactMap { $0.objectValue?["artifact"]?.stringValue }
                == ["h16p", "h17p"].map {
                    folder.appendingPathComponent("Tiny.\($0).aimodelc").path
                })
        #expect(
            root["mlpackage"]?.objectValue?["package"]?.stringValue
                == folder.appendingPathComponent("Tiny.mlpackage").path)
        let plain = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
            "--overwrite", "--json",
        ])
        let plainRoot = try #require(try JSONParser.parse(Array(plain.output.utf8)).objectValue)
        #expect(plainRoot["compiled"]?.arrayValue == [])
        #expect(plainRoot["mlpackage"] == .null)
        let convert = runExporter([
            "convert", folder.appendingPathComponent("Tiny.aimodel").path, "--overwrite", "--json",
        ])
        #expect(convert.status == 0, "\(convert.error)")
        let converted = try #require(try JSONParser.parse(Array(convert.output.utf8)).objectValue)
        #expect(converted["tensors_compared"]?.intValue ?? 0 > 0)
        #expect(converted["manifest"]?.objectValue?["schema"]?.stringValue == "exporter.mlpackage/1")
    }

    @Test("--min-deployment-version without --compile is refused, not ignored; a failed first export leaves no folder")
    func strayFlagAndEmptyFolder() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let base = [checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path]
        for extra in [[], ["--dry-run"]] {
            let run = runExporter(base + ["--min-deployment-version", "28.0"] + extra)
            #expect(run.status == 64)
            #expect(run.error.hasPrefix("Error: --min-deployment-version applies to --compile; pass --compile too\n"))
        }
        // NaN in a weight: the export fails after creating the model's folder, and removes it.
        try Fixtures.setValues([(index: 3, value: .nan)], of: "model.layers.0.mlp.up_proj.weight", in: checkpoint)
        let failed = runExporter(base)
        #expect(failed.status == 65, "\(failed.error)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == [])
        for extra in [[], ["--dry-run"]] {
            let seed = runExporter(base + ["--seed", "5"] + extra)
            #expect(seed.status == 64)
            #expect(seed.error.hasPrefix("Error: --seed applies to --synthetic weights; pass --synthetic too\n"))
        }
    }

    @Test("a token the tokenizer adds beyond the embedding's rows is a warning, on standard error and in the manifest")
    func addedTokenBeyondEmbedding() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let base = [checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path]
        let warning =
            "tokenizer: tokenizer.json adds token '<|pad|>' with id 256, beyond the embedding's 256 rows "
            + "(vocab_size): fed to the model on a device, it reads outside the table; resize the embedding or remove "
            + "the token"
        for (id, warns) in [(255, false), (256, true)] {
            try Data(#"{"added_tokens": [{"id": \#(id), "content": "<|pad|>"}], "model": {"vocab": {}}}"#.utf8)
                .write(to: checkpoint.appendingPathComponent("tokenizer.json"))
            let run = runExporter(base + ["--overwrite"])
            #expect(run.status == 0, "\(run.error)")
            #expect(run.error.contains("warning: " + warning) == warns)
            let manifest = try BundleReader(url: output.appendingPathComponent("tiny/Tiny.aimodel")).manifest
            #expect(manifest.warnings.contains(warning) == warns)
            let plan = runExporter(["plan"] + base)
            #expect(plan.output.contains(warning) == warns)
        }
        // A long token is quoted by its first 40 characters.
        let long = String(repeating: "ab", count: 500)
        try Data(#"{"added_tokens": [{"id": 300, "content": "\#(long)"}], "model": {"vocab": {}}}"#.utf8)
            .write(to: checkpoint.appendingPathComponent("tokenizer.json"))
        #expect(
            runExporter(["plan"] + base).output.contains(
                "tokenizer: tokenizer.json adds token '\(String(repeating: "ab", count: 20))…' with id 300, beyond"))
    }

    @Test("a base vocabulary with ids beyond the embedding's rows is a warning, as an added token is")
    func vocabularyBeyondEmbedding() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let base = [checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path]
        func warning(_ file: String) -> String {
            "tokenizer: the vocabulary of \(file) has ids up to 256, beyond the embedding's 256 rows (vocab_size): "
                + "fed to the model on a device, they read outside the table; ship the checkpoint's own tokenizer"
        }
        let tokenizer = checkpoint.appendingPathComponent("tokenizer.json")
        for (highest, warns) in [(255, false), (256, true)] {
            let entries = (0...highest).map { #""t\#($0)": \#($0)"# }.joined(separator: ", ")
            try Data(#"{"added_tokens": [], "model": {"type": "BPE", "vocab": {\#(entries)}, "merges": []}}"#.utf8)
                .write(to: tokenizer)
            let run = runExporter(base + ["--overwrite"])
            #expect(run.status == 0, "\(run.error)")
            #expect(run.error.contains("warning: " + warning("tokenizer.json")) == warns, "\(run.error)")
            let manifest = try BundleReader(url: output.appendingPathComponent("tiny/Tiny.aimodel")).manifest
            #expect(manifest.warnings.contains(warning("tokenizer.json")) == warns)
            #expect(runExporter(["plan"] + base).output.contains(warning("tokenizer.json")) == warns)
        }
        // A GPT-2 style vocab.json, and a Unigram vocabulary, whose ids are positions.
        try FileManager.default.removeItem(at: tokenizer)
        try Data(#"{"a": 3, "b": 256}"#.utf8).write(to: checkpoint.appendingPathComponent("vocab.json"))
        #expect(runExporter(["plan"] + base).output.contains(warning("vocab.json")))
        try FileManager.default.removeItem(at: checkpoint.appendingPathComponent("vocab.json"))
        let pieces = (0...256).map { #"["p\#($0)", -1.5]"# }.joined(separator: ", ")
        try Data(#"{"model": {"type": "Unigram", "vocab": [\#(pieces)]}}"#.utf8).write(to: tokenizer)
        #expect(runExporter(["plan"] + base).output.contains(warning("tokenizer.json")))
    }

    @Test("an artifact name over 128 bytes is refused by the plan and the export (64), leaving nothing behind")
    func nameTooLong() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let base = [checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path]
        let long = String(repeating: "m", count: 129)
        for command in [["plan"], []] {
            let run = runExporter(command + base + ["--output-name", long])
            #expect(run.status == 64)
            #expect(
                run.error.hasPrefix(
                    "Error: --output-name '\(String(repeating: "m", count: 40))…' is 129 bytes long; an artifact's name "
                        + "is at most 128 bytes (its files and their staging folders must fit 255-byte file names)\n"))
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == [])
        let longest = String(repeating: "m", count: 128)
        #expect(runExporter(base + ["--output-name", longest, "--compile"]).status == 0)
    }

    @Test("an artifact given as the model is named as one, not searched for weights (65)")
    func artifactAsModel() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let base = ["--experimental", "--compute-precision", "float16"]
        #expect(runExporter([checkpoint.path, "--output-dir", output.path] + base).status == 0)
        let bundle = output.appendingPathComponent("tiny/Tiny.aimodel")
        for command in [[], ["plan"]] {
            let run = runExporter(command + [bundle.path, "--output-dir", output.path] + base)
            #expect(run.status == 65)
            #expect(
                run.error.hasPrefix(
                    "Error: '\(bundle.path)' is an artifact of this tool, not a checkpoint: export from the checkpoint "
                        + "folder, preset or org/model id it came from (its manifest's model.source)\n"))
        }
    }

    @Test("--overwrite leaves a folder of the user's where an artifact would go, refused before the export (73)")
    func overwriteReplacesArtifactsOnly() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let base = [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
            "--overwrite",
        ]
        #expect(runExporter(base).status == 0)
        let model = output.appendingPathComponent("tiny")
        let bundle = model.appendingPathComponent("Tiny.aimodel")
        let before = try Data(contentsOf: bundle.appendingPathComponent("manifest.json"))
        func inode(_ url: URL) throws -> Int? {
            try FileManager.default.attributesOfItem(atPath: url.path)[.systemFileNumber] as? Int
        }
        let bundleInode = try inode(bundle)
        for (steps, taken) in [
            ([], "Tiny.aimodel"), (["--compile"], "Tiny.h17p.aimodelc"), (["--format", "mlpackage"], "Tiny.mlpackage"),
        ] {
            let folder = model.appendingPathComponent(taken)
            if taken != "Tiny.aimodel" {
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
            }
            let kept = folder.appendingPathComponent("thesis.txt")
            try Data("mine".utf8).write(to: kept)
            if taken == "Tiny.aimodel" {
                try FileManager.default.removeItem(at: bundle.appendingPathComponent("manifest.json"))
            }
            let run = runExporter(base + steps)
            #expect(run.status == 73, "\(run.error)")
            let marker = taken == "Tiny.mlpackage" ? "Manifest.json" : "manifest.json"
            #expect(
                run.error
                    == "Error: '\(folder.path)' already exists and is not an artifact to replace (the folder holds no "
                    + "\(marker) of an artifact); --overwrite replaces artifacts only: move or remove it\n")
            #expect(try Data(contentsOf: kept) == Data("mine".utf8))
            if taken == "Tiny.aimodel" {
                try Data(before).write(to: bundle.appendingPathComponent("manifest.json"))
                try FileManager.default.removeItem(at: kept)
            } else {
                // Refused before the export: the bundle there is the same folder, not a new one.
                #expect(try inode(bundle) == bundleInode)
                try FileManager.default.removeItem(at: folder)
            }
        }
    }
}
