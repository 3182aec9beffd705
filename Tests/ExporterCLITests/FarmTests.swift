import Foundation
import TestSupport
import Testing

@testable import ExporterCLI
@testable import ExporterKit

@Suite("farm: batch runs", .serialized)
struct FarmTests {
    /// A farm folder with `count` tiny checkpoints and a farm file; job `failing` (if any) has a
    /// checkpoint whose config disagrees with its weights.
    /// A farm of `count` tiny jobs (`failing` refused by its config), each compiling `devices` when given.
    private func makeFarm(count: Int, failing: Int? = nil, devices: [String] = []) throws -> (farm: URL, folder: URL) {
        let folder = try Fixtures.temporaryDirectory("farm")
        var jobs: [String] = []
        for index in 0..<count {
            let modelType = ["qwen2", "qwen3", "mistral"][index % 3]
            let checkpoint = try Fixtures.syntheticCheckpoint(
                modelType: modelType, seed: UInt64(index + 1), name: "m\(index)")
            let destination = folder.appendingPathComponent("m\(index)")
            try FileManager.default.moveItem(at: checkpoint, to: destination)
            if index == failing {
                var config = Fixtures.tinyConfig(modelType: modelType)
                config["intermediate_size"] = 96
                try JSONSerialization.data(withJSONObject: config).write(
                    to: destination.appendingPathComponent("config.json"))
            }
            let compiled =
                devices.isEmpty ? "" : #", "devices": [\#(devices.map { "\"\($0)\"" }.joined(separator: ", "))]"#
            jobs.append(#"{ "name": "job\#(index)", "model": "m\#(index)", "output_name": "M\#(index)"\#(compiled) }"#)
        }
        let farm = folder.appendingPathComponent("farm.json")
        try Data(
            """
            {
              "schema": "exporter.farm/1",
              "defaults": { "experimental": true, "compute_precision": "float16" },
              "jobs": [\(jobs.joined(separator: ",\n"))]
            }
            """.utf8
        ).write(to: farm)
        return (farm, folder)
    }

    private func report(_ folder: URL, _ name: String = "farm-report.json", output: String = "out") throws -> FarmReport
    {
        try JSONDecoder().decode(
            FarmReport.self, from: Data(contentsOf: folder.appendingPathComponent("\(output)/\(name)")))
    }

    @Test("a failing job fails alone; the re-run skips the good ones; a touched input rebuilds its job only")
    func incremental() throws {
        let (farm, folder) = try makeFarm(count: 3, failing: 1)
        let output = folder.appendingPathComponent("out").path
        let first = try BuiltExporter.run(["batch", farm.path, "--output", output])
        #expect(first.status == 1)
        #expect(first.error == "Error: 1 of 3 jobs failed\n")
        #expect(first.output.contains("report: \(output)/farm-report.json"))
        let firstReport = try report(folder)
        #expect(firstReport.jobs.map(\.status) == ["built", "failed", "built"])
        #expect(firstReport.jobs[1].exitStatus == 65)
        #expect(firstReport.jobs[1].error?.contains("has shape [128, 64], the config implies [96, 64]") == true)
        #expect(firstReport.jobs[0].bundle == "m0/M0.aimodel")
        for bundle in ["m0/M0.aimodel", "m2/M2.aimodel"] {
            _ = try BundleReader(url: folder.appendingPathComponent("out/\(bundle)"))
        }
        let second = try BuiltExporter.run(["batch", farm.path, "--output", output])
        #expect(second.status == 1)
        #expect(try report(folder).jobs.map(\.status) == ["skipped", "failed", "skipped"])
        // A fine-tune: same shapes, new values.
        let checkpoint = folder.appendingPathComponent("m2")
        let config = try ModelConfig(contentsOf: checkpoint.appendingPathComponent("config.json"))
        let tensors = try ArchitectureRegistry.tensors(for: config, configPath: "config.json")
        try SyntheticCheckpoint.write(
            tensors: tensors.map { ($0.name, $0.shape) }, seed: 99, to: checkpoint, replacingExisting: true)
        let thirdRun = try BuiltExporter.run(["batch", farm.path, "--output", output])
        let third = try report(folder)
        #expect(third.jobs.map(\.status) == ["skipped", "failed", "built"])
        #expect(third.jobs[2].buildKey != firstReport.jobs[2].buildKey)
        #expect(third.jobs[0].buildKey == firstReport.jobs[0].buildKey)
        // Why a bundle there is built again is said, in a pipe too; a first build says nothing.
        #expect(
            thirdRun.error
                == "job2: building 'm2/M2.aimodel' again: its inputs changed (build key)\nError: 1 of 3 jobs failed\n")
        #expect(!first.error.contains("again"))
        let forced = try BuiltExporter.run(["batch", farm.path, "--output", output, "--force", "--json"])
        let forcedReport = try JSONDecoder().decode(FarmReport.self, from: Data(forced.output.utf8))
        #expect(forcedReport.jobs.map(\.status) == ["built", "failed", "built"])
        #expect(forced.error.contains("job0: building 'm0/M0.aimodel' again: --force\n"))
        // An upgrade: the bundle another version wrote (another key), or a manifest edited since.
        let manifestURL = folder.appendingPathComponent("out/m0/M0.aimodel/manifest.json")
        let text = try String(contentsOf: manifestURL, encoding: .utf8)
        let key = try #require(
            try BundleReader(url: folder.appendingPathComponent("out/m0/M0.aimodel")).manifest.buildKey)
        try text.replacingOccurrences(of: #""version" : "\#(ToolVersion.current)""#, with: #""version" : "0.7.0""#)
            .replacingOccurrences(of: key, with: String(repeating: "0", count: 64))
            .write(to: manifestURL, atomically: true, encoding: .utf8)
        let upgraded = try BuiltExporter.run(["batch", farm.path, "--output", output])
        #expect(
            upgraded.error.hasPrefix(
                "job0: building 'm0/M0.aimodel' again: exporter 0.7.0 wrote it, this is \(ToolVersion.current)\n"))
        try text.replacingOccurrences(of: "\"weights\"", with: "\"weights\" ").write(
            to: manifestURL, atomically: true, encoding: .utf8)
        let edited = try BuiltExporter.run(["batch", farm.path, "--output", output])
        #expect(
            edited.error.hasPrefix(
                "job0: building 'm0/M0.aimodel' again: its manifest.json is not the one this farm wrote there\n"))
    }

    @Test("a checkpoint folder renamed: the job is skipped and its bundle is byte for byte a clean build's")
    func renamedCheckpointFolder() throws {
        let folder = try Fixtures.temporaryDirectory("farm")
        let manager = FileManager.default
        let checkpoint = folder.appendingPathComponent("notokA")
        try manager.moveItem(at: try Fixtures.syntheticCheckpoint(modelType: "qwen2", seed: 1), to: checkpoint)
        // Without tokenizer files, whose warning named the folder in the manifest up to 0.8.0.
        try manager.removeItem(at: checkpoint.appendingPathComponent("tokenizer.json"))
        let farm = folder.appendingPathComponent("farm.json")
        func write(model: String) throws {
            try Data(
                #"{"schema": "exporter.farm/1", "defaults": {"experimental": true, "compute_precision": "float16"}, "jobs": [{"name": "a", "model": "\#(model)", "output_name": "Tiny"}]}"#
                    .utf8
            ).write(to: farm)
        }
        try write(model: "notokA")
        let output = folder.appendingPathComponent("out")
        #expect(try BuiltExporter.run(["batch", farm.path, "--output", output.path]).status == 0)
        try manager.moveItem(at: checkpoint, to: folder.appendingPathComponent("notokB"))
        try write(model: "notokB")
        let again = try BuiltExporter.run(["batch", farm.path, "--output", output.path])
        #expect(again.status == 0, "\(again.error)")
        #expect(try report(folder).jobs.map(\.status) == ["skipped"])
        let clean = folder.appendingPathComponent("clean")
        #expect(try BuiltExporter.run(["batch", farm.path, "--output", clean.path]).status == 0)
        #expect(try report(folder, output: "clean").jobs.map(\.status) == ["built"])
        let manifest = "tiny/Tiny.aimodel/manifest.json"
        #expect(
            try Data(contentsOf: output.appendingPathComponent(manifest))
                == Data(contentsOf: clean.appendingPathComponent(manifest)))
    }

    @Test("report errors name paths under the farm file's folder relative to it: two checkouts' reports compare equal")
    func reportPathsRelative() throws {
        let base = try Fixtures.temporaryDirectory("farm")
        let manager = FileManager.default
        var reports: [FarmReport] = []
        for name in ["farm2a", "farm2b dir"] {
            let folder = base.appendingPathComponent(name)
            // A folder holding only a config (the farm's planning refuses it) and a checkpoint
            // whose config disagrees with its weights (the export, a child process, refuses it).
            let configOnly = folder.appendingPathComponent("ck/cfgonly")
            try manager.createDirectory(at: configOnly, withIntermediateDirectories: true)
            try JSONSerialization.data(withJSONObject: Fixtures.tinyConfig(), options: [.sortedKeys]).write(
                to: configOnly.appendingPathComponent("config.json"))
            let mismatched = folder.appendingPathComponent("ck/mismatched")
            try manager.moveItem(at: try Fixtures.syntheticCheckpoint(modelType: "qwen2", seed: 1), to: mismatched)
            var config = Fixtures.tinyConfig(modelType: "qwen2")
            config["intermediate_size"] = 96
            // Sorted keys: the same bytes, and so the same build key, in both checkouts.
            try JSONSerialization.data(withJSONObject: config, options: [.sortedKeys]).write(
                to: mismatched.appendingPathComponent("config.json"))
            let farm = folder.appendingPathComponent("farm.json")
            try Data(
                #"{"schema": "exporter.farm/1", "defaults": {"experimental": true, "compute_precision": "float16"}, "jobs": [{"name": "a", "model": "ck/cfgonly"}, {"name": "b", "model": "./ck/mismatched"}, {"name": "c", "model": "ck/cfgonly", "output_name": "C", "devices": ["h17p"], "device_table": "tables/none.json"}]}"#
                    .utf8
            ).write(to: farm)
            let run = try BuiltExporter.run(["batch", farm.path, "--output", folder.appendingPathComponent("out").path])
            #expect(run.status == 1)
            reports.append(try report(folder))
        }
        #expect(reports[0].jobs == reports[1].jobs)
        #expect(
            reports[0].jobs.map(\.error) == [
                "no model.safetensors, model.safetensors.index.json or other *.safetensors file in 'ck/cfgonly'",
                "'ck/mismatched/model.safetensors': tensor 'model.layers.0.mlp.gate_proj.weight' has shape [128, 64], "
                    + "the config implies [96, 64]",
                "device_table: no device table at 'tables/none.json'",
            ])
    }

    @Test("a path is made relative to the farm file's folder only where it is that folder or inside it")
    func farmRelativePaths() {
        let cases: [(String, String)] = [
            ("in '/ci/co/ck/m'", "in 'ck/m'"),
            ("in '/ci/co'", "in '.'"),
            ("'/ci/co/a' and '/ci/co/b/c'", "'a' and 'b/c'"),
            ("'/ci/co2/a', '/x/ci/co/a', '/ci/co.d', 'x/ci/co'", "'/ci/co2/a', '/x/ci/co/a', '/ci/co.d', 'x/ci/co'"),
            ("/ci/co/a: /ci/co", "a: ."),
            ("nothing", "nothing"),
        ]
        for (text, expected) in cases {
            #expect(FarmRunner.relative(text, under: "/ci/co") == expected, "\(text)")
        }
    }

    @Test("a job's devices compile after its export; a new device compiles without re-exporting")
    func devices() throws {
        let (farm, folder) = try makeFarm(count: 1, devices: ["h17p"])
        let output = folder.appendingPathComponent("out").path
        let first = try BuiltExporter.run(["batch", farm.path, "--output", output])
        #expect(first.status == 0, "\(first.error)")
        #expect(first.output.contains("h17p fits"))
        var job = try #require(try report(folder).jobs.first)
        #expect(job.status == "built")
        #expect(
            job.devices == [
                FarmDeviceResult(
                    device: "h17p", status: "built", artifact: "m0/M0.h17p.aimodelc", memory: "fits",
                    neuralEngine: "all-regions-within-budget", error: nil)
            ])
        // The report's keys as docs/FARM.md names them; a device that did not fail exited 0.
        let raw = try #require(
            try JSONParser.parse(Array(Data(contentsOf: folder.appendingPathComponent("out/farm-report.json"))))
                .objectValue)
        #expect(
            raw.keys.sorted() == [
                "collected", "farm", "farm_digest", "jobs", "report_id", "run_id", "schema", "seconds", "shard",
            ])
        let rawJob = try #require(raw["jobs"]?.arrayValue?.first?.objectValue)
        #expect(
            rawJob.keys.sorted() == [
                "build_key", "bundle", "bundle_bytes", "bundle_status", "devices", "error", "exit_status", "name",
                "status",
            ])
        #expect(rawJob["bundle_status"]?.stringValue == "built")
        let rawDevice = try #require(rawJob["devices"]?.arrayValue?.first?.objectValue)
        #expect(
            rawDevice.keys.sorted() == [
                "artifact", "device", "error", "exit_status", "memory", "neural_engine", "status",
            ])
        #expect(rawDevice["neural_engine"]?.stringValue == "all-regions-within-budget")
        #expect(rawDevice["exit_status"]?.intValue == 0)
        let text = try String(contentsOf: farm, encoding: .utf8)
        try Data(text.replacingOccurrences(of: #"["h17p"]"#, with: #"["h17p", "h16p"]"#).utf8).write(to: farm)
        _ = try BuiltExporter.run(["batch", farm.path, "--output", output])
        job = try #require(try report(folder).jobs.first)
        // Something was built: the job's status says so, its bundle's own outcome is kept apart.
        #expect(job.status == "built")
        #expect(job.bundleStatus == "skipped")
        #expect(job.devices.map(\.status) == ["skipped", "built"])
        let compiled = try CompiledArtifactReader(url: folder.appendingPathComponent("out/m0/M0.h16p.aimodelc"))
        #expect(compiled.manifest.buildKey != nil)
        #expect(compiled.manifest.buildKey != job.buildKey)
        // An artifact built from other inputs (its recorded key is not this device entry's) is
        // compiled again; the current one is skipped.
        let manifestURL = folder.appendingPathComponent("out/m0/M0.h16p.aimodelc/manifest.json")
        var object = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: manifestURL)) as? [String: Any])
        let key = try #require(object["build_key"] as? String)
        object["build_key"] = String(repeating: "0", count: 64)
        try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]).write(to: manifestURL)
        _ = try BuiltExporter.run(["batch", farm.path, "--output", output])
        #expect(try report(folder).jobs.first?.devices.map(\.status) == ["skipped", "built"])
        let rebuilt = try CompiledArtifactReader(url: folder.appendingPathComponent("out/m0/M0.h16p.aimodelc"))
        #expect(rebuilt.manifest.buildKey == key)
    }

    @Test("a job's device_table extends the shipped table: its devices compile with its numbers in their keys")
    func deviceTable() throws {
        let (farm, folder) = try makeFarm(count: 1)
        let output = folder.appendingPathComponent("out")
        let table = folder.appendingPathComponent("lab-devices.json")
        func writeTable(appMemoryLimit: Int) throws {
            try Data(
                """
                {"schema": "exporter.devices/1", "devices": [
                  {"id": "lab1", "platform": "iOS", "chip": "Lab chip", "products": ["Lab board"], "ahead_of_time": true,
                   "ram_bytes": 8589934592, "app_memory_limit_bytes": \(appMemoryLimit),
                   "increased_memory_limit_bytes": null, "entitlements": [], "ane_region_budget_bytes": 1000000,
                   "page_size": 4096}
                ]}
                """.utf8
            ).write(to: table)
        }
        let text = try String(contentsOf: farm, encoding: .utf8)
        func writeFarm(_ keys: String) throws {
            try Data(
                text.replacingOccurrences(of: #""output_name": "M0""#, with: #""output_name": "M0", "# + keys).utf8
            ).write(to: farm)
        }
        func run() throws -> FarmJobResult {
            _ = try BuiltExporter.run(["batch", farm.path, "--output", output.path])
            return try #require(try report(folder).jobs.first)
        }
        try writeTable(appMemoryLimit: 1_000_000)
        // Ids in any case: the report and the artifacts use the table's.
        try writeFarm(#""devices": ["LAB1", "H17P"], "device_table": "lab-devices.json""#)
        var job = try run()
        #expect(job.status == "built")
        #expect(
            job.devices == [
                FarmDeviceResult(
                    device: "lab1", status: "built", artifact: "m0/M0.lab1.aimodelc", memory: "does-not-fit",
                    neuralEngine: "regions-over-budget", error: nil),
                FarmDeviceResult(
                    device: "h17p", status: "built", artifact: "m0/M0.h17p.aimodelc", memory: "fits",
                    neuralEngine: "all-regions-within-budget", error: nil),
            ])
        let lab = try #require(
            try DeviceTable.load(presetsDirectory: Fixtures.presetsDirectory, extra: table).select(
                ["lab1"], platform: .iOS
            )
            .first)
        let compiled = try CompiledArtifactReader(url: output.appendingPathComponent("m0/M0.lab1.aimodelc"))
        #expect(
            compiled.manifest.buildKey
                == BuildKey.compiled(
                    bundleKey: try #require(job.buildKey), device: lab,
                    minimumDeploymentVersion: DeploymentVersion.minimum.description))
        // New numbers for the device: its artifact compiles again, the others are current.
        try writeTable(appMemoryLimit: 6_000_000_000)
        job = try run()
        #expect(job.status == "built")
        #expect(job.bundleStatus == "skipped")
        #expect(job.devices.map(\.status) == ["built", "skipped"])
        #expect(job.devices.first?.memory == "fits")
        // Without the table the device is unknown, and a table that is not there is named: both
        // refused before the export.
        try writeFarm(#""devices": ["LAB1"]"#)
        job = try run()
        #expect(job.exitStatus == 65)
        #expect(job.error?.hasPrefix("devices: unknown iOS architecture 'LAB1'; known: ") == true)
        try writeFarm(#""devices": ["lab1"], "device_table": "missing.json""#)
        job = try run()
        #expect(job.exitStatus == 65)
        #expect(job.error == "device_table: no device table at 'missing.json'")
        // One there that cannot be read is the device_table's fault too, with its reason.
        let loop = folder.appendingPathComponent("loop.json")
        try FileManager.default.createSymbolicLink(atPath: loop.path, withDestinationPath: "loop.json")
        try writeFarm(#""devices": ["lab1"], "device_table": "loop.json""#)
        job = try run()
        #expect(job.error == "device_table: cannot read 'loop.json': too many levels of symbolic links")
    }

    @Test(
        "whatever the artifacts record is in their keys: a renamed compression config or product rebuilds to a clean build's bytes"
    )
    func keysCoverRecordedInputs() throws {
        let (farm, folder) = try makeFarm(count: 1)
        let table = folder.appendingPathComponent("lab-devices.json")
        let config = folder.appendingPathComponent("cfg.json")
        func write(product: String, configName: String) throws {
            try Data(
                """
                {"schema": "exporter.devices/1", "devices": [
                  {"id": "lab1", "platform": "iOS", "chip": "Lab chip", "products": ["\(product)"], "ahead_of_time": true,
                   "ram_bytes": 8589934592, "app_memory_limit_bytes": 6000000000,
                   "increased_memory_limit_bytes": null, "entitlements": [], "ane_region_budget_bytes": 1000000000,
                   "page_size": 4096}
                ]}
                """.utf8
            ).write(to: table)
            try Data(
                """
                {"schema": "exporter.compression/1", "name": "\(configName)", "rules": [{"match": "*norm.weight", "mode": "keep"}],
                 "default": {"mode": "palettize", "bits": 4, "granularity": "per_grouped_channel", "group_size": 8}}
                """.utf8
            ).write(to: config)
        }
        let text = try String(contentsOf: farm, encoding: .utf8)
        try Data(
            text.replacingOccurrences(
                of: #""output_name": "M0""#,
                with:
                    #""output_name": "M0", "compression_config": "cfg.json", "devices": ["lab1"], "device_table": "lab-devices.json""#
            ).utf8
        ).write(to: farm)
        func run(_ output: String) throws -> [String] {
            let result = try BuiltExporter.run([
                "batch", farm.path, "--output", folder.appendingPathComponent(output).path,
            ])
            #expect(result.status == 0, "\(result.error)")
            let job = try #require(try report(folder, output: output).jobs.first)
            return [job.bundleStatus] + job.devices.map(\.status)
        }
        /// Every file of the job's folder, by relative path.
        func contents(_ output: String) throws -> [String: Data] {
            let root = folder.appendingPathComponent("\(output)/m0")
            var files: [String: Data] = [:]
            for path in ArtifactVerifier.filesBelow(root) {
                files[path] = try Data(contentsOf: root.appendingPathComponent(path))
            }
            return files
        }
        try write(product: "Lab board", configName: "cfg")
        #expect(try run("out") == ["built", "built"])
        // The product's name only: the compiled artifact records it, so it is compiled again.
        try write(product: "Lab board (rev. B)", configName: "cfg")
        #expect(try run("out") == ["skipped", "built"])
        #expect(try run("clean1") == ["built", "built"])
        #expect(try contents("out") == contents("clean1"))
        #expect(
            try CompiledArtifactReader(url: folder.appendingPathComponent("out/m0/M0.lab1.aimodelc")).compiled.products
                == ["Lab board (rev. B)"])
        // The compression config's name only (the same rules): the bundle records it.
        try write(product: "Lab board (rev. B)", configName: "cfg2")
        #expect(try run("out") == ["built", "built"])
        #expect(try run("clean2") == ["built", "built"])
        let incremental = try contents("out")
        #expect(incremental == (try contents("clean2")))
        #expect(incremental != (try contents("clean1")))
        #expect(
            try BundleReader(url: folder.appendingPathComponent("out/m0/M0.aimodel")).manifest.compression.config
                == "cfg2")
    }

    @Test("an iOS job compiles Apple Vision Pro's h14g from its iOS bundle; a device of the other platform is refused")
    func devicesOfTheBundlesPlatform() throws {
        let (farm, folder) = try makeFarm(count: 1)
        let text = try String(contentsOf: farm, encoding: .utf8)
        try Data(
            text.replacingOccurrences(of: #""output_name": "M0""#, with: #""output_name": "M0", "devices": ["H14G"]"#)
                .utf8
        ).write(to: farm)
        let output = folder.appendingPathComponent("out").path
        _ = try BuiltExporter.run(["batch", farm.path, "--output", output])
        var job = try #require(try report(folder).jobs.first)
        #expect(job.devices.map(\.device) == ["h14g"])
        #expect(job.devices.map(\.status) == ["built"])
        let compiled = try CompiledArtifactReader(url: folder.appendingPathComponent("out/m0/M0.h14g.aimodelc"))
        #expect(compiled.manifest.compiled?.platform == "visionOS")
        _ = try BuiltExporter.run(["batch", farm.path, "--output", output])
        job = try #require(try report(folder).jobs.first)
        #expect(job.devices.map(\.status) == ["skipped"])
        // A macOS job's bundle does not load on an iPhone: refused before the export, naming the
        // job key to change.
        try Data(
            text.replacingOccurrences(
                of: #""output_name": "M0""#, with: #""output_name": "M1", "platform": "macOS", "devices": ["h17p"]"#
            ).utf8
        ).write(to: farm)
        let refused = try BuiltExporter.run(["batch", farm.path, "--output", output])
        #expect(refused.status == 1)
        job = try #require(try report(folder).jobs.first)
        #expect(job.exitStatus == 65)
        #expect(job.bundle == nil)
        #expect(
            job.error
                == "devices: architecture 'h17p' is an iOS device, which loads iOS bundles, and this job exports for "
                + #"macOS: list it in a job with "platform": "iOS""#)
        // The job turned to macOS in the same folder: its h14g is now the M2 Mac's, and the Vision
        // Pro's artifact there is neither skipped nor replaced.
        try Data(
            text.replacingOccurrences(
                of: #""output_name": "M0""#, with: #""output_name": "M0", "platform": "macOS", "devices": ["h14g"]"#
            ).utf8
        ).write(to: farm)
        let message =
            "'m0/M0.h14g.aimodelc' is a visionOS artifact of the same architecture id, from another job or an "
            + "earlier platform of this one: give this job another 'output_name'"
        // The job failed, as the run's count says: its device's error and exit status are its own,
        // its bundle's outcome is kept apart, and the device has no artifact of this run.
        for bundleStatus in ["built", "skipped"] {
            let run = try BuiltExporter.run(["batch", farm.path, "--output", output])
            #expect(run.status == 1)
            // The iOS bundle there is built again for macOS, which the first run says.
            let rebuilt =
                bundleStatus == "built" ? "job0: building 'm0/M0.aimodel' again: its inputs changed (build key)\n" : ""
            #expect(run.error == rebuilt + "Error: 1 of 1 jobs failed\n")
            #expect(run.output.hasPrefix("job   status  "))
            #expect(run.output.contains("\njob0  failed  "))
            job = try #require(try report(folder).jobs.first)
            #expect(job.status == "failed")
            #expect(job.bundleStatus == bundleStatus)
            #expect(job.bundle == "m0/M0.aimodel")
            #expect(job.exitStatus == 73)
            #expect(job.error == "device h14g: " + message)
            #expect(
                job.devices == [
                    FarmDeviceResult(
                        device: "h14g", status: "failed", artifact: nil, memory: nil, neuralEngine: nil, error: message,
                        exitStatus: 73)
                ])
        }
        #expect(
            try CompiledArtifactReader(url: folder.appendingPathComponent("out/m0/M0.h14g.aimodelc")).compiled
                .platform == "visionOS")
        // And a Mac's in an iOS job.
        try Data(
            text.replacingOccurrences(of: #""output_name": "M0""#, with: #""output_name": "M2", "devices": ["h13g"]"#)
                .utf8
        ).write(to: farm)
        #expect(try BuiltExporter.run(["batch", farm.path, "--output", output]).status == 1)
        job = try #require(try report(folder).jobs.first)
        #expect(job.exitStatus == 65)
        #expect(
            job.error
                == "devices: architecture 'h13g' is a macOS device, which loads macOS bundles, and this job exports for "
                + #"iOS: list it in a job with "platform": "macOS""#)
        #expect(
            FarmError.deviceOfOtherPlatform(id: "h13g", devicePlatform: .macOS, jobPlatform: .iOS).exitStatus
                == .badInput)
    }

    @Test("the farm's lock file takes the umask's mode: a teammate's run can lock a shared output folder")
    func lockFileMode() throws {
        let (farm, folder) = try makeFarm(count: 1)
        let output = folder.appendingPathComponent("out")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = [
            "-c", #"umask 002 && exec "$0" "$@" > /dev/null"#, BuiltExporter.url.path, "batch", farm.path, "--output",
            output.path,
        ]
        process.environment = ["EXPORTER_PRESETS": Fixtures.presetsDirectory.path, "HOME": "/nonexistent-home"]
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let lock = output.appendingPathComponent(".farm.lock").path
        #expect(try FileManager.default.attributesOfItem(atPath: lock)[.posixPermissions] as? Int == 0o664)
    }

    @Test(
        "a no-op run reads each artifact in full once it has settled, then trusts it while unchanged; damage still rebuilds"
    )
    func verifiedRecord() throws {
        let (farm, folder) = try makeFarm(count: 1, devices: ["h17p"])
        let output = folder.appendingPathComponent("out")
        let recordURL = output.appendingPathComponent(".farm-verified.json")
        func recorded() throws -> [String] {
            let record = try JSONSerialization.jsonObject(with: Data(contentsOf: recordURL)) as? [String: Any]
            return ((record?["files"] as? [String: Any])?.keys).map { $0.sorted() } ?? []
        }
        func run(_ extra: [String] = []) throws -> [String] {
            let result = try BuiltExporter.run(["batch", farm.path, "--output", output.path] + extra)
            #expect(result.status == 0, "\(result.error)")
            let job = try #require(try report(folder).jobs.first)
            return [job.status] + job.devices.map(\.status)
        }
        // Dates every artifact file (and folder) of the job as last modified at `date`.
        func redate(_ date: Date) throws {
            let folder = output.appendingPathComponent("m0")
            let entries = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil)?.allObjects ?? []
            for case let entry as URL in entries {
                try FileManager.default.setAttributes([.modificationDate: date], ofItemAtPath: entry.path)
            }
        }
        #expect(try run() == ["built", "built"])
        // Changed too recently: verified in full, but not trusted later. Dated an hour ahead so
        // that it is still recent however slow the runs are (the two runs took over the 2 s a
        // change needs to settle on a sanitizer build, and the record was not empty).
        try redate(Date().addingTimeInterval(3600))
        #expect(try run() == ["skipped", "skipped"])
        #expect(try recorded() == [])
        try redate(Date())
        Thread.sleep(forTimeInterval: 2.2)
        #expect(try run() == ["skipped", "skipped"])
        let bundle = try BundleReader(url: output.appendingPathComponent("m0/M0.aimodel"))
        let compiled = try CompiledArtifactReader(url: output.appendingPathComponent("m0/M0.h17p.aimodelc"))
        let expected =
            (bundle.manifest.files.map { "m0/M0.aimodel/" + $0.path }
            + compiled.manifest.files.map { "m0/M0.h17p.aimodelc/" + $0.path }).sorted()
        #expect(try recorded() == expected)
        // Temporary files of a record or report write a killed run left behind go (the record's
        // named `..farm-verified.json.<uuid>` up to 0.8.3).
        let leftovers = [
            ".farm-verified.json.1234", "..farm-verified.json.1234", ".farm-report.json.1234",
            ".farm-report-shard-1-of-2.json.1234",
        ]
        for name in leftovers { try Data("{".utf8).write(to: output.appendingPathComponent(name)) }
        #expect(try run() == ["skipped", "skipped"])
        #expect(
            leftovers.allSatisfy { !FileManager.default.fileExists(atPath: output.appendingPathComponent($0).path) })
        #expect(try run(["--reverify"]) == ["skipped", "skipped"])
        #expect(try recorded() == expected)
        // One bit flipped in place, the size unchanged: the record no longer vouches for the file.
        let weights = output.appendingPathComponent("m0/M0.aimodel/weights.bin")
        let handle = try FileHandle(forUpdating: weights)
        try handle.seek(toOffset: 200)
        let byte = try #require(try handle.read(upToCount: 1)).first ?? 0
        try handle.seek(toOffset: 200)
        try handle.write(contentsOf: Data([byte ^ 1]))
        try handle.close()
        #expect(try run() == ["built", "skipped"])
        _ = try BundleReader(url: output.appendingPathComponent("m0/M0.aimodel"))
    }

    @Test(
        "a skip needs the manifest the farm wrote and a folder holding only its files, --reverify or not; else it rebuilds"
    )
    func skipChecksManifest() throws {
        let (farm, folder) = try makeFarm(count: 1, devices: ["h17p"])
        let output = folder.appendingPathComponent("out")
        func run(_ extra: [String] = []) throws -> [String] {
            let result = try BuiltExporter.run(["batch", farm.path, "--output", output.path] + extra)
            #expect(result.status == 0, "\(result.error)")
            let job = try #require(try report(folder).jobs.first)
            return [job.bundleStatus] + job.devices.map(\.status)
        }
        let bundle = output.appendingPathComponent("m0/M0.aimodel")
        let compiled = output.appendingPathComponent("m0/M0.h17p.aimodelc")
        let bundleManifest = bundle.appendingPathComponent("manifest.json")
        let compiledManifest = compiled.appendingPathComponent("manifest.json")
        #expect(try run() == ["built", "built"])
        let original = try Data(contentsOf: bundleManifest)
        let originalCompiled = try Data(contentsOf: compiledManifest)
        #expect(try run() == ["skipped", "skipped"])
        // One figure edited in the bundle's manifest (no checksum covers it), with or without --reverify.
        for extra in [[], ["--reverify"]] {
            let edited = try #require(String(data: original, encoding: .utf8))
                .replacingOccurrences(of: #""context_length" : 512"#, with: #""context_length" : 511"#)
            #expect(edited.utf8.count == original.count)
            try Data(edited.utf8).write(to: bundleManifest)
            // Built again to the same bytes, which the compiled artifact was made from: it stays.
            #expect(try run(extra) == ["built", "skipped"])
            #expect(try Data(contentsOf: bundleManifest) == original)
        }
        // The compiled artifact's manifest, and a file that neither manifest lists.
        try Data(originalCompiled + Data(" ".utf8)).write(to: compiledManifest)
        #expect(try run() == ["skipped", "built"])
        #expect(try Data(contentsOf: compiledManifest) == originalCompiled)
        for stray in [bundle.appendingPathComponent("extra.txt"), compiled.appendingPathComponent("tables/extra.bin")] {
            try FileManager.default.createDirectory(
                at: stray.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data("x".utf8).write(to: stray)
        }
        #expect(try run() == ["built", "built"])
        #expect(ArtifactVerifier.filesBelow(bundle).allSatisfy { $0 != "extra.txt" })
        #expect(ArtifactVerifier.filesBelow(compiled).allSatisfy { $0 != "tables/extra.bin" })
        #expect(try run() == ["skipped", "skipped"])
        // Without the record, no manifest is known to be the farm's: everything is built again.
        try FileManager.default.removeItem(at: output.appendingPathComponent(".farm-verified.json"))
        #expect(try run() == ["built", "built"])
        #expect(try Data(contentsOf: bundleManifest) == original)
    }

    @Test("shards cover every job once, and their collected report equals an unsharded run's")
    func shards() throws {
        let (farm, folder) = try makeFarm(count: 5)
        let whole = try BuiltExporter.run([
            "batch", farm.path, "--output", folder.appendingPathComponent("whole").path, "--json",
        ])
        #expect(whole.status == 0, "\(whole.error)")
        let wholeReport = try JSONDecoder().decode(FarmReport.self, from: Data(whole.output.utf8))
        let matrix = try BuiltExporter.run(["batch", farm.path, "--matrix", "--shards", "3"])
        let parsed = try #require(try JSONParser.parse(Array(matrix.output.utf8)).objectValue?["include"]?.arrayValue)
        #expect(parsed.compactMap { $0.objectValue?["shard"]?.stringValue } == ["1/3", "2/3", "3/3"])
        let assigned = parsed.flatMap { $0.objectValue?["jobs"]?.arrayValue?.compactMap(\.stringValue) ?? [] }
        #expect(assigned.sorted() == ["job0", "job1", "job2", "job3", "job4"])
        let sharded = folder.appendingPathComponent("out").path
        for shard in ["1/3", "2/3", "3/3"] {
            let run = try BuiltExporter.run(["batch", farm.path, "--output", sharded, "--shard", shard])
            #expect(run.status == 0, "\(run.error)")
        }
        let collect = try BuiltExporter.run(["batch", farm.path, "--output", sharded, "--collect"])
        #expect(collect.status == 0, "\(collect.error)")
        let collected = try report(folder)
        #expect(collected.jobs == wholeReport.jobs)
        #expect(collected.shard == nil)
        // More shards than jobs: one shard per job, none empty.
        let capped = try BuiltExporter.run(["batch", farm.path, "--matrix", "--shards", "10"])
        let cappedShards = try #require(
            try JSONParser.parse(Array(capped.output.utf8)).objectValue?["include"]?.arrayValue)
        #expect(cappedShards.compactMap { $0.objectValue?["shard"]?.stringValue } == (1...5).map { "\($0)/5" })
        #expect(cappedShards.allSatisfy { $0.objectValue?["jobs"]?.arrayValue?.count == 1 })
    }

    @Test("a collect that fails names the shards without a report and leaves no farm-report.json behind")
    func failedCollect() throws {
        let (farm, folder) = try makeFarm(count: 4)
        let output = folder.appendingPathComponent("out")
        for shard in ["1/4", "2/4", "3/4", "4/4"] {
            let run = try BuiltExporter.run(["batch", farm.path, "--output", output.path, "--shard", shard])
            #expect(run.status == 0, "\(run.error)")
        }
        let report = output.appendingPathComponent("farm-report.json")
        func collect() throws -> BuiltExporter.Outcome {
            try BuiltExporter.run(["batch", farm.path, "--output", output.path, "--collect"])
        }
        #expect(try collect().status == 0)
        #expect(FileManager.default.fileExists(atPath: report.path))
        let shard = { (index: Int) in output.appendingPathComponent("farm-report-shard-\(index)-of-4.json") }
        let second = try Data(contentsOf: shard(2))
        try FileManager.default.removeItem(at: shard(2))
        var failed = try collect()
        #expect(failed.status == 65)
        #expect(
            failed.error
                == "Error: cannot collect shard reports: shard 2/4 has no report ('farm-report-shard-2-of-4.json')\n")
        // The report of the earlier collect would pass for this one's.
        #expect(!FileManager.default.fileExists(atPath: report.path))
        try FileManager.default.removeItem(at: shard(4))
        failed = try collect()
        #expect(
            failed.error
                == "Error: cannot collect shard reports: shards 2/4, 4/4 have no report "
                + "('farm-report-shard-2-of-4.json', 'farm-report-shard-4-of-4.json')\n")
        // A report of another split.
        try second.write(to: shard(2))
        var other = try JSONDecoder().decode(FarmReport.self, from: Data(contentsOf: shard(1)))
        other.shard = "1/2"
        other.jobs = []
        try Data(try other.canonicalJSON()).write(to: output.appendingPathComponent("farm-report-shard-1-of-2.json"))
        failed = try collect()
        #expect(failed.status == 65)
        #expect(
            failed.error
                == "Error: cannot collect shard reports: the shard reports are of splits into 2 and 4 shards; "
                + "keep one split's reports\n")
        #expect(!FileManager.default.fileExists(atPath: report.path))
        // A job in reports of two splits: both reports named, and that their splits differ.
        other.jobs = try JSONDecoder().decode(FarmReport.self, from: Data(contentsOf: shard(1))).jobs
        try Data(try other.canonicalJSON()).write(to: output.appendingPathComponent("farm-report-shard-1-of-2.json"))
        failed = try collect()
        #expect(failed.status == 65)
        #expect(
            failed.error
                == "Error: cannot collect shard reports: job '\(other.jobs[0].name)' is in two shard reports, "
                + "'farm-report-shard-1-of-2.json' and 'farm-report-shard-1-of-4.json', of splits into 2 and 4 shards; "
                + "keep one split's reports\n")
        #expect(!FileManager.default.fileExists(atPath: report.path))
        // The later report of the smaller split: the splits are named smaller first all the same.
        try FileManager.default.removeItem(at: output.appendingPathComponent("farm-report-shard-1-of-2.json"))
        other.shard = "3/3"
        try Data(try other.canonicalJSON()).write(to: output.appendingPathComponent("farm-report-shard-3-of-3.json"))
        failed = try collect()
        #expect(
            failed.error
                == "Error: cannot collect shard reports: job '\(other.jobs[0].name)' is in two shard reports, "
                + "'farm-report-shard-1-of-4.json' and 'farm-report-shard-3-of-3.json', of splits into 3 and 4 shards; "
                + "keep one split's reports\n")
    }

    @Test("a collect refuses a shard report of another run, or of the farm as it was before an edit, naming it")
    func staleShardReports() throws {
        let (farm, folder) = try makeFarm(count: 3)
        let output = folder.appendingPathComponent("out")
        func shard(_ shard: String, run: String) throws {
            let result = try BuiltExporter.run([
                "batch", farm.path, "--output", output.path, "--shard", shard, "--run-id", run,
            ])
            #expect(result.status == 0, "\(result.error)")
        }
        func collect(_ extra: [String] = []) throws -> BuiltExporter.Outcome {
            try BuiltExporter.run(["batch", farm.path, "--output", output.path, "--collect"] + extra)
        }
        let collected = output.appendingPathComponent("farm-report.json")
        try shard("1/2", run: "night-1")
        try shard("2/2", run: "night-1")
        #expect(try collect(["--run-id", "night-1"]).status == 0)
        let first = try report(folder)
        #expect(first.runID == "night-1")
        #expect(first.farmDigest.count == 64)
        #expect(first.jobs.map(\.name) == ["job0", "job1", "job2"])
        // The next night, shard 1/2's machine does not run: its report is last night's.
        try shard("2/2", run: "night-2")
        var failed = try collect()
        #expect(failed.status == 65)
        #expect(
            failed.error
                == "Error: cannot collect shard reports: 'farm-report-shard-1-of-2.json' is a report of run 'night-1', "
                + "'farm-report-shard-2-of-2.json' of run 'night-2'; collect one run's reports (--run-id)\n")
        #expect(!FileManager.default.fileExists(atPath: collected.path))
        // The report left aside is said on standard error, in a pipe too: a CI log shows why.
        failed = try collect(["--run-id", "night-2"])
        #expect(
            failed.error
                == "left aside: 'farm-report-shard-1-of-2.json', a report of run 'night-1'\n"
                + "Error: cannot collect shard reports: shard 1/2 has no report ('farm-report-shard-1-of-2.json')\n")
        #expect(
            try collect(["--run-id", "night-9"]).error
                == "left aside: 'farm-report-shard-1-of-2.json', a report of run 'night-1'\n"
                + "left aside: 'farm-report-shard-2-of-2.json', a report of run 'night-2'\n"
                + "Error: cannot collect shard reports: no shard report of run 'night-9' in '\(output.path)'\n")
        try shard("1/2", run: "night-2")
        #expect(try collect(["--run-id", "night-2"]).status == 0)
        // Night 3 splits in 3: night 2's reports of the other split stay in the folder, left aside.
        for index in 1...3 { try shard("\(index)/3", run: "night-3") }
        #expect(try collect().status == 65)
        let third = try collect(["--run-id", "night-3"])
        #expect(third.status == 0, "\(third.error)")
        #expect(
            third.error
                == "left aside: 'farm-report-shard-1-of-2.json', a report of run 'night-2'\n"
                + "left aside: 'farm-report-shard-2-of-2.json', a report of run 'night-2'\n")
        #expect(try report(folder).jobs.map(\.name) == ["job0", "job1", "job2"])
        for index in 1...3 {
            try FileManager.default.removeItem(
                at: output.appendingPathComponent("farm-report-shard-\(index)-of-3.json"))
        }
        // The farm file edited since the shards ran (one job's context): no report is of this farm.
        let text = try String(contentsOf: farm, encoding: .utf8)
        try Data(
            text.replacingOccurrences(of: #""output_name": "M1""#, with: #""output_name": "M1", "context": 64"#).utf8
        )
        .write(to: farm)
        failed = try collect()
        #expect(failed.status == 65)
        #expect(
            failed.error
                == "Error: cannot collect shard reports: 'farm-report-shard-1-of-2.json' was written for another "
                + "version of the farm (its farm file, a file its jobs name, the presets or exporter changed since); "
                + "run shard 1/2 again\n")
        #expect(!FileManager.default.fileExists(atPath: collected.path))
        try Data(text.utf8).write(to: farm)
        #expect(try collect().status == 0)
        // A report of a job the farm does not list (seconds included) is refused, never half merged.
        let shardURL = output.appendingPathComponent("farm-report-shard-2-of-2.json")
        var foreign = try JSONDecoder().decode(FarmReport.self, from: Data(contentsOf: shardURL))
        foreign.jobs.append(
            FarmJobResult(
                name: "dropped", status: "built", bundle: nil, bundleBytes: nil, buildKey: nil, error: nil,
                exitStatus: 0))
        foreign.seconds["dropped"] = 1
        try Data(try foreign.canonicalJSON()).write(to: shardURL)
        failed = try collect()
        #expect(
            failed.error
                == "Error: cannot collect shard reports: 'farm-report-shard-2-of-2.json' reports job 'dropped', "
                + "which the farm file does not list\n")
        // A report of the schema before digests.
        var object = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: shardURL)) as? [String: Any])
        object["schema"] = "exporter.farm-report/1"
        object.removeValue(forKey: "farm_digest")
        try JSONSerialization.data(withJSONObject: object).write(to: shardURL)
        failed = try collect()
        #expect(
            failed.error
                == "Error: cannot collect shard reports: 'farm-report-shard-2-of-2.json' is a report of schema "
                + "'exporter.farm-report/1'; this version collects 'exporter.farm-report/2': run its shard again\n")
    }

    @Test("without run ids, a collect refuses a report it merged before beside reports of shards that ran since")
    func collectedShardReports() throws {
        let (farm, folder) = try makeFarm(count: 3)
        let output = folder.appendingPathComponent("out")
        func shard(_ shard: String) throws {
            let result = try BuiltExporter.run(["batch", farm.path, "--output", output.path, "--shard", shard])
            #expect(result.status == 0, "\(result.error)")
        }
        func collect() throws -> BuiltExporter.Outcome {
            try BuiltExporter.run(["batch", farm.path, "--output", output.path, "--collect"])
        }
        try shard("1/2")
        try shard("2/2")
        #expect(try collect().status == 0)
        let first = try report(folder)
        let shardReports = ["1", "2"].map { output.appendingPathComponent("farm-report-shard-\($0)-of-2.json") }
        let marks = try shardReports.map {
            try JSONDecoder().decode(FarmReport.self, from: Data(contentsOf: $0)).collected
        }
        #expect(marks[0] != nil && marks[0]?.count == 64 && marks[0] == marks[1])
        // The same reports again: the same result.
        #expect(try collect().status == 0)
        #expect(try report(folder).jobs == first.jobs)
        // Shard 2/2 runs again, 1/2 does not (as on a night its machine was down): its report is the one merged before.
        try shard("2/2")
        let failed = try collect()
        #expect(failed.status == 65)
        #expect(
            failed.error
                == "Error: cannot collect shard reports: 'farm-report-shard-1-of-2.json' was merged by an earlier "
                + "collect and its shard (1/2) has not run since, while others have; run it again, or give every shard "
                + "and the collect one --run-id\n")
        #expect(!FileManager.default.fileExists(atPath: output.appendingPathComponent("farm-report.json").path))
        try shard("1/2")
        #expect(try collect().status == 0)
        #expect(try report(folder).jobs.map(\.status) == ["skipped", "skipped", "skipped"])
    }

    @Test(
        "a collect merges one split's reports only: a copy, an overlap, a gap, a shard beyond the split, a farm renamed"
    )
    func collectRefusals() throws {
        let (farm, folder) = try makeFarm(count: 3)
        let output = folder.appendingPathComponent("out")
        func shard(_ shard: String, run: String? = nil) throws {
            let result = try BuiltExporter.run(
                ["batch", farm.path, "--output", output.path, "--shard", shard] + (run.map { ["--run-id", $0] } ?? []))
            #expect(result.status == 0, "\(result.error)")
        }
        func collect(_ farmFile: URL? = nil, run: String? = nil) throws -> BuiltExporter.Outcome {
            try BuiltExporter.run(
                ["batch", (farmFile ?? farm).path, "--output", output.path, "--collect"]
                    + (run.map { ["--run-id", $0] } ?? []))
        }
        func refusal(_ farmFile: URL? = nil) throws -> String {
            let failed = try collect(farmFile)
            #expect(failed.status == 65)
            #expect(!FileManager.default.fileExists(atPath: output.appendingPathComponent("farm-report.json").path))
            return failed.error
        }
        let prefix = "Error: cannot collect shard reports: "
        try shard("1/2")
        try shard("2/2")
        #expect(try collect().status == 0)
        let first = output.appendingPathComponent("farm-report-shard-1-of-2.json")
        let second = output.appendingPathComponent("farm-report-shard-2-of-2.json")
        let firstReport = try JSONDecoder().decode(FarmReport.self, from: Data(contentsOf: first))
        let secondData = try Data(contentsOf: second)
        let secondReport = try JSONDecoder().decode(FarmReport.self, from: secondData)
        // An editor's backup is no report; a second copy of a shard's is.
        let backup = output.appendingPathComponent("farm-report-shard-1-of-2.json~")
        try FileManager.default.copyItem(at: first, to: backup)
        #expect(try collect().status == 0)
        try FileManager.default.removeItem(at: backup)
        let copy = output.appendingPathComponent("farm-report-shard-1-of-2 (1).json")
        try FileManager.default.copyItem(at: first, to: copy)
        #expect(
            try refusal()
                == prefix
                + "'farm-report-shard-1-of-2 (1).json' and 'farm-report-shard-1-of-2.json' are both reports of shard 1/2\n"
        )
        try FileManager.default.removeItem(at: copy)
        // A job in two reports, or in none.
        let moved = try #require(firstReport.jobs.first)
        var overlapping = secondReport
        overlapping.jobs.append(moved)
        try Data(try overlapping.canonicalJSON()).write(to: second)
        #expect(
            try refusal()
                == prefix + "job '\(moved.name)' is in two shard reports, 'farm-report-shard-1-of-2.json' and "
                + "'farm-report-shard-2-of-2.json': their machines split the jobs differently (every machine needs the "
                + "model folders' config.json)\n")
        var short = secondReport
        let dropped = try #require(short.jobs.last)
        short.jobs.removeLast()
        try Data(try short.canonicalJSON()).write(to: second)
        #expect(try refusal() == prefix + "no result for job(s) \(dropped.name)\n")
        try secondData.write(to: second)
        // A shard beyond its split.
        var beyond = secondReport
        beyond.shard = "3/2"
        beyond.jobs = []
        let beyondURL = output.appendingPathComponent("farm-report-shard-3-of-2.json")
        try Data(try beyond.canonicalJSON()).write(to: beyondURL)
        #expect(try refusal() == prefix + "'farm-report-shard-3-of-2.json' is not the report of a shard\n")
        try FileManager.default.removeItem(at: beyondURL)
        // The same farm file under another name: its shards' reports name the one they ran.
        let renamed = folder.appendingPathComponent("nightly.json")
        try FileManager.default.copyItem(at: farm, to: renamed)
        #expect(
            try refusal(renamed)
                == prefix + "'farm-report-shard-1-of-2.json' is a report of farm 'farm.json', not of 'nightly.json': "
                + "collect with the farm file its shards ran\n")
        #expect(try collect().status == 0)
        // With --run-id, a shard run again (a CI retry) is merged beside a report collected before.
        try shard("1/2", run: "r")
        try shard("2/2", run: "r")
        #expect(try collect(run: "r").status == 0)
        try shard("2/2", run: "r")
        let retried = try collect(run: "r")
        #expect(retried.status == 0, "\(retried.error)")
        #expect(try report(folder).jobs.map(\.name) == ["job0", "job1", "job2"])
    }

    @Test("the farm digest follows the farm file, the files its jobs name and the presets, not the output")
    func farmDigest() throws {
        let folder = try Fixtures.temporaryDirectory("farm")
        let presets = folder.appendingPathComponent("Presets")
        try FileManager.default.copyItem(at: Fixtures.presetsDirectory, to: presets)
        let url = folder.appendingPathComponent("farm.json")
        let config = folder.appendingPathComponent("cfg.json")
        try Data(#"{"a": 1}"#.utf8).write(to: config)
        func digest(_ text: String) throws -> String {
            try Data(text.utf8).write(to: url)
            let settings = FarmSettings(
                outputDirectory: folder.appendingPathComponent("out"), concurrentJobs: 1,
                executable: URL(fileURLWithPath: "/nonexistent"), environment: [:])
            let resolver = ModelResolver(
                catalog: try PresetCatalog(directory: presets), locateInCache: { _ in nil },
                cacheDescription: { $0 })
            return FarmRunner(farm: try FarmFile(contentsOf: url), resolver: resolver, settings: settings).farmDigest()
        }
        let text =
            #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "qwen3-0.6b", "compression_config": "cfg.json"}]}"#
        let base = try digest(text)
        #expect(try digest(text) == base)
        #expect(try digest(text + "\n") != base)
        try Data(#"{"a": 2}"#.utf8).write(to: config)
        let edited = try digest(text)
        #expect(edited != base)
        try FileManager.default.removeItem(at: config)
        #expect(try digest(text) != edited)
        try Data(#"{"a": 2}"#.utf8).write(to: config)
        #expect(try digest(text) == edited)
        let devices = presets.appendingPathComponent("devices.json")
        try Data((try String(contentsOf: devices, encoding: .utf8) + " ").utf8).write(to: devices)
        let table = try digest(text)
        #expect(table != edited)
        // Hidden files are no presets: a Finder's .DS_Store on one machine changes nothing.
        try Data("x".utf8).write(to: presets.appendingPathComponent(".DS_Store"))
        try FileManager.default.createDirectory(
            at: presets.appendingPathComponent(".git"), withIntermediateDirectories: true)
        try Data("y".utf8).write(to: presets.appendingPathComponent(".git/HEAD"))
        #expect(try digest(text) == table)
        // Nor is an empty folder, which git does not keep: one checkout has it, another not.
        try FileManager.default.createDirectory(
            at: presets.appendingPathComponent("empty"), withIntermediateDirectories: true)
        #expect(try digest(text) == table)
        // Known answer: the version, the farm file, each file a job names, then every file of the
        // presets in path order, whatever order the file system lists them in.
        var expected = SHA256()
        for field in ["exporter.farm-digest/1", ToolVersion.current, try FarmFile(contentsOf: url).contentDigest] {
            expected.update(field: field)
        }
        func add(_ file: URL) throws {
            let data = try Data(contentsOf: file)
            expected.update(field: "bytes \(data.count)")
            expected.update(data)
        }
        expected.update(field: "a|compression_config|cfg.json")
        try add(config)
        let files = try FileManager.default.subpathsOfDirectory(atPath: presets.path).filter { path in
            var isDirectory: ObjCBool = false
            return !path.split(separator: "/").contains { $0.hasPrefix(".") }
                && FileManager.default.fileExists(
                    atPath: presets.appendingPathComponent(path).path, isDirectory: &isDirectory)
                && !isDirectory.boolValue
        }
        #expect(files.count > 10)
        for path in files.sorted() {
            expected.update(field: "presets|\(path)")
            try add(presets.appendingPathComponent(path))
        }
        #expect(try digest(text) == expected.hexDigest())
        // A job's device table is in it, as its compression config is.
        let deviceTable = folder.appendingPathComponent("table.json")
        try Data(#"{"b": 1}"#.utf8).write(to: deviceTable)
        let withTable =
            #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "qwen3-0.6b", "devices": ["h17p"], "#
            + #""device_table": "table.json"}]}"#
        let tableBase = try digest(withTable)
        try Data(#"{"b": 2}"#.utf8).write(to: deviceTable)
        #expect(try digest(withTable) != tableBase)
        // A job's file named through a link and '..' is the file its export reads: beside the link's target.
        let inner = folder.appendingPathComponent("sub/inner")
        try FileManager.default.createDirectory(at: inner, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: folder.appendingPathComponent("link"), withDestinationURL: inner)
        let linked =
            #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "qwen3-0.6b", "#
            + #""compression_config": "link/../cfg.json"}]}"#
        try Data(#"{"c": 1}"#.utf8).write(to: folder.appendingPathComponent("sub/cfg.json"))
        let linkedBase = try digest(linked)
        try Data(#"{"c": 2}"#.utf8).write(to: folder.appendingPathComponent("sub/cfg.json"))
        #expect(try digest(linked) != linkedBase)
    }

    @Test("the farm digest is the presets' names and bytes whether the folder or its compression/ is a link")
    func farmDigestThroughLinks() throws {
        let folder = try Fixtures.temporaryDirectory("farm")
        let manager = FileManager.default
        let presets = folder.appendingPathComponent("Presets")
        try manager.copyItem(at: Fixtures.presetsDirectory, to: presets)
        let url = folder.appendingPathComponent("farm.json")
        try Data(#"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "qwen3-0.6b"}]}"#.utf8).write(to: url)
        func digest(_ directory: URL) throws -> String {
            let settings = FarmSettings(
                outputDirectory: folder.appendingPathComponent("out"), concurrentJobs: 1,
                executable: URL(fileURLWithPath: "/nonexistent"), environment: [:])
            let resolver = ModelResolver(
                catalog: try PresetCatalog(directory: directory), locateInCache: { _ in nil },
                cacheDescription: { $0 })
            return FarmRunner(farm: try FarmFile(contentsOf: url), resolver: resolver, settings: settings).farmDigest()
        }
        func append(_ text: String, to file: URL) throws {
            try Data((try String(contentsOf: file, encoding: .utf8) + text).utf8).write(to: file)
        }
        let real = try digest(presets)
        // The folder reached through a link, with or without a final '/': the same presets.
        let link = folder.appendingPathComponent("linked")
        try manager.createSymbolicLink(at: link, withDestinationURL: presets)
        #expect(try digest(link) == real)
        #expect(try digest(URL(fileURLWithPath: link.path + "/", isDirectory: true)) == real)
        #expect(
            FarmRunner.presetFiles(in: link).map(\.path) == [
                "checkpoints/Mistral-7B-Instruct-v0.3/config.json", "checkpoints/Qwen2.5-1.5B-Instruct/config.json",
                "checkpoints/Qwen3-0.6B/config.json", "checkpoints/Qwen3-4B/config.json",
                "compression/4bit_quality.json", "compression/4bit_weight_palettized_group32.json",
                "compression/4bit_weight_palettized_group8.json", "compression/qwen3-0.6b_mixed_4bit_8bit.json",
                "compression/qwen3-4b_mixed_4bit_8bit.json", "devices.json", "farm.json", "presets.json",
            ])
        // A file edited behind the link changes it.
        try append(" ", to: presets.appendingPathComponent("devices.json"))
        let edited = try digest(link)
        #expect(edited != real)
        #expect(try digest(presets) == edited)
        // compression/ a link to a folder elsewhere: the same presets again, and its files count.
        let moved = folder.appendingPathComponent("compression_ext")
        try manager.moveItem(at: presets.appendingPathComponent("compression"), to: moved)
        try manager.createSymbolicLink(at: presets.appendingPathComponent("compression"), withDestinationURL: moved)
        #expect(try digest(presets) == edited)
        #expect(try digest(link) == edited)
        try append(" ", to: moved.appendingPathComponent("4bit_weight_palettized_group8.json"))
        let config = try digest(link)
        #expect(config != edited)
        #expect(try digest(presets) == config)
        // A link back to a folder being walked is one entry, not an endless walk; one leading
        // nowhere is an entry too, the same through either path.
        try manager.createSymbolicLink(at: moved.appendingPathComponent("loop"), withDestinationURL: presets)
        try manager.createSymbolicLink(
            at: presets.appendingPathComponent("gone.json"), withDestinationURL: folder.appendingPathComponent("none"))
        let entries = FarmRunner.presetFiles(in: link).filter { $0.kind == .loop || $0.kind == .unreadable }
        #expect(
            entries == [
                FarmRunner.PresetEntry(path: "compression/loop", kind: .loop),
                FarmRunner.PresetEntry(path: "gone.json", kind: .unreadable),
            ])
        let looped = try digest(presets)
        #expect(looped != config)
        #expect(try digest(link) == looped)
        // A presets folder that is not there adds no entry of its own.
        #expect(FarmRunner.presetFiles(in: folder.appendingPathComponent("no-such-presets")).isEmpty)
    }

    @Test("a farm file reached through a link to its own folder: paths under it are relative in either form")
    func farmRelativeThroughLink() throws {
        let folder = try Fixtures.temporaryDirectory("farm")
        try Data(#"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "qwen3-0.6b"}]}"#.utf8).write(
            to: folder.appendingPathComponent("farm.json"))
        // `up` is the folder itself: its resolved path is the start of the path given.
        let up = folder.appendingPathComponent("up")
        try FileManager.default.createSymbolicLink(at: up, withDestinationURL: folder)
        let settings = FarmSettings(
            outputDirectory: folder.appendingPathComponent("out"), concurrentJobs: 1,
            executable: URL(fileURLWithPath: "/nonexistent"), environment: [:])
        let runner = FarmRunner(
            farm: try FarmFile(contentsOf: up.appendingPathComponent("farm.json")), resolver: try Fixtures.resolver(),
            settings: settings)
        let real = try #require(resolvedRealPath(folder.path))
        #expect(runner.farmRelative("in '\(up.path)/ck/m'") == "in 'ck/m'")
        #expect(runner.farmRelative("in '\(real)/ck/m'") == "in 'ck/m'")
    }

    @Test("on a terminal, a job's error of several lines is printed line by line")
    func multiLineJobError() throws {
        let folder = try Fixtures.temporaryDirectory("farm")
        let farm = folder.appendingPathComponent("farm.json")
        try Data(
            (#"{"schema": "exporter.farm/1", "jobs": [{"name": "job0", "model": "org/nosuch", "experimental": true, "#
                + #""compute_precision": "float16"}]}"#).utf8
        ).write(to: farm)
        let run = runExporter(
            ["batch", farm.path, "--output", folder.appendingPathComponent("out").path], terminal: true)
        #expect(run.status == 1)
        #expect(
            run.error.hasPrefix(
                "job0: failed — 'org/nosuch' was not found; tried:\n"
                    + "  - a local directory 'org/nosuch' in the farm file's folder: none\n"))
    }

    @Test("a job's model is looked for beside the farm file only, by the farm's plan and by its export")
    func modelBesideFarmFileOnly() throws {
        let root = try Fixtures.temporaryDirectory("farm")
        let manager = FileManager.default
        let (farmFolder, current) = (root.appendingPathComponent("X"), root.appendingPathComponent("Y"))
        // The current folder holds a checkpoint `ck/m`, a folder `Acme/Tiny` and the (relative)
        // Hugging Face home, whose cache holds `Acme/Tiny`; the farm file's folder, a folder `kk`.
        for folder in ["X/kk", "Y/ck", "Y/Acme"] {
            try manager.createDirectory(at: root.appendingPathComponent(folder), withIntermediateDirectories: true)
        }
        try manager.moveItem(
            at: try Fixtures.syntheticCheckpoint(modelType: "qwen2"), to: current.appendingPathComponent("ck/m"))
        try manager.moveItem(
            at: try Fixtures.syntheticCheckpoint(modelType: "mistral"), to: current.appendingPathComponent("Acme/Tiny"))
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        let revision = "0123456789abcdef0123456789abcdef01234567"
        let repository = current.appendingPathComponent("hf/hub/models--Acme--Tiny")
        try manager.createDirectory(
            at: repository.appendingPathComponent("snapshots"), withIntermediateDirectories: true)
        try manager.createDirectory(at: repository.appendingPathComponent("refs"), withIntermediateDirectories: true)
        try Data((revision + "\n").utf8).write(to: repository.appendingPathComponent("refs/main"))
        try manager.copyItem(at: checkpoint, to: repository.appendingPathComponent("snapshots/\(revision)"))
        try Data(
            (#"{"schema": "exporter.farm/1", "jobs": ["#
                + #"{"name": "a", "model": "ck/m", "experimental": true, "compute_precision": "float16"}, "#
                + #"{"name": "b", "model": "Acme/Tiny", "experimental": true, "compute_precision": "float16"}, "#
                + #"{"name": "c", "model": "ck/zz"}, {"name": "d", "model": "kk/zz"}]}"#).utf8
        ).write(to: farmFolder.appendingPathComponent("farm.json"))
        let run = try BuiltExporter.run(
            ["batch", "../X/farm.json", "--output", "../out"], environment: ["HF_HOME": "hf"], directory: current)
        #expect(run.status == 1, "\(run.error)")
        let jobs = try report(root).jobs
        #expect(jobs.map(\.status) == ["failed", "built", "failed", "failed"])
        #expect(
            jobs[0].error
                == [
                    "'ck/m' was not found; tried:", "  - a local directory 'ck/m' in the farm file's folder: none",
                    "  - a preset named 'ck/m': none (run 'exporter list')",
                    "  - the Hugging Face cache: \(repository.deletingLastPathComponent().path)/models--ck--m is absent",
                ].joined(separator: "\n"))
        #expect(jobs[0].exitStatus == 66)
        // The cache's, not the current folder's: the export too runs in the farm file's folder,
        // and finds the cache the farm found from its own (relative `HF_HOME`).
        let bundle = try BundleReader(url: root.appendingPathComponent("out/\(try #require(jobs[1].bundle))"))
        #expect(bundle.manifest.model.source.kind == "huggingface-cache")
        #expect(bundle.manifest.model.source.repoID == "Acme/Tiny")
        #expect(bundle.manifest.model.source.revision == revision)
        // A mistyped path's hint looks beside the farm file, not in the current folder.
        let refused = [
            "has no registry preset. Set \"experimental\": true to try exporting it anyway (with 'compute_precision').",
            "Supported models: run 'exporter list' (docs in README.md).",
            "This model may not be suitable for iOS application due to its memory requirements.",
        ]
        #expect(jobs[2].error == (["'ck/zz' " + refused[0]] + refused.dropFirst()).joined(separator: "\n"))
        #expect(
            jobs[3].error
                == (["'kk/zz' " + refused[0]] + refused.dropFirst()
                + [
                    "There is no folder 'kk/zz' beside the farm file, though 'kk' is one: if you meant a checkpoint "
                        + "folder, check the path."
                ]).joined(separator: "\n"))
    }

    @Test("a record of verified files that cannot be saved is a warning, in a pipe too")
    func unsavedRecordWarning() throws {
        let (farm, folder) = try makeFarm(count: 1)
        let output = folder.appendingPathComponent("out")
        let record = output.appendingPathComponent(VerifiedFiles.fileName)
        try FileManager.default.createDirectory(at: record, withIntermediateDirectories: true)
        let run = try BuiltExporter.run(["batch", farm.path, "--output", output.path])
        #expect(run.status == 0, "\(run.error)")
        #expect(run.error == "warning: cannot write '\(record.path)': is a directory\n")
    }

    @Test("batch options that conflict or would do nothing are usage errors")
    func strayOptions() throws {
        let (farm, folder) = try makeFarm(count: 1)
        let output = folder.appendingPathComponent("out").path
        let cases: [([String], String)] = [
            (["--shards", "3"], "--shards applies to --matrix; pass --matrix too"),
            (["--output", output, "--shards", "3", "--collect"], "--shards applies to --matrix; pass --matrix too"),
            (
                ["--output", output, "--collect", "--shard", "1/2"],
                "--shard does not apply to --collect, which merges every shard's report without running jobs"
            ),
            (
                ["--output", output, "--collect", "--force"],
                "--force does not apply to --collect, which merges every shard's report without running jobs"
            ),
            (["--matrix", "--collect"], "--matrix and --collect cannot be used together"),
            (
                ["--matrix", "--shard", "1/2"],
                "--shard does not apply to --matrix, which only prints the shard list"
            ),
            (
                ["--matrix", "--output", output],
                "--output does not apply to --matrix, which only prints the shard list"
            ),
            (["--matrix", "--jobs", "2"], "--jobs does not apply to --matrix, which only prints the shard list"),
            (
                ["--output", output, "--jobs", "99999999999999999999"],
                "--jobs expects an integer from 1 to 1000000, got '99999999999999999999'"
            ),
            (
                ["--matrix", "--run-id", "7"],
                "--run-id does not apply to --matrix, which only prints the shard list"
            ),
            (
                ["--output", output, "--run-id", "a\u{1B}b"],
                "--run-id expects 1 to 128 bytes without control characters, got 'a\\u{1B}b'"
            ),
        ]
        // Each is a usage error whether or not the farm file is there: flags are checked first.
        for (options, message) in cases + [(["--jobs", "0"], "--jobs expects an integer from 1 to 1000000, got '0'")] {
            for file in [farm.path, folder.appendingPathComponent("nosuch.json").path] {
                let run = try BuiltExporter.run(["batch", file] + options)
                #expect(run.status == 64, "\(options)")
                #expect(
                    run.error == "Error: \(message)\n"
                        + "Usage: exporter batch <farm> [<options>]\n  See 'exporter batch --help' for more information.\n"
                )
            }
        }
        #expect(!FileManager.default.fileExists(atPath: output))
    }

    /// A runner of the farm file `text` (in `folder`), resolving models with `resolver`.
    private func shardRunner(_ text: String, in folder: URL, resolver: ModelResolver? = nil) throws -> FarmRunner {
        let farm = try FarmFile(bytes: Array(text.utf8), path: folder.appendingPathComponent("farm.json"))
        let settings = FarmSettings(
            outputDirectory: folder, concurrentJobs: 1, executable: URL(fileURLWithPath: "/nonexistent"),
            environment: [:])
        return FarmRunner(farm: farm, resolver: try resolver ?? Fixtures.resolver(), settings: settings)
    }

    /// Each shard's job names, of a split into `count`.
    private func split(_ runner: FarmRunner, _ count: Int) -> [[String]] {
        (1...count).map { runner.shardJobs(index: $0, count: count).map(\.name) }
    }

    @Test("shards take jobs by estimated cost, largest first, each to the least loaded shard, ties to the lower")
    func shardBalance() throws {
        let folder = try Fixtures.temporaryDirectory("farm")
        let jobs = [
            #"{"name": "a", "model": "qwen3-0.6b"}"#, #"{"name": "b", "model": "qwen2.5-1.5b-instruct"}"#,
            #"{"name": "c", "model": "qwen3-4b"}"#, #"{"name": "d", "model": "qwen3-0.6b"}"#,
        ]
        func farm(_ jobs: [String]) -> String {
            #"{"schema": "exporter.farm/1", "jobs": ["# + jobs.joined(separator: ", ") + "]}"
        }
        let runner = try shardRunner(farm(jobs), in: folder)
        // Parameters: c 4.02 B, b 1.54 B, a and d 0.60 B each. c alone outweighs the rest: shard 1
        // takes it, and b, a and d go one after the other to shard 2, still the lighter.
        #expect(split(runner, 2) == [["c"], ["a", "b", "d"]])
        // Three shards: c, then b, then a to the empty third; d joins a, lighter than b.
        #expect(split(runner, 3) == [["c"], ["b"], ["a", "d"]])
        // Four: a and d cost the same, and go by name, whatever their order in the file.
        #expect(split(runner, 4) == [["c"], ["b"], ["a"], ["d"]])
        let reversed = try shardRunner(farm(jobs.reversed()), in: folder)
        for count in 1...4 {
            #expect(split(reversed, count).map { $0.sorted() } == split(runner, count), "\(count) shards")
        }
    }

    @Test(
        "the split does not depend on weights being here: a model's config, never the Hugging Face cache, sets its cost"
    )
    func shardSplitWithoutWeights() throws {
        let folder = try Fixtures.temporaryDirectory("farm")
        // A checkpoint folder holding its config.json only (its weights are fetched on the shard's
        // machine), and an org/model id with a snapshot of Qwen3-4B's config in one cache only.
        let bare = folder.appendingPathComponent("bare")
        try FileManager.default.createDirectory(at: bare, withIntermediateDirectories: true)
        let qwen3 = Fixtures.presetsDirectory.appendingPathComponent("checkpoints/Qwen3-4B/config.json")
        try FileManager.default.copyItem(at: qwen3, to: bare.appendingPathComponent("config.json"))
        let snapshot = folder.appendingPathComponent("snapshot")
        try FileManager.default.createDirectory(at: snapshot, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: qwen3, to: snapshot.appendingPathComponent("config.json"))
        let text =
            #"{"schema": "exporter.farm/1", "defaults": {"experimental": true, "compute_precision": "float16"}, "#
            + #""jobs": [{"name": "a", "model": "qwen3-4b"}, {"name": "b", "model": "org/big"}, "#
            + #"{"name": "c", "model": "qwen2.5-1.5b-instruct"}, {"name": "d", "model": "qwen3-0.6b"}, "#
            + #"{"name": "e", "model": "bare"}]}"#
        let cached = try shardRunner(
            text, in: folder, resolver: try Fixtures.resolver(cache: ["org/big": (snapshot, "main")]))
        let bareMachine = try shardRunner(text, in: folder)
        // a and e are Qwen3-4B (e from its folder's config), b costs 1 wherever the cache holds it.
        #expect(cached.splitCost(of: cached.farm.jobs[1]) == 1)
        #expect(cached.splitCost(of: cached.farm.jobs[4]) == cached.splitCost(of: cached.farm.jobs[0]))
        for count in 1...5 {
            #expect(split(cached, count) == split(bareMachine, count), "\(count) shards")
        }
        #expect(split(cached, 2) == [["a", "c"], ["b", "d", "e"]])
        // A job's preset gives its config, even where its model folder is missing.
        let preset = try shardRunner(
            #"{"schema": "exporter.farm/1", "jobs": [{"name": "f", "model": "missing", "preset": "qwen3-4b"}]}"#,
            in: folder)
        #expect(preset.splitCost(of: preset.farm.jobs[0]) == cached.splitCost(of: cached.farm.jobs[0]))
    }

    @Test("a job counts as failed when its export or any of its devices failed, once however many devices did")
    func failedCount() {
        func job(_ name: String, _ status: String, devices: [String]) -> FarmJobResult {
            var result = FarmJobResult(
                name: name, status: status, bundleStatus: status, bundle: nil, bundleBytes: nil, buildKey: nil,
                error: status == "failed" ? "its export failed" : nil, exitStatus: status == "failed" ? 65 : 0,
                devices: devices.enumerated().map {
                    $0.element == "failed"
                        ? FarmDeviceResult(
                            device: "d\($0.offset)", status: "failed", error: "d\($0.offset) failed",
                            exitStatus: Int32(70 + $0.offset))
                        : FarmDeviceResult(device: "d\($0.offset)", status: $0.element)
                })
            result.includeDeviceFailures()
            return result
        }
        let jobs = [
            job("a", "built", devices: ["built", "failed"]), job("b", "skipped", devices: ["skipped", "built"]),
            job("c", "failed", devices: []), job("d", "skipped", devices: ["failed", "failed"]),
        ]
        #expect(jobs.map(\.status) == ["failed", "skipped", "failed", "failed"])
        #expect(jobs.map(\.bundleStatus) == ["built", "skipped", "failed", "skipped"])
        #expect(jobs.map(\.exitStatus) == [71, 0, 65, 70])
        #expect(
            jobs.map(\.error) == [
                "device d1: d1 failed", nil, "its export failed", "device d0: d0 failed\ndevice d1: d1 failed",
            ])
        let report = FarmReport(farm: "farm.json", farmDigest: "", runID: nil, shard: nil, jobs: jobs, seconds: [:])
        #expect(report.failedCount == 3)
    }

    @Test("a device whose compile fails fails its job with the compile's exit status, and has no artifact")
    func failedCompile() throws {
        let (farmURL, folder) = try makeFarm(count: 1)
        let text = try String(contentsOf: farmURL, encoding: .utf8)
        try Data(
            text.replacingOccurrences(
                of: #""output_name": "M0""#, with: #""output_name": "M0", "devices": ["h17p", "h16p"]"#
            ).utf8
        ).write(to: farmURL)
        // An exporter whose compiles fail as on a full disk, after writing part of the artifact.
        let wrapper = folder.appendingPathComponent("exporter-full-disk")
        try Data(
            """
            #!/bin/sh
            if [ "$1" = compile ]; then
              mkdir -p "$8/M0.h17p.aimodelc" && echo "Error: cannot write '$8/M0.h17p.aimodelc': no space left on device" >&2
              exit 74
            fi
            exec '\(BuiltExporter.url.path)' "$@"

            """.utf8
        ).write(to: wrapper)
        #expect(chmod(wrapper.path, 0o755) == 0)
        let settings = FarmSettings(
            outputDirectory: folder.appendingPathComponent("out"), concurrentJobs: 1, executable: wrapper,
            environment: BuiltExporter.cleanEnvironment)
        let runner = FarmRunner(
            farm: try FarmFile(contentsOf: farmURL), resolver: try Fixtures.resolver(), settings: settings)
        let job = try #require(try runner.run().jobs.first)
        // The output folder is inside the farm file's: named relative to it.
        let error = "cannot write 'out/m0/M0.h17p.aimodelc': no space left on device"
        #expect(job.status == "failed")
        #expect(job.bundleStatus == "built")
        #expect(job.exitStatus == 74)
        #expect(job.error == "device h17p: \(error)\ndevice h16p: \(error)")
        #expect(
            job.devices
                == ["h17p", "h16p"].map {
                    FarmDeviceResult(
                        device: $0, status: "failed", artifact: nil, memory: nil, neuralEngine: nil, error: error,
                        exitStatus: 74)
                })
    }

    @Test("a farm killed mid-run leaves no report, and finishes on the next run, every artifact whole, no staging left")
    func killed() throws {
        let (farm, folder) = try makeFarm(count: 4)
        let output = folder.appendingPathComponent("out")
        // An earlier run's report, which the killed run must not leave behind as if it were its own.
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let stale = output.appendingPathComponent("farm-report.json")
        try Data("{}".utf8).write(to: stale)
        let running = try BuiltExporter.start(["batch", farm.path, "--output", output.path, "--jobs", "1"])
        // Kill as soon as the first job has started writing.
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            let entries = (try? FileManager.default.subpathsOfDirectory(atPath: output.path)) ?? []
            if entries.contains(where: { $0.contains(ArtifactDirectory.stagingPrefix) || $0.hasSuffix(".aimodel") }) {
                break
            }
            usleep(2_000)
        }
        kill(running.process.processIdentifier, SIGKILL)
        let killed = running.finish()
        #expect(killed.signaled)
        #expect(!FileManager.default.fileExists(atPath: stale.path))
        let rerun = try BuiltExporter.run(["batch", farm.path, "--output", output.path])
        #expect(rerun.status == 0, "\(rerun.error)")
        let final = try report(folder)
        #expect(final.jobs.allSatisfy { $0.status != "failed" })
        for job in final.jobs {
            _ = try BundleReader(url: output.appendingPathComponent(try #require(job.bundle)))
        }
        let leftovers = (try FileManager.default.subpathsOfDirectory(atPath: output.path))
            .filter { $0.contains(ArtifactDirectory.stagingPrefix) }
        #expect(leftovers.isEmpty)
    }

    /// A farm folder whose farm file holds job `slow`, the qwen3-0.6b preset on generated weights
    /// (an export of several seconds: long enough to be found and signalled while it runs),
    /// after `job0`, a tiny checkpoint's, when `withTinyJob`.
    private func makeFarmWithSlowJob(withTinyJob: Bool) throws -> (farm: URL, folder: URL) {
        let (farm, folder) = try makeFarm(count: 1)
        let tiny =
            #"{"name": "job0", "model": "m0", "experimental": true, "compute_precision": "float16"}, "#
        try Data(
            (#"{"schema": "exporter.farm/1", "jobs": ["# + (withTinyJob ? tiny : "")
                + #"{"name": "slow", "model": "qwen3-0.6b", "synthetic": true}]}"#).utf8
        ).write(to: farm)
        return (farm, folder)
    }

    /// The farm's child process exporting job `slow`, once it runs the exporter (nil after a minute).
    private func slowExport(of farm: pid_t) -> pid_t? {
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            if let child = ProcessTable.children(of: farm).first(where: {
                $0.arguments.contains("qwen3-0.6b") && $0.arguments.contains("--synthetic")
            }) {
                return child.id
            }
            usleep(2_000)
        }
        return nil
    }

    @Test(
        "a job's export stopped by SIGTERM ends and is reported with exit status 143; the other job is built",
        .enabled(if: FileManager.default.fileExists(atPath: "/proc/self/stat")))
    func jobStoppedBySignal() throws {
        let (farm, folder) = try makeFarmWithSlowJob(withTinyJob: true)
        let running = try BuiltExporter.start([
            "batch", farm.path, "--output", folder.appendingPathComponent("out").path, "--jobs", "2",
        ])
        let child = try #require(slowExport(of: running.process.processIdentifier))
        // The farm handles the signals that end it itself (it removes its report's temporary file).
        let handled = ProcessTable.set(of: [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM])
        #expect(ProcessTable.signalSet("SigCgt", of: running.process.processIdentifier).map { $0 & handled } == handled)
        // Dispatch's worker threads, which start the jobs, block every other signal: a child
        // used to inherit that mask (fffffffe3bfbea27) and ignore SIGTERM, SIGINT and SIGHUP.
        // Read until it is seen empty: while the child starts a thread, glibc blocks every
        // signal in the starting thread for a moment.
        var masks: [String] = []
        for _ in 0..<200 where masks.last != "0" {
            masks.append(ProcessTable.signalSet("SigBlk", of: child).map { String($0, radix: 16) } ?? "gone")
            usleep(5_000)
        }
        #expect(masks.last == "0", "\(masks)")
        // The farm's pipes reach the job's export as its standard error only: not the one the farm's
        // signal handler writes to, which is close-on-exec.
        func pipes(_ id: pid_t) -> Set<String> {
            let folder = "/proc/\(id)/fd"
            return Set(
                ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).compactMap {
                    try? FileManager.default.destinationOfSymbolicLink(atPath: "\(folder)/\($0)")
                }.filter { $0.hasPrefix("pipe:") })
        }
        let shared = pipes(running.process.processIdentifier).intersection(pipes(child))
        #expect(shared.count == 1, "\(shared)")
        kill(child, SIGTERM)
        let ended = ProcessTable.waitForEnd(child, seconds: 10)
        #expect(ended, "the job's export ignored SIGTERM")
        if !ended { kill(child, SIGKILL) }
        let run = running.finish()
        #expect(run.status == 1)
        #expect(run.error == "Error: 1 of 2 jobs failed\n")
        let jobs = try report(folder).jobs
        #expect(jobs.map(\.status) == ["built", "failed"])
        #expect(jobs[1].exitStatus == 143)
        #expect(jobs[1].error == "the export was killed by signal 15")
        _ = try BundleReader(url: folder.appendingPathComponent("out/m0/m0.aimodel"))
    }

    @Test(
        "a farm stopped by SIGTERM or SIGINT ends by that signal, and its running export ends with it",
        .enabled(if: FileManager.default.fileExists(atPath: "/proc/self/stat")))
    func farmStoppedBySignal() throws {
        for signal in [SIGTERM, SIGINT] {
            let (farm, folder) = try makeFarmWithSlowJob(withTinyJob: false)
            // Started as a shell starts it: this test's thread blocks the signals the farm must act on.
            let running = try ChildProcess.start(
                BuiltExporter.url,
                arguments: ["batch", farm.path, "--output", folder.appendingPathComponent("out").path],
                environment: BuiltExporter.cleanEnvironment)
            let child = try #require(slowExport(of: running.id))
            let output = folder.appendingPathComponent("out")
            func staging() -> [String] {
                (FileManager.default.subpaths(atPath: output.path) ?? []).filter {
                    $0.contains(ArtifactDirectory.stagingPrefix)
                }
            }
            let deadline = Date().addingTimeInterval(60)
            while staging().isEmpty && Date() < deadline { usleep(1_000) }
            #expect(!staging().isEmpty, "the job filled no staging folder (signal \(signal))")
            kill(running.id, signal)
            let (status, caught, _) = running.finish()
            #expect(status == 128 + signal)
            #expect(caught == signal)
            // The job polls its parent and ends once the farm has gone, removing its staging folder.
            let ended = ProcessTable.waitForEnd(child, seconds: 10)
            #expect(ended, "the job outlived its farm (signal \(signal))")
            if !ended { kill(child, SIGKILL) }
            #expect(staging() == [], "signal \(signal)")
        }
    }

    @Test("exports whose conversion forecasts do not fit together run one at a time, whatever --jobs says")
    func memoryBudget() throws {
        let (farmURL, folder) = try makeFarm(count: 3)
        let farm = try FarmFile(contentsOf: farmURL)
        let environment = BuiltExporter.cleanEnvironment
        func runner(capacity: Int?, output: String) throws -> FarmRunner {
            var settings = FarmSettings(
                outputDirectory: folder.appendingPathComponent(output), concurrentJobs: 3,
                executable: BuiltExporter.url,
                environment: environment)
            settings.availableMemoryBytes = capacity
            return FarmRunner(farm: farm, resolver: try Fixtures.resolver(), settings: settings)
        }
        let probe = try runner(capacity: nil, output: "probe")
        let forecasts = try farm.jobs.map { job in
            let plan = try ExportPlan.make(options: probe.options(of: job), resolver: probe.resolver)
            return ExportRunner.conversionForecast(plan, availableBytes: nil).peakBytes
        }
        #expect(forecasts.allSatisfy { $0 > 0 })
        // No two fit together.
        let capacity = 2 * forecasts.min()! - 1
        let serial = try runner(capacity: capacity, output: "out")
        let lines = Locked<[String]>([])
        let report = try serial.run { message in lines.mutate { $0.append(message.text) } }
        #expect(report.jobs.map(\.status) == ["built", "built", "built"])
        #expect(serial.memory.peakHolders == 1)
        for line in lines.value where line.contains("waiting") {
            #expect(line.contains(": waiting for memory: its export needs about "))
            #expect(line.contains(", 1 running holds ") && line.hasSuffix(" of \(Format.mebibytes(capacity))"))
        }
        // Another run holds all the memory until 5 s after a job says it waits: that wait is a
        // notice, which a CI log shows too; a job's end is progress.
        let blocked = try runner(capacity: capacity, output: "blocked")
        blocked.memory.hold(capacity)
        let waiting = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            waiting.wait()
            usleep(5_000_000)
            blocked.memory.release(capacity)
        }
        let messages = Locked<[FarmMessage]>([])
        let blockedReport = try blocked.run { message in
            messages.mutate { $0.append(message) }
            if message.text.contains(": waiting for memory: ") { waiting.signal() }
        }
        #expect(blockedReport.jobs.map(\.status) == ["built", "built", "built"])
        let waits = messages.value.filter { $0.text.contains(": waiting for memory: ") }
        #expect(!waits.isEmpty)
        #expect(waits.allSatisfy { $0 == .notice($0.text) })
        #expect(messages.value.filter { $0 == .jobEnded($0.text) }.count == 3)
        // A job's time is its own: the wait for memory others held is not in it (an export of a
        // tiny checkpoint takes a fraction of a second, well under 4.5 s on a loaded machine too).
        #expect(blockedReport.seconds.count == 3)
        #expect(blockedReport.seconds.values.allSatisfy { $0 < 4.5 }, "\(blockedReport.seconds)")
        // The same bundles as a run without a limit.
        let free = try runner(capacity: nil, output: "free")
        #expect(try free.run().jobs.map(\.buildKey) == report.jobs.map(\.buildKey))
    }

    @Test("a wait for memory says why: the export does not fit, or it fits but waits behind an earlier one")
    func memoryWaitText() {
        let mebibyte = 1024 * 1024
        #expect(
            FarmRunner.memoryWaitText(
                job: "s2", forecast: 254 * mebibyte, wait: .memory(heldBytes: 254 * mebibyte, holders: 1),
                capacity: 400 * mebibyte)
                == "s2: waiting for memory: its export needs about 254.0 MiB, 1 running holds 254.0 MiB of 400.0 MiB")
        #expect(
            FarmRunner.memoryWaitText(
                job: "t1", forecast: 119 * mebibyte, wait: .behind(label: "s2", bytes: 254 * mebibyte),
                capacity: 400 * mebibyte)
                == "t1: waiting for memory: its export needs about 119.0 MiB, which fits, but waits behind job 's2' "
                + "(about 254.0 MiB), which came first")
    }

    @Test("a farm's jobs get the presets and the cache the farm reads by absolute paths, the rest of its environment")
    func jobEnvironment() {
        let context = CommandContext(
            arguments: [], environment: ["EXPORTER_PRESETS": "presets", "HF_HOME": "~/hf", "HOME": "/home/u"],
            currentDirectory: URL(fileURLWithPath: "/work", isDirectory: true),
            executable: URL(fileURLWithPath: "/nonexistent/exporter"), writeOutput: { _ in }, writeError: { _ in },
            errorIsTerminal: false)
        #expect(
            BatchCommand.jobEnvironment(context, presets: URL(fileURLWithPath: "/work/presets", isDirectory: true))
                == [
                    "EXPORTER_PRESETS": "/work/presets", "HF_HOME": "~/hf", "HOME": "/home/u",
                    "HF_HUB_CACHE": "/home/u/hf/hub",
                ])
    }

    @Test("a mistyped path's hint names a folder beside the farm file, and only a folder, for an id-shaped model")
    func farmPathHint() throws {
        let folder = try Fixtures.temporaryDirectory("farm")
        try FileManager.default.createDirectory(
            at: folder.appendingPathComponent("kk"), withIntermediateDirectories: true)
        try Data().write(to: folder.appendingPathComponent("ff"))
        #expect(
            FarmRunner.farmPathHint("kk/zz", farmDirectory: folder)
                == "There is no folder 'kk/zz' beside the farm file, though 'kk' is one: if you meant a checkpoint "
                + "folder, check the path.")
        // A file of that name is no folder mistyped; a name of no id's shape is no path.
        #expect(FarmRunner.farmPathHint("ff/zz", farmDirectory: folder) == nil)
        #expect(FarmRunner.farmPathHint("kk", farmDirectory: folder) == nil)
        #expect(FarmRunner.farmPathHint("nn/zz", farmDirectory: folder) == nil)
    }

    @Test("two jobs writing the same bundle: the later one fails, naming the earlier, in every run")
    func collidingJobs() throws {
        let (_, folder) = try makeFarm(count: 1)
        let farm = folder.appendingPathComponent("collide.json")
        try Data(
            (#"{"schema": "exporter.farm/1", "defaults": {"experimental": true, "compute_precision": "float16"}, "jobs": ["#
                + #"{"name": "short", "model": "m0", "context": 64}, {"name": "long", "model": "m0", "context": 256}, "#
                + #"{"name": "upper", "model": "m0", "output_name": "M0"}, "#
                + #"{"name": "odd", "model": "m0", "output_name": "Odd", "devices": ["h99x"]}]}"#)
                .utf8
        ).write(to: farm)
        let output = folder.appendingPathComponent("out").path
        for _ in 0..<2 {
            let run = try BuiltExporter.run(["batch", farm.path, "--output", output])
            #expect(run.status == 1)
            let jobs = try report(folder).jobs
            #expect(jobs.map(\.status).dropFirst() == ["failed", "failed", "failed"])
            #expect(["built", "skipped"].contains(jobs[0].status))
            // A device the table does not offer fails the job before its export.
            #expect(jobs[3].error?.hasPrefix("devices: unknown iOS architecture 'h99x'; known: ") == true)
            // Apple Vision Pro's architecture, which an iOS job takes, is among those named.
            #expect(jobs[3].error?.hasSuffix(", h17p, h14g (visionOS)") == true, "\(jobs[3].error ?? "")")
            #expect(jobs[3].bundle == nil)
            #expect(
                jobs[1].error
                    == "writes the same bundle as job 'short' ('m0/m0.aimodel'); give one of them another 'output_name'"
            )
            #expect(jobs[1].exitStatus == 65)
            // The same folder on a case-insensitive file system, named as the earlier job writes it.
            #expect(
                jobs[2].error
                    == "writes the same bundle as job 'short' ('m0/m0.aimodel'; this job's 'm0/M0.aimodel' is that "
                    + "folder where file names ignore case); give one of them another 'output_name'")
        }
        let bundle = try BundleReader(url: folder.appendingPathComponent("out/m0/m0.aimodel"))
        #expect(bundle.manifest.contextLength == 64)
    }

    @Test("text from the farm file is escaped in the table and the report; an error of several lines keeps them all")
    func escapedErrors() throws {
        let folder = try Fixtures.temporaryDirectory("farm")
        // The farm file's own name too, as the report records it.
        let farm = folder.appendingPathComponent("farm\u{1B}[31m\n.json")
        try Data(
            (#"{"schema": "exporter.farm/1", "defaults": {"experimental": true, "compute_precision": "float16"}, "#
                + #""jobs": [{"name": "x", "model": "bad\u001b[31mred\nline"}, {"name": "w", "model": "org/missing"}]}"#)
                .utf8
        ).write(to: farm)
        let output = folder.appendingPathComponent("out")
        let run = try BuiltExporter.run(["batch", farm.path, "--output", output.path])
        #expect(run.status == 1)
        let named =
            #"'bad\u{1B}[31mred\u{A}line' is not a registered short-name and doesn't look like a HuggingFace ID "#
            + "(expected 'org/model'). Run --list-models to see options."
        let tried = [
            "'org/missing' was not found; tried:",
            "  - a local directory 'org/missing' in the farm file's folder: none",
            "  - a preset named 'org/missing': none (run 'exporter list')",
            "  - the Hugging Face cache: /nonexistent-hf-home/hub/models--org--missing is absent",
        ]
        let written = try report(folder)
        #expect(written.farm == #"farm\u{1B}[31m\u{A}.json"#)
        let jobs = written.jobs
        #expect(jobs.map(\.error) == [named, tried.joined(separator: "\n")])
        #expect(jobs.map(\.exitStatus) == [66, 66])
        // One row a job, every line of the error in it.
        let lines = run.output.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == 5, "\(run.output)")
        #expect(lines[1].hasPrefix("x    failed  ") && lines[1].hasSuffix("  " + named))
        #expect(
            lines[2].hasPrefix("w    failed  ")
                && lines[2].hasSuffix(
                    "  'org/missing' was not found; tried: - a local directory 'org/missing' in the farm file's "
                        + "folder: none - a preset named 'org/missing': none (run 'exporter list') - the Hugging Face cache: "
                        + "/nonexistent-hf-home/hub/models--org--missing is absent")
        )
        #expect(!run.output.unicodeScalars.contains { $0.value == 0x1B })
    }

    @Test("a value found wrong only when its job runs is named by its farm key, with what the farm file can do")
    func jobTimeErrors() throws {
        let (farm, folder) = try makeFarm(count: 1)
        try Data(
            (#"{"schema": "exporter.farm/1", "jobs": ["#
                + #"{"name": "a", "model": "m0", "experimental": true, "compute_precision": "float16", "context": 100000}, "#
                + #"{"name": "b", "model": "m0"}, {"name": "c", "model": "qwen3-0.6b"}, "#
                + #"{"name": "d", "model": "m0", "experimental": true}]}"#).utf8
        ).write(to: farm)
        let run = try BuiltExporter.run(["batch", farm.path, "--output", folder.appendingPathComponent("out").path])
        #expect(run.status == 1)
        // The model folder as the farm file names it, relative to its folder.
        let checkpoint = "m0"
        let jobs = try report(folder).jobs
        #expect(
            jobs.map(\.error) == [
                "'context' (100000) exceeds the model's max_position_embeddings (512)",
                "'\(checkpoint)' has no registry preset. Set \"experimental\": true to try exporting it anyway (with "
                    + "'compute_precision').\nSupported models: run 'exporter list' (docs in README.md).\n"
                    + "This model may not be suitable for iOS application due to its memory requirements.",
                "no weights for 'qwen3-0.6b' on this machine (looked in "
                    + "/nonexistent-hf-home/hub/models--Qwen--Qwen3-0.6B); download them (huggingface-cli download "
                    + #"Qwen/Qwen3-0.6B), or set "synthetic" to "if-missing" or true to export generated weights"#,
                "'compute_precision' is required for '\(checkpoint)' (no registry preset found)",
            ])
        #expect(jobs.map(\.exitStatus) == [65, 69, 66, 65])
    }

    @Test("a child's usage error reaches the report without the usage lines, its own lines escaped")
    func childMessages() {
        let usage =
            Array(
                "warning: ignored\nError: --x expects y, got 'a\u{1B}'\nUsage: exporter [<model>] [<options>]\n"
                    .utf8) + Array("  See 'exporter --help' for more information.\n".utf8)
        #expect(FarmRunner.childMessage(usage) == #"--x expects y, got 'a\u{1B}'"#)
        let listed = Array("Error: cannot proceed; either:\n  - one\n  - two\n".utf8)
        #expect(FarmRunner.childMessage(listed) == "cannot proceed; either:\n  - one\n  - two")
    }

    @Test("an output that is a file, and a malformed shard, are refused in plain words")
    func badOutputAndShard() throws {
        let (farm, folder) = try makeFarm(count: 1)
        let file = folder.appendingPathComponent("a-file")
        try Data("x".utf8).write(to: file)
        let run = try BuiltExporter.run(["batch", farm.path, "--output", file.path])
        #expect(run.status == 74)
        #expect(run.error.hasPrefix("Error: cannot write '\(file.path)': "))
        #expect(!run.error.contains("NSCocoaErrorDomain"))
        for shard in ["1//2", "+1/2", "1/2/3", "0/2", "3/2", "a/2"] {
            let bad = try BuiltExporter.run([
                "batch", farm.path, "--output", folder.appendingPathComponent("out").path, "--shard", shard,
            ])
            #expect(bad.status == 64, "\(shard)")
            #expect(
                bad.error == "Error: --shard expects I/N with 1 ≤ I ≤ N, got '\(shard)'\n"
                    + "Usage: exporter batch <farm> [<options>]\n  See 'exporter batch --help' for more information.\n")
        }
    }

    @Test("a second farm run, or a collect, on a held output folder gives up with a clear message")
    func locked() throws {
        let (farm, folder) = try makeFarm(count: 1)
        let output = folder.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let lock = try FarmLock(directory: output, wait: false, log: { _ in })
        let run = try BuiltExporter.run(["batch", farm.path, "--output", output.path])
        // A collect too: a shard still running there has not written its report yet.
        let collect = try BuiltExporter.run(["batch", farm.path, "--output", output.path, "--collect"])
        lock.release()
        for refused in [run, collect] {
            #expect(refused.status == 74)
            #expect(
                refused.error
                    == "Error: another farm run (pid \(getpid())) is using '\(output.path)'; wait for it to finish or pass --wait\n"
            )
        }
    }

    @Test("a collect with --wait says what it waits for, in a pipe too, then goes on")
    func waitIsSaid() throws {
        let (farm, folder) = try makeFarm(count: 1)
        let output = folder.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let lock = try FarmLock(directory: output, wait: false, log: { _ in })
        let child = try BuiltExporter.start(["batch", farm.path, "--output", output.path, "--collect", "--wait"])
        // Released once the child waits on it: a blocked flock shows in /proc/locks as `->`.
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            #if os(Linux)
                let locks = (try? String(contentsOfFile: "/proc/locks", encoding: .utf8)) ?? ""
                let waiter = "-> FLOCK  ADVISORY  WRITE \(child.process.processIdentifier) "
                if locks.split(separator: "\n").contains(where: { $0.contains(waiter) }) { break }
                usleep(20_000)
            #else
                sleep(2)
                break
            #endif
        }
        lock.release()
        let collect = child.finish()
        #expect(collect.status == 65)
        #expect(
            collect.error
                == "waiting for another farm run (pid \(getpid())) to release '\(output.path)'\n"
                + "Error: cannot collect shard reports: no farm-report-shard-*.json in '\(output.path)'\n")
    }

    @Test("farm files: unknown keys and invalid values name the job")
    func invalidFarmFiles() throws {
        let folder = try Fixtures.temporaryDirectory("farm")
        var cases: [(String, String)] = [
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "qwen3-4b", "contxt": 4096}]}"#,
                "job 'a': unknown key 'contxt'"
            )
        ]
        // Only its characters, where a name may not start with '-', '_' or '.' (nor be other than ASCII).
        for name in ["-x", "_y", ".z", "é"] {
            cases.append(
                (
                    #"{"schema": "exporter.farm/1", "jobs": [{"name": "\#(name)", "model": "x"}]}"#,
                    "job '\(name)': 'name' must be ASCII letters, digits, '.', '_' or '-', and start with a letter or digit"
                ))
        }
        cases += [
            (
                #"{"schema": "exporter.farm/1", "defaults": {"disable_embedding_quantization_ios": true}, "#
                    + #""jobs": [{"name": "a", "model": "x", "platform": "macOS"}]}"#,
                "job 'a': 'disable_embedding_quantization_ios' applies to platform iOS, not macOS"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "qwen3-4b", "context": -1}]}"#,
                "job 'a': 'context' must be a positive integer"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x"}, {"name": "A", "model": "y"}]}"#,
                "job 'A': the name is used by job 'a' (job names ignore case)"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "A", "model": "x"}, {"name": "a", "model": "y"}]}"#,
                "job 'a': the name is used by job 'A' (job names ignore case)"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "b", "model": "x"}, {"name": "a", "model": "x"}, "#
                    + #"{"name": "a", "model": "y"}]}"#,
                "job 'a': the name is used by job #2 too"
            ),
            (
                #"{"schema": "exporter.farm/1", "defaults": {"platfrom": "iOS"}, "jobs": [{"name": "a", "model": "x"}]}"#,
                "defaults: unknown key 'platfrom'"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "palette_search": "fast"}]}"#,
                "job 'a': 'palette_search' must be one of: standard, thorough, exact"
            ),
            (
                #"{"schema": "exporter.farm/2", "jobs": []}"#,
                "schema is 'exporter.farm/2'; this version reads 'exporter.farm/1'"
            ),
            (#"{"schema": 5, "jobs": []}"#, "schema is 5; this version reads 'exporter.farm/1'"),
            (#"{"schema": null, "jobs": []}"#, "schema is null; this version reads 'exporter.farm/1'"),
            (#"{"jobs": []}"#, "no 'schema'; this version reads 'exporter.farm/1'"),
            (
                #"{"schema": "exporter.farm/1", "defaults": null, "jobs": [{"name": "a", "model": "x"}]}"#,
                "'defaults' must be an object, found null"
            ),
            (
                #"{"schema": "exporter.farm/1", "defaults": [], "jobs": [{"name": "a", "model": "x"}]}"#,
                "'defaults' must be an object, found an array"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "devices": ["h17p", "h17p"]}]}"#,
                "job 'a': device 'h17p' is listed twice"
            ),
            (#"{"schema": "exporter.farm/1", "jobs": []}"#, "'jobs' must be a non-empty array"),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "devices": ["h17p", "H17P"]}]}"#,
                "job 'a': device 'H17P' is listed twice ('h17p' is the same architecture: ids ignore case)"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "seed": 3}]}"#,
                "job 'a': 'seed' applies to synthetic weights; set 'synthetic' too"
            ),
            (
                #"{"schema": "exporter.farm/1", "defaults": {"seed": 3}, "#
                    + #""jobs": [{"name": "a", "model": "x", "synthetic": false}]}"#,
                "job 'a': 'seed' applies to synthetic weights; set 'synthetic' too"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "device_table": "d.json"}]}"#,
                "job 'a': 'device_table' applies to 'devices'; list the architectures to compile for too"
            ),
            // Keys that would do nothing, whatever their value; numbers not written as integers.
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "platform": "macOS", "#
                    + #""disable_embedding_quantization_ios": false}]}"#,
                "job 'a': 'disable_embedding_quantization_ios' applies to platform iOS, not macOS"
            ),
            (
                #"{"schema": "exporter.farm/1", "defaults": {"palette_search": "exact"}, "#
                    + #""jobs": [{"name": "a", "model": "x", "compression": "none"}]}"#,
                "job 'a': 'palette_search' applies to palettised weights; 'compression' 'none' palettises none"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "context": 128.0}]}"#,
                "job 'a': 'context' must be a positive integer"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "synthetic": true, "seed": 1e1}]}"#,
                "job 'a': 'seed' must be a non-negative integer"
            ),
            // What the farm file and the presets decide, before anything runs (each job failed with
            // the export's usage error, 64, and its usage lines in the report).
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "compression": "nope"}]}"#,
                "job 'a': 'compression' is 'nope'; expected one of: 4bit_quality, 4bit_weight_palettized_group32, "
                    + "4bit_weight_palettized_group8, qwen3-0.6b_mixed_4bit_8bit, qwen3-4b_mixed_4bit_8bit, none"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x"}, {"name": "b", "model": "x", "preset": "nope"}]}"#,
                "job 'b': 'preset' is 'nope'; expected one of: qwen3-0.6b, qwen2.5-1.5b-instruct, qwen3-4b"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "qwen3-0.6b", "context": 100000}]}"#,
                "job 'a': 'context' is 100000, more than the max_position_embeddings of preset 'qwen3-0.6b' (40960)"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "output_name": "a/b"}]}"#,
                "job 'a': 'output_name' must be a plain file name (no '/', not starting with '.'), got 'a/b'"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "output_name": ".."}]}"#,
                "job 'a': 'output_name' must be a plain file name (no '/', not starting with '.'), got '..'"
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "output_name": "a\u001bb"}]}"#,
                #"job 'a': 'output_name' must not contain control characters, got 'a\u{1B}b'"#
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "output_name": ""#
                    + String(repeating: "é", count: 65) + #""}]}"#,
                "job 'a': 'output_name' '" + String(repeating: "é", count: 40) + "…' is 130 bytes long; an artifact's "
                    + "name is at most 128 bytes (its files and their staging folders must fit 255-byte file names)"
            ),
        ]
        // `null` is no value of any key: it used to stand for the default, and a job whose
        // compute precision it emptied failed its export with 64.
        let nulls: [(String, String)] = [
            ("compute_precision", "'compute_precision' must be one of: float16, bfloat16, float32"),
            ("platform", "'platform' must be one of: iOS, macOS"),
            ("palette_search", "'palette_search' must be one of: standard, thorough, exact"),
            ("context", "'context' must be a positive integer"),
            ("seed", "'seed' must be a non-negative integer"),
            ("synthetic", "'synthetic' must be true, false or \"if-missing\""),
            ("experimental", "'experimental' must be true or false"),
            ("allow_clamp", "'allow_clamp' must be true or false"),
            ("disable_embedding_quantization_ios", "'disable_embedding_quantization_ios' must be true or false"),
            ("devices", "'devices' must be an array of architecture ids"),
            ("device_table", "'device_table' must be a non-empty string"),
            ("compression", "'compression' must be a non-empty string"),
            ("compression_config", "'compression_config' must be a non-empty string"),
            ("preset", "'preset' must be a non-empty string"),
            ("output_name", "'output_name' must be a non-empty string"),
            ("model", "'model' must be a non-empty string"),
        ]
        for (key, message) in nulls {
            let model = key == "model" ? "" : #""model": "x", "#
            cases.append(
                (
                    #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", \#(model)"\#(key)": null}]}"#,
                    "job 'a': \(message)"
                ))
            if key != "model" {
                cases.append(
                    (
                        #"{"schema": "exporter.farm/1", "defaults": {"\#(key)": null}, "jobs": [{"name": "a", "model": "x"}]}"#,
                        "job 'a': \(message)"
                    ))
            }
        }
        cases.append(
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": null, "model": "x"}]}"#,
                "job '#1': 'name' must be a non-empty string"
            ))
        for (text, message) in cases {
            let url = folder.appendingPathComponent("farm.json")
            try Data(text.utf8).write(to: url)
            let run = try BuiltExporter.run(["batch", url.path, "--output", folder.appendingPathComponent("out").path])
            #expect(run.status == 65, "\(text)")
            #expect(
                run.error == "Error: farm file '\(url.path)', \(message)\n"
                    || run.error == "Error: farm file '\(url.path)': \(message)\n", "\(text)")
        }
        // Several jobs at fault: each named, by its first fault, in the file's order; then the
        // checks against the presets, the same way.
        for (text, messages) in [
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "seed": 3}, "#
                    + #"{"name": "b", "model": "x"}, {"name": "c", "model": "x", "context": 0, "bogus": 1}]}"#,
                [
                    "job 'a': 'seed' applies to synthetic weights; set 'synthetic' too",
                    "job 'c': unknown key 'bogus'",
                ]
            ),
            (
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "x", "compression": "nope"}, "#
                    + #"{"name": "b", "model": "x", "preset": "nope"}]}"#,
                [
                    "job 'a': 'compression' is 'nope'; expected one of: 4bit_quality, 4bit_weight_palettized_group32, "
                        + "4bit_weight_palettized_group8, qwen3-0.6b_mixed_4bit_8bit, qwen3-4b_mixed_4bit_8bit, none",
                    "job 'b': 'preset' is 'nope'; expected one of: qwen3-0.6b, qwen2.5-1.5b-instruct, qwen3-4b",
                ]
            ),
        ] {
            let url = folder.appendingPathComponent("farm.json")
            try Data(text.utf8).write(to: url)
            let run = try BuiltExporter.run(["batch", url.path, "--output", folder.appendingPathComponent("out").path])
            #expect(run.status == 65, "\(text)")
            #expect(
                run.error
                    == "Error: " + messages.map { "farm file '\(url.path)', \($0)\n" }.joined(), "\(run.error)")
        }
        // The rule the message states, and no more: these names are taken.
        let url = folder.appendingPathComponent("farm.json")
        try Data(
            #"{"schema": "exporter.farm/1", "jobs": [{"name": "x-", "model": "x"}, {"name": "a..b", "model": "x"}, {"name": "9_Z.", "model": "x"}]}"#
                .utf8
        ).write(to: url)
        #expect(try FarmFile(contentsOf: url).jobs.map(\.name) == ["x-", "a..b", "9_Z."])
    }

    @Test("a job's palette_search becomes its export's --palette-search")
    func paletteSearch() throws {
        let folder = try Fixtures.temporaryDirectory("farm")
        let url = folder.appendingPathComponent("farm.json")
        let text =
            #"{"schema": "exporter.farm/1", "defaults": {"palette_search": "exact"}, "jobs": [{"name": "a", "model": "qwen3-0.6b"}, {"name": "b", "model": "qwen3-0.6b", "palette_search": "standard"}]}"#
        try Data(text.utf8).write(to: url)
        let farm = try FarmFile(contentsOf: url)
        #expect(farm.jobs.map(\.paletteSearch) == [.exact, .standard])
        let output = folder.appendingPathComponent("out")
        let arguments = farm.jobs.map { $0.exportArguments(outputDirectory: output, farmDirectory: folder) }
        #expect(arguments[0].suffix(2) == ["--palette-search", "exact"])
        #expect(arguments[1].suffix(2) == ["--palette-search", "standard"])
    }

    @Test("a job's paths are resolved against the farm file's folder, without '.' components")
    func resolvedPaths() throws {
        let folder = try Fixtures.temporaryDirectory("farm")
        var job = FarmJob(name: "a", model: "./models/./nope")
        job.compressionConfig = "./cfg.json"
        let arguments = job.exportArguments(outputDirectory: folder, farmDirectory: folder)
        #expect(arguments[0] == folder.path + "/models/nope")
        #expect(arguments.contains(folder.path + "/cfg.json"))
    }

    @Test("a job's seed may be 0, the first of the non-negative integers; -1 is refused, naming the job")
    func seedBounds() throws {
        let url = try Fixtures.temporaryDirectory("farm").appendingPathComponent("farm.json")
        func farm(seed: Int) throws -> FarmFile {
            let text =
                #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "qwen3-0.6b", "synthetic": true, "#
                + #""seed": \#(seed)}]}"#
            return try FarmFile(bytes: Array(text.utf8), path: url)
        }
        #expect(try farm(seed: 0).jobs.map(\.seed) == [0])
        let ifMissing =
            #"{"schema": "exporter.farm/1", "jobs": [{"name": "a", "model": "qwen3-0.6b", "synthetic": "if-missing", "#
            + #""seed": 5}]}"#
        #expect(try FarmFile(bytes: Array(ifMissing.utf8), path: url).jobs.map(\.seed) == [5])
        #expect(try farm(seed: 7).jobs.map(\.seed) == [7])
        #expect(throws: FarmError.invalidJob(path: url.path, job: "a", reason: "'seed' must be a non-negative integer"))
        {
            _ = try farm(seed: -1)
        }
    }

    @Test("the shipped example farm parses")
    func exampleFarm() throws {
        let farm = try FarmFile(contentsOf: Fixtures.presetsDirectory.appendingPathComponent("farm.json"))
        #expect(
            farm.jobs.map(\.name) == ["qwen3-0.6b", "qwen2.5-1.5b-instruct", "qwen2.5-1.5b-instruct-8k", "qwen3-4b"])
        #expect(farm.jobs.allSatisfy { $0.synthetic == .ifMissing })
        #expect(farm.jobs[2].context == 8192)
    }
}
