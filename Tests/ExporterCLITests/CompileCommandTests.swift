import Foundation
import TestSupport
import Testing

@testable import ExporterCLI
@testable import ExporterKit

@Suite("command line: compile")
struct CompileCommandTests {
    /// Exports a tiny synthetic model for `platform` and returns its bundle.
    private func bundle(platform: String = "iOS") throws -> URL {
        let checkpoint = try Fixtures.checkpointDirectory(
            config: Fixtures.tinyConfig(overrides: ["num_hidden_layers": 3]))
        let output = try Fixtures.temporaryDirectory()
        let run = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--synthetic", "--platform", platform,
            "--output-dir", output.path,
        ])
        #expect(run.status == 0, "\(run.error)")
        return output.appendingPathComponent("tiny/Tiny.aimodel")
    }

    private func verdicts(_ run: CommandLineRun) throws -> [JSONObject] {
        let json = try #require(try JSONParser.parse(Array(run.output.utf8)).objectValue)
        let list = json["verdicts"]?.arrayValue ?? []
        return list.compactMap { $0.objectValue }
    }

    @Test("plan Qwen2.5-1.5B: fits on h17p, every region within the Neural Engine budget")
    func planQwen25Verdict() throws {
        let run = runExporter(["plan", "qwen2.5-1.5b", "--json"])
        #expect(run.status == 0)
        let all = try verdicts(run)
        #expect(all.map { $0["architecture"]?.stringValue ?? "" } == ["h14p", "h15p", "h16p", "h17p", "h14g"])
        #expect(all.map { $0["ahead_of_time"]?.boolValue } == [false, false, true, true, true])
        // The 1.5B fits the A15's 2.1 GB limit too, as the portable bundle specialised there.
        #expect(all.first?["memory"]?.stringValue == "fits")
        let h17p = try #require(all.first { $0["architecture"]?.stringValue == "h17p" })
        #expect(h17p["memory"]?.stringValue == "fits")
        #expect(h17p["neural_engine"]?.stringValue == "all-regions-within-budget")
        #expect(h17p["regions"]?.intValue == 6)
        #expect(h17p["regions_over_budget"]?.arrayValue == [])
        #expect(h17p["entitlements"]?.arrayValue == [])
        #expect(h17p["app_memory_limit_bytes"]?.intValue == 3_000_000_000)
        #expect((h17p["total_bytes"]?.intValue ?? .max) < 3_000_000_000)
    }

    @Test("plan Qwen3-4B: needs the entitlement on h17p, and its embedding and head regions are over budget")
    func planQwen3Verdict() throws {
        let run = runExporter(["plan", "qwen3-4b", "--json"])
        #expect(run.status == 0)
        let h17p = try #require(try verdicts(run).first { $0["architecture"]?.stringValue == "h17p" })
        #expect(h17p["memory"]?.stringValue == "needs-entitlement")
        #expect(
            h17p["entitlements"]?.arrayValue?.compactMap(\.stringValue) == [
                "com.apple.developer.kernel.increased-memory-limit",
                "com.apple.developer.kernel.extended-virtual-addressing",
            ])
        #expect(h17p["neural_engine"]?.stringValue == "regions-over-budget")
        #expect(h17p["regions_over_budget"]?.arrayValue?.compactMap(\.intValue) == [0, 19])
        let total = try #require(h17p["total_bytes"]?.intValue)
        #expect(total > 3_000_000_000 && total <= 6_000_000_000)
        let human = runExporter(["plan", "qwen3-4b"])
        #expect(
            human.output.contains(
                "  h17p iOS       A18      3.3 GiB  2.8 GiB / 5.6 GiB   needs-entitlement  regions 0, 19 over budget\n")
        )
    }

    @Test("--require-fit fails plan, export and compile (1, after writing) when a named device cannot load the model")
    func requireFit() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(overrides: ["num_hidden_layers": 3])
        // t1 kills the tiny model at load (1,000,000 bytes, nothing raises it); t2 takes it with the entitlement.
        let table = try Fixtures.temporaryDirectory().appendingPathComponent("devices.json")
        func entry(_ id: String, raised: String) -> String {
            #"{"id": "\#(id)", "platform": "iOS", "chip": "T", "products": ["T"], "ahead_of_time": true, "#
                + #""ram_bytes": 8589934592, "app_memory_limit_bytes": 1000000, "#
                + #""increased_memory_limit_bytes": \#(raised), "entitlements": ["e"], "#
                + #""ane_region_budget_bytes": 1073741824, "page_size": 16384}"#
        }
        try Data(
            (#"{"schema": "exporter.devices/1", "devices": ["#
                + entry("t1", raised: "null").replacingOccurrences(
                    of: #"["e"]"#, with: "[]") + ", " + entry("t2", raised: "4000000000") + "]}").utf8
        ).write(to: table)
        let output = try Fixtures.temporaryDirectory()
        let export = [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--devices", table.path,
            "--output-dir", output.path,
        ]
        let planned = try #require(
            try JSONParser.parse(Array(runExporter(["plan"] + export + ["--json"]).output.utf8)).objectValue)
        let total = try #require(
            planned["verdicts"]?.arrayValue?.compactMap(\.objectValue).first {
                $0["architecture"]?.stringValue == "t1"
            }?[
                "total_bytes"]?.intValue)
        func failure(_ given: String) -> String {
            "Error: t1 (iOS): \(total) bytes exceed the app memory limit of 1000000, which no entitlement raises: the app "
                + "is killed at load (--require-fit \(given))\n"
        }
        // Named twice, in two cases: one failure.
        let plan = runExporter(
            ["plan"] + export + ["--require-fit", "T1", "--require-fit", "t1", "--require-fit", "t2"])
        #expect(plan.status == 1)
        #expect(plan.error == failure("T1"), "\(plan.error)")
        #expect(plan.output.contains("  t1 iOS  "))
        #expect(runExporter(["plan"] + export + ["--require-fit", "t2"]).status == 0)
        let unknown = runExporter(["plan"] + export + ["--require-fit", "t9"])
        #expect(unknown.status == 64)
        // Each id once: h14g names a Mac and Apple Vision Pro.
        #expect(
            unknown.error.hasPrefix(
                "Error: --require-fit: no device 't9' in the device table; known: h14p, h15p, h16p, h17p, h13g, h14g, "
                    + "h15g, h16g, t1, t2\n"), "\(unknown.error)")
        #expect(
            runExporter(["plan"] + export + ["--require-fit", "h13g"]).error
                == "Error: --require-fit h13g: no verdict for it, a device of a platform that does not load this bundle\n"
        )
        // One platform's device where an id names two: the Vision Pro's M2, not the Mac's.
        #expect(runExporter(["plan"] + export + ["--require-fit", "h14g:visionOS"]).status == 0)
        #expect(runExporter(["plan"] + export + ["--require-fit", "h14g:macOS"]).status == 1)
        // The two devices of one id are two requirements: the Mac's is not dropped for the Vision Pro's.
        let both = runExporter(["plan"] + export + ["--require-fit", "h14g:visionOS", "--require-fit", "h14g:macOS"])
        #expect(both.status == 1)
        #expect(
            both.error
                == "Error: --require-fit h14g:macOS: no verdict for it, a device of a platform that does not load this "
                + "bundle\n")
        let otherPlatform = runExporter(["plan"] + export + ["--require-fit", "t1:macOS"])
        #expect(otherPlatform.status == 64)
        #expect(otherPlatform.error.hasPrefix("Error: --require-fit: no device 't1' of macOS in the device table; "))
        // One device named two ways fails once.
        #expect(
            runExporter(["plan"] + export + ["--require-fit", "t1", "--require-fit", "t1:iOS"]).error == failure("t1"))
        let badPlatform = runExporter(["plan"] + export + ["--require-fit", "h14g:watchOS"])
        #expect(badPlatform.status == 64)
        #expect(
            badPlatform.error.hasPrefix(
                "Error: --require-fit expects ARCH or ARCH:PLATFORM, PLATFORM one of iOS, macOS, visionOS, got "
                    + "'h14g:watchOS'\n"), "\(badPlatform.error)")
        // The export writes everything, then fails the gate; a device that needs the entitlement
        // passes, saying what to add.
        let exported = runExporter(export + ["--require-fit", "t1", "--require-fit", "t2"])
        #expect(exported.status == 1)
        #expect(
            exported.error.hasSuffix(
                "warning: t2 (iOS): \(total) bytes exceed the app memory limit of 1000000; add the entitlements e, or the "
                    + "app is killed at load\n" + failure("t1")), "\(exported.error)")
        let bundleURL = output.appendingPathComponent("tiny/Tiny.aimodel")
        _ = try BundleReader(url: bundleURL)
        // compile: the devices it compiles or not, as the plan gives them.
        let compiled = runExporter([
            "compile", bundleURL.path, "--devices", table.path, "--device", "t2", "--require-fit", "t1",
        ])
        #expect(compiled.status == 1)
        #expect(FileManager.default.fileExists(atPath: output.appendingPathComponent("tiny/Tiny.t2.aimodelc").path))
        #expect(compiled.error == failure("t1"))
    }

    @Test("compile writes one artifact per eligible architecture and prints each verdict")
    func compileAll() throws {
        let bundleURL = try bundle()
        let output = try Fixtures.temporaryDirectory()
        let run = runExporter([
            "compile", bundleURL.path, "--platform", "iOS", "--min-deployment-version", "27.0", "--output", output.path,
        ])
        #expect(run.status == 0, "\(run.error)")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: output.path).sorted() == [
                "Tiny.h16p.aimodelc", "Tiny.h17p.aimodelc",
            ])
        #expect(
            run.output.hasPrefix(
                "wrote \(output.path)/Tiny.h16p.aimodelc\n  device         h16p (A17 Pro; iOS 27.0+)\n"))
        #expect(run.output.contains("  regions        3: embedding, layers 0–2, head\n"))
        #expect(run.output.contains("  verdict        fits: 1.6 MiB within the default app memory limit of 2.8 GiB\n"))
        #expect(run.output.contains("  Neural Engine  all 3 regions within 256.0 MiB\n"))
        let again = runExporter(["compile", bundleURL.path, "--output", output.path, "--device", "h17p"])
        #expect(again.status == 73)
        #expect(
            again.error == "Error: '\(output.path)/Tiny.h17p.aimodelc' already exists; pass --overwrite to replace it\n"
        )
        #expect(
            runExporter(["compile", bundleURL.path, "--output", output.path, "--device", "h17p", "--overwrite"]).status
                == 0)
        _ = try CompiledArtifactReader(url: output.appendingPathComponent("Tiny.h17p.aimodelc"))
        // --json: each artifact's path and manifest, as an export's "compiled" list.
        let json = runExporter([
            "compile", bundleURL.path, "--output", output.path, "--device", "h17p", "--overwrite", "--json",
        ])
        #expect(json.status == 0, "\(json.error)")
        let listed = try #require(try JSONParser.parse(Array(json.output.utf8)).arrayValue)
        let artifact = output.appendingPathComponent("Tiny.h17p.aimodelc")
        #expect(listed.count == 1)
        #expect(listed.first?.objectValue?["artifact"]?.stringValue == artifact.path)
        let written = try CompiledArtifactReader(url: artifact).manifest
        let printed = try #require(listed.first?.objectValue?["manifest"])
        #expect(JSONWriter.string(printed) == JSONWriter.string(try JSONParser.parse(try written.canonicalJSON())))

        // An interrupted compile left h16p only: refused before writing anything, with the
        // command that compiles the rest.
        let h17p = output.appendingPathComponent("Tiny.h17p.aimodelc")
        try FileManager.default.removeItem(at: h17p)
        let partial = runExporter(["compile", bundleURL.path, "--output", output.path])
        #expect(partial.status == 73)
        #expect(
            partial.error
                == "Error: '\(output.path)/Tiny.h16p.aimodelc' already exists; pass --overwrite to replace it\n"
                + "or compile only the missing: exporter compile '\(bundleURL.path)' --platform iOS --output "
                + "'\(output.path)' --device h17p\n")
        #expect(!FileManager.default.fileExists(atPath: h17p.path))
        #expect(runExporter(["compile", bundleURL.path, "--output", output.path, "--device", "h17p"]).status == 0)
        let both = runExporter(["compile", bundleURL.path, "--output", output.path])
        #expect(
            both.error
                == "Error: '\(output.path)/Tiny.h16p.aimodelc', '\(output.path)/Tiny.h17p.aimodelc' already exist; "
                + "pass --overwrite to replace them\n")
        // The bundle exported again (another context): the artifacts there are of the old one, said so.
        let folder = bundleURL.deletingLastPathComponent()
        let checkpoint = try Fixtures.checkpointDirectory(
            config: Fixtures.tinyConfig(overrides: ["num_hidden_layers": 3]))
        #expect(
            runExporter([
                checkpoint.path, "--experimental", "--compute-precision", "float16", "--synthetic", "--context", "256",
                "--output-dir", folder.deletingLastPathComponent().path, "--overwrite",
            ]).status == 0)
        let stale = runExporter(["compile", bundleURL.path, "--output", output.path])
        #expect(stale.status == 73)
        #expect(
            stale.error
                == "Error: '\(output.path)/Tiny.h16p.aimodelc', '\(output.path)/Tiny.h17p.aimodelc' already exist; "
                + "pass --overwrite to replace them\n'Tiny.h16p.aimodelc', 'Tiny.h17p.aimodelc' were compiled from "
                + "another bundle than '\(bundleURL.path)' (it was exported again since): compile with --overwrite to "
                + "bring them up to date\n")
    }

    @Test("compile draws the weight bytes written over every device's artifact on a terminal; nothing in a pipe")
    func progress() throws {
        let bundleURL = try bundle()
        let output = try Fixtures.temporaryDirectory()
        let arguments = [
            "compile", bundleURL.path, "--platform", "iOS", "--min-deployment-version", "27.0", "--output", output.path,
        ]
        let piped = runExporter(arguments)
        #expect(piped.status == 0 && piped.error.isEmpty, "\(piped.error)")
        let shown = runExporter(arguments + ["--overwrite"], terminal: true)
        #expect(shown.status == 0, "\(shown.error)")
        #expect(shown.output == piped.output)
        let sizes = try ["h16p", "h17p"].map {
            try #require(
                try FileManager.default.attributesOfItem(
                    atPath: output.appendingPathComponent("Tiny.\($0).aimodelc/weights.bin").path)[.size] as? Int)
        }
        let lines = shown.error.split(separator: "\r").map(String.init).filter { $0.contains("%") }
        let total = sizes[0] + sizes[1]
        #expect(
            lines.first?.contains("  0%  \(ProgressBar.bytes(0, of: total))  h16p (1 of 2): weights written  ETA -- ")
                == true,
            "\(lines)")
        #expect(
            lines.last?.contains("100%  \(ProgressBar.bytes(total, of: total))  h17p (2 of 2): weights written  ETA 0s")
                == true,
            "\(lines)")
        #expect(shown.error.hasSuffix("\r\u{1B}[K"))
    }

    @Test("a bundle's file that is a symbolic link is read through it; one that cannot be opened is named (74)")
    func linkedBundleFiles() throws {
        let bundleURL = try bundle()
        // As git-annex or a DVC cache keeps large files: the weights elsewhere, linked.
        let store = try Fixtures.temporaryDirectory()
        let weights = bundleURL.appendingPathComponent("weights.bin")
        try FileManager.default.moveItem(at: weights, to: store.appendingPathComponent("weights.bin"))
        try FileManager.default.createSymbolicLink(
            at: weights, withDestinationURL: store.appendingPathComponent("weights.bin"))
        let output = try Fixtures.temporaryDirectory()
        let linked = runExporter(["compile", bundleURL.path, "--output", output.path, "--device", "h17p"])
        #expect(linked.status == 0, "\(linked.error)")
        #expect(runExporter(["verify", output.appendingPathComponent("Tiny.h17p.aimodelc").path]).status == 0)
        // A link loop in place of a file: there, and not readable. The graph is decoded; config.json
        // is copied as is, checked against the manifest as it is copied.
        for (bundle, file) in [(bundleURL, "graph.json"), (try bundle(), "config.json")] {
            let loop = bundle.appendingPathComponent(file)
            try FileManager.default.removeItem(at: loop)
            try FileManager.default.createSymbolicLink(atPath: loop.path, withDestinationPath: file)
            let looped = runExporter(["compile", bundle.path, "--output", output.path, "--device", "h16p"])
            #expect(looped.status == 74, "\(file)")
            #expect(looped.error == "Error: cannot read '\(loop.path)': too many levels of symbolic links\n")
        }
    }

    @Test("a compiled artifact's tool.version is its compiler's; its bundle's is compiled.portable.tool_version")
    func compilerVersion() throws {
        let folder = try Fixtures.temporaryDirectory()
        let bundleURL = folder.appendingPathComponent("Tiny.aimodel")
        try FileManager.default.copyItem(at: try bundle(), to: bundleURL)
        // A bundle an earlier version exported (the manifest lists no CRC of itself).
        let manifestURL = bundleURL.appendingPathComponent("manifest.json")
        let text = try String(contentsOf: manifestURL, encoding: .utf8)
        let older = text.replacingOccurrences(
            of: #""version" : "\#(ToolVersion.current)""#, with: #""version" : "0.7.0""#)
        #expect(older != text)
        try older.write(to: manifestURL, atomically: true, encoding: .utf8)
        let output = folder.appendingPathComponent("out")
        let run = runExporter(["compile", bundleURL.path, "--output", output.path, "--device", "h17p"])
        #expect(run.status == 0, "\(run.error)")
        let manifest = try CompiledArtifactReader(url: output.appendingPathComponent("Tiny.h17p.aimodelc")).manifest
        #expect(manifest.tool.version == ToolVersion.current)
        #expect(manifest.compiled?.portable.toolVersion == "0.7.0")
        // inspect says which versions wrote it.
        func writtenBy(_ artifact: URL) -> [String] {
            let lines = runExporter(["inspect", artifact.path]).output.split(separator: "\n")
            return lines.map { $0.split(separator: " ").joined(separator: " ") }.filter { $0.hasPrefix("written by") }
        }
        #expect(
            writtenBy(output.appendingPathComponent("Tiny.h17p.aimodelc")) == [
                "written by exporter \(ToolVersion.current), its bundle by 0.7.0"
            ])
        #expect(writtenBy(bundleURL) == ["written by exporter 0.7.0"])
        let json = runExporter(["inspect", output.appendingPathComponent("Tiny.h17p.aimodelc").path, "--json"])
        let root = try #require(try JSONParser.parse(Array(json.output.utf8)).objectValue)
        #expect(root["tool_version"]?.stringValue == ToolVersion.current)
        #expect(root["bundle_tool_version"]?.stringValue == "0.7.0")
    }

    @Test("a compiled artifact names its bundle as exported: through a link or a renamed copy, the same bytes")
    func portableName() throws {
        let bundleURL = try bundle()
        let folder = try Fixtures.temporaryDirectory()
        let link = folder.appendingPathComponent("c3link.aimodel")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: bundleURL)
        let renamed = folder.appendingPathComponent("ren/Other.aimodel")
        try FileManager.default.createDirectory(
            at: renamed.deletingLastPathComponent(), withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: bundleURL, to: renamed)
        var manifests: [Data] = []
        for (index, source) in [bundleURL, link, renamed].enumerated() {
            let output = folder.appendingPathComponent("out\(index)")
            let run = runExporter(["compile", source.path, "--output", output.path, "--device", "h17p"])
            #expect(run.status == 0, "\(run.error)")
            let artifact = output.appendingPathComponent("Tiny.h17p.aimodelc")
            #expect(try CompiledArtifactReader(url: artifact).manifest.compiled?.portable.name == "Tiny.aimodel")
            manifests.append(try Data(contentsOf: artifact.appendingPathComponent("manifest.json")))
        }
        #expect(manifests[1] == manifests[0])
        #expect(manifests[2] == manifests[0])
    }

    @Test("exporter <model> --compile exports, then compiles beside the bundle")
    func exportAndCompile() throws {
        let checkpoint = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig())
        let output = try Fixtures.temporaryDirectory()
        let run = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--synthetic", "--output-dir",
            output.path,
            "--compile",
        ])
        #expect(run.status == 0, "\(run.error)")
        let folder = output.appendingPathComponent("tiny")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted() == [
                "Tiny.aimodel", "Tiny.h16p.aimodelc", "Tiny.h17p.aimodelc",
            ])
        #expect(run.output.contains("wrote \(folder.path)/Tiny.h17p.aimodelc\n"))
    }

    @Test("refusals, as the user sees them")
    func refusals() throws {
        let bundleURL = try bundle()
        let output = try Fixtures.temporaryDirectory()
        func compile(_ extra: [String]) -> CommandLineRun {
            runExporter(["compile", bundleURL.path, "--output", output.path] + extra)
        }
        let a16 = compile(["--device", "h15p"])
        #expect(a16.status == 69)
        #expect(
            a16.error
                == "Error: ahead-of-time compilation is not offered for 'h15p' (iPhone 14 Pro, iPhone 14 Pro Max, "
                + "iPhone 15, iPhone 15 Plus; A16 Bionic): iPhone and iPad need an A17 Pro or later\n")
        let a15 = compile(["--device", "h17p", "--device", "h14p"])
        #expect(a15.status == 69)
        #expect(
            a15.error
                == "Error: ahead-of-time compilation is not offered for 'h14p' (iPhone 13, iPhone 13 mini, iPhone 14, "
                + "iPhone 14 Plus, iPhone SE (3rd generation); A15 Bionic): iPhone and iPad need an A17 Pro or later\n")
        let unknown = compile(["--device", "h18p"])
        #expect(unknown.status == 69)
        #expect(unknown.error == "Error: unknown iOS architecture 'h18p'; known: h14p, h15p, h16p, h17p\n")
        // A macOS device cannot take an iOS bundle: --platform macOS would be refused too.
        let otherPlatform = compile(["--device", "h13g"])
        #expect(otherPlatform.status == 69)
        #expect(
            otherPlatform.error
                == "Error: architecture 'h13g' is a macOS device, and this bundle was exported for iOS: export with "
                + "--platform macOS to compile for it\n")
        // h14g is the M2 of Macs and of the Vision Pro: the platform that compiles iOS bundles is named.
        let visionPro = compile(["--device", "h14g"])
        #expect(
            visionPro.error == "Error: architecture 'h14g' is a visionOS device, not iOS; pass --platform visionOS\n")
        let elsewhere = try Fixtures.temporaryDirectory()
        #expect(
            runExporter([
                "compile", bundleURL.path, "--output", elsewhere.path, "--device", "h14g", "--platform", "visionOS",
            ]).status == 0)
        let mismatch = compile(["--platform", "macOS"])
        #expect(mismatch.status == 69)
        #expect(
            mismatch.error
                == "Error: 'Tiny.aimodel' was exported for iOS and cannot be compiled for macOS; export it with --platform macOS\n"
        )
        let macBundle = try bundle(platform: "macOS")
        let macToIOS = runExporter(["compile", macBundle.path, "--platform", "iOS", "--output", output.path])
        #expect(macToIOS.status == 69)
        #expect(
            macToIOS.error
                == "Error: 'Tiny.aimodel' was exported for macOS and cannot be compiled for iOS; export it with --platform iOS\n"
        )
        let iPhoneFromMac = runExporter(["compile", macBundle.path, "--device", "h17p", "--output", output.path])
        #expect(iPhoneFromMac.status == 69)
        #expect(
            iPhoneFromMac.error
                == "Error: architecture 'h17p' is an iOS device, and this bundle was exported for macOS: export with "
                + "--platform iOS to compile for it\n")
        // Unless the family has no iOS export at all.
        let phi3 = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "phi3"))
        let phi3Output = try Fixtures.temporaryDirectory()
        let phi3Export = runExporter([
            phi3.path, "--experimental", "--compute-precision", "float16", "--synthetic", "--platform", "macOS",
            "--output-dir", phi3Output.path,
        ])
        #expect(phi3Export.status == 0, "\(phi3Export.error)")
        let phi3ToIOS = runExporter([
            "compile", phi3Output.appendingPathComponent("tiny/Tiny.aimodel").path, "--platform", "iOS", "--output",
            output.path,
        ])
        #expect(phi3ToIOS.status == 69)
        #expect(
            phi3ToIOS.error
                == "Error: 'Tiny.aimodel' was exported for macOS and cannot be compiled for iOS: Model 'phi3' does not support "
                + "iOS variant\n")
        let phi3ToIPhone = runExporter([
            "compile", phi3Output.appendingPathComponent("tiny/Tiny.aimodel").path, "--device", "h17p", "--output",
            output.path,
        ])
        #expect(phi3ToIPhone.status == 69)
        #expect(
            phi3ToIPhone.error
                == "Error: architecture 'h17p' is an iOS device, and this bundle was exported for macOS: Model 'phi3' "
                + "does not support iOS variant\n")
        let old = compile(["--min-deployment-version", "26.0"])
        #expect(old.status == 64)
        #expect(
            old.error == """
                Error: --min-deployment-version 26.0 is below 27.0, the first version that loads compiled artifacts
                Usage: exporter compile <bundle> [<options>]
                  See 'exporter compile --help' for more information.

                """)
        let garbled = compile(["--min-deployment-version", "latest"])
        #expect(garbled.status == 64)
        #expect(
            garbled.error.hasPrefix("Error: --min-deployment-version expects a version such as 27.0, got 'latest'\n"))
        let exportOld = runExporter([
            "qwen3-0.6b", "--synthetic", "--compile", "--min-deployment-version", "18.0", "--output-dir", output.path,
        ])
        #expect(exportOld.status == 64)
        #expect(exportOld.error.hasPrefix("Error: --min-deployment-version 18.0 is below 27.0"))
        let missing = runExporter(["compile", output.appendingPathComponent("None.aimodel").path])
        #expect(missing.status == 66)
        #expect(missing.error == "Error: no bundle at '\(output.path)/None.aimodel'\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == [])
    }

    @Test(
        "an M2 Mac's artifact never replaces, nor counts as, Vision Pro's of the same id (h14g), even with --overwrite")
    func sameArchitectureIdOnTwoPlatforms() throws {
        let output = try Fixtures.temporaryDirectory()
        let vision = runExporter([
            "compile", try bundle().path, "--platform", "visionOS", "--output", output.path,
        ])
        #expect(vision.status == 0, "\(vision.error)")
        let artifact = output.appendingPathComponent("Tiny.h14g.aimodelc")
        let before = try Data(contentsOf: artifact.appendingPathComponent("manifest.json"))
        let mac = ["compile", try bundle(platform: "macOS").path, "--platform", "macOS", "--output", output.path]
        for extra in [[], ["--overwrite"]] {
            let run = runExporter(mac + extra)
            #expect(run.status == 73, "\(run.error)")
            #expect(
                run.error
                    == "Error: '\(artifact.path)' is a visionOS artifact of the same architecture id; "
                    + "compile for macOS into another folder (--output DIR)\n")
        }
        #expect(try Data(contentsOf: artifact.appendingPathComponent("manifest.json")) == before)
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == ["Tiny.h14g.aimodelc"])
    }

    @Test("an entry of a user's table replacing a shipped one in another case keeps the shipped id and artifact name")
    func userDeviceOtherCase() throws {
        let bundleURL = try bundle()
        let table = try Fixtures.temporaryDirectory().appendingPathComponent("devices.json")
        try Data(
            """
            {"schema": "exporter.devices/1", "devices": [
              {"id": "H17P", "platform": "iOS", "chip": "A18", "products": ["iPhone 16"], "ahead_of_time": true,
               "ram_bytes": 8589934592, "app_memory_limit_bytes": 1000000, "increased_memory_limit_bytes": null,
               "entitlements": [], "ane_region_budget_bytes": 1000000, "page_size": 4096}
            ]}
            """.utf8
        ).write(to: table)
        let output = try Fixtures.temporaryDirectory()
        let shipped = runExporter(["compile", bundleURL.path, "--output", output.path, "--device", "h17p"])
        #expect(shipped.status == 0, "\(shipped.error)")
        for device in ["h17p", "H17P"] {
            let run = runExporter([
                "compile", bundleURL.path, "--output", output.path, "--devices", table.path, "--device", device,
                "--overwrite",
            ])
            #expect(run.status == 0, "\(run.error)")
            #expect(
                run.output.hasPrefix(
                    "wrote \(output.path)/Tiny.h17p.aimodelc\n  device         h17p (A18; iOS 27.0+)\n"))
            #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == ["Tiny.h17p.aimodelc"])
            // The user's numbers, under the shipped id.
            let compiled = try CompiledArtifactReader(url: output.appendingPathComponent("Tiny.h17p.aimodelc")).compiled
            #expect(compiled.architecture == "h17p")
            #expect(compiled.pageSize == 4096)
        }
    }

    @Test(
        "the command that compiles only the missing devices repeats --output, --devices and --min-deployment-version, and works"
    )
    func compileOnlyTheMissing() throws {
        let bundleURL = try bundle()
        // A folder whose name a shell must be told is one word, with a quote in it.
        let work = try Fixtures.temporaryDirectory().appendingPathComponent("Bob's models")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        func entry(_ id: String, budget: Int) -> String {
            #"{"id": "\#(id)", "platform": "iOS", "chip": "Lab", "products": ["Lab board"], "ahead_of_time": true, "#
                + #""ram_bytes": 8589934592, "app_memory_limit_bytes": 1000000000, "#
                + #""increased_memory_limit_bytes": null, "entitlements": [], "#
                + #""ane_region_budget_bytes": \#(budget), "page_size": 4096}"#
        }
        let table = work.appendingPathComponent("mydev.json")
        try Data(
            (#"{"schema": "exporter.devices/1", "devices": ["# + entry("tiny1", budget: 1_000_000) + ", "
                + entry("big64", budget: 1 << 30) + "]}").utf8
        ).write(to: table)
        let options = ["--output", "fs/cc2", "--devices", "mydev.json", "--min-deployment-version", "28.0"]
        let first = runExporter(["compile", bundleURL.path] + options + ["--device", "tiny1"], currentDirectory: work)
        #expect(first.status == 0, "\(first.error)")
        let output = work.appendingPathComponent("fs/cc2")
        let both = runExporter(
            ["compile", bundleURL.path] + options + ["--device", "tiny1", "--device", "big64"], currentDirectory: work)
        #expect(both.status == 73)
        let quotedWork = work.path.replacingOccurrences(of: "'", with: #"'\''"#)
        #expect(
            both.error
                == "Error: '\(output.path)/Tiny.tiny1.aimodelc' already exists; pass --overwrite to replace it\n"
                + "or compile only the missing: exporter compile '\(bundleURL.path)' --platform iOS "
                + "--output '\(quotedWork)/fs/cc2' --devices '\(quotedWork)/mydev.json' --min-deployment-version 28.0 "
                + "--device big64\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == ["Tiny.tiny1.aimodelc"])
        // Run as suggested, from another folder: the missing artifact lands beside the other, alike.
        let line = try #require(both.error.split(separator: "\n").last)
        let words = shellWords(String(line.dropFirst("or compile only the missing: ".count)))
        #expect(words.prefix(2) == ["exporter", "compile"])
        let rerun = runExporter(Array(words.dropFirst()), currentDirectory: try Fixtures.temporaryDirectory())
        #expect(rerun.status == 0, "\(rerun.error)")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: output.path).sorted() == [
                "Tiny.big64.aimodelc", "Tiny.tiny1.aimodelc",
            ])
        let big64 = try CompiledArtifactReader(url: output.appendingPathComponent("Tiny.big64.aimodelc")).compiled
        #expect(big64.minDeploymentVersion == "28.0")
        #expect(big64.regions.first?.budgetBytes == 1 << 30)
        // Options at their defaults are not repeated: the output is the bundle's folder, the version 27.0.
        let beside = bundleURL.deletingLastPathComponent()
        #expect(runExporter(["compile", bundleURL.path, "--device", "h16p"]).status == 0)
        let defaults = runExporter([
            "compile", bundleURL.path, "--output", beside.path, "--devices", table.path, "--device", "h16p",
            "--device", "tiny1", "--min-deployment-version", "27.0",
        ])
        #expect(defaults.status == 73)
        #expect(
            defaults.error.hasSuffix(
                "or compile only the missing: exporter compile '\(bundleURL.path)' --platform iOS "
                    + "--devices '\(quotedWork)/mydev.json' --device tiny1\n"))
    }

    @Test("--devices adds a user's architecture")
    func userDevices() throws {
        let bundleURL = try bundle()
        let table = try Fixtures.temporaryDirectory().appendingPathComponent("devices.json")
        try Data(
            """
            {"schema": "exporter.devices/1", "devices": [
              {"id": "lab1", "platform": "iOS", "chip": "Lab chip", "products": ["Lab board"], "ahead_of_time": true,
               "ram_bytes": 8589934592, "app_memory_limit_bytes": 1000000, "increased_memory_limit_bytes": null,
               "entitlements": [], "ane_region_budget_bytes": 1000000, "page_size": 4096}
            ]}
            """.utf8
        ).write(to: table)
        let output = try Fixtures.temporaryDirectory()
        let missing = runExporter([
            "compile", bundleURL.path, "--output", output.path, "--devices", "/nonexistent/devices.json",
        ])
        #expect(missing.status == 66)
        #expect(missing.error == "Error: no device table at '/nonexistent/devices.json'\n")
        let run = runExporter([
            "compile", bundleURL.path, "--output", output.path, "--devices", table.path, "--device", "lab1",
        ])
        #expect(run.status == 0, "\(run.error)")
        #expect(run.output.contains("  verdict        does-not-fit: 1.6 MiB is over 976.6 KiB\n"))
        #expect(
            run.output.contains(
                "  Neural Engine  3 of 5 regions over 976.6 KiB: 1 (layer 0), 2 (layer 1), 3 (layer 2); they fall back to a "
                    + "slower compute unit on device\n"))
    }

    @Test(
        "verify, eval and inspect take a compiled artifact by its own rules; convert and compile refuse it, naming its bundle"
    )
    func compiledArtifactCommands() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(overrides: ["num_hidden_layers": 3])
        let output = try Fixtures.temporaryDirectory()
        let export = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
            "--compile",
        ])
        #expect(export.status == 0, "\(export.error)")
        let folder = output.appendingPathComponent("tiny")
        let compiled = folder.appendingPathComponent("Tiny.h17p.aimodelc")
        let bundleRun = runExporter([
            "verify", folder.appendingPathComponent("Tiny.aimodel").path, "--against", checkpoint.path, "--run",
        ])
        let compiledRun = runExporter(["verify", compiled.path, "--against", checkpoint.path, "--run"])
        #expect(compiledRun.status == 0, "\(compiledRun.output)\(compiledRun.error)")
        #expect(compiledRun.output.hasSuffix("everything holds\n"))
        // The same tensors, SQNRs and forward pass as the bundle's.
        #expect(
            compiledRun.output.split(separator: "\n").dropFirst(2)
                == bundleRun.output.split(separator: "\n").dropFirst(2))
        let tokens = folder.appendingPathComponent("tokens.txt")
        try Data("1 2 3 4 5 6".utf8).write(to: tokens)
        let eval = runExporter(["eval", compiled.path, "--against", checkpoint.path, "--tokens-file", tokens.path])
        #expect(eval.status == 0, "\(eval.error)")
        let inspect = runExporter(["inspect", compiled.path])
        let reader = try CompiledArtifactReader(url: compiled)
        let memory = reader.compiled.memory
        #expect(inspect.output.contains("  compiled for  h17p (A18, iOS), from Tiny.aimodel\n"))
        #expect(
            inspect.output.contains(
                "  memory        \(Format.mebibytes(memory.totalBytes)) = weights \(Format.mebibytes(memory.weightsBytes)) + KV "
                    + "\(Format.mebibytes(memory.kvCacheBytes)) + working \(Format.mebibytes(memory.workingBytes)) + tables "
                    + "\(Format.mebibytes(memory.tablesBytes))\n"))
        let inspectJSON = try #require(
            try JSONParser.parse(Array(runExporter(["inspect", compiled.path, "--json"]).output.utf8)).objectValue)
        #expect(inspectJSON["memory_total_bytes"]?.intValue == memory.totalBytes)
        // diff of a bundle and its compiled artifact compares them as portable bundles (the
        // compiled one records its bundle's size and memory): compiling alone changes nothing.
        let diff = try #require(
            try JSONParser.parse(
                Array(
                    runExporter(["diff", folder.appendingPathComponent("Tiny.aimodel").path, compiled.path, "--json"])
                        .output.utf8)
            )
            .objectValue)
        let memoryRow = try #require(
            diff["quantities"]?.arrayValue?.compactMap(\.objectValue).first { $0["field"]?.stringValue == "memory" })
        #expect(memoryRow["b"]?.intValue == reader.manifest.memory.totalBytes)
        #expect(memoryRow["a"]?.intValue == reader.manifest.memory.totalBytes)
        #expect(memory.totalBytes != reader.manifest.memory.totalBytes)
        let sizeRow = try #require(
            diff["quantities"]?.arrayValue?.compactMap(\.objectValue).first {
                $0["field"]?.stringValue == "size on disk"
            })
        #expect(sizeRow["a"]?.intValue == reader.compiled.portable.bytes)
        #expect(sizeRow["b"]?.intValue == reader.compiled.portable.bytes)
        // Two compiled artifacts: what each device reserves, their own plans.
        let both = try #require(
            try JSONParser.parse(Array(runExporter(["diff", compiled.path, compiled.path, "--json"]).output.utf8))
                .objectValue)
        let compiledMemory = try #require(
            both["quantities"]?.arrayValue?.compactMap(\.objectValue).first { $0["field"]?.stringValue == "memory" })
        #expect(compiledMemory["a"]?.intValue == memory.totalBytes)
        // A plan has no weights to evaluate.
        let planFile = folder.appendingPathComponent("plan.json")
        try Data(
            runExporter(["plan", checkpoint.path, "--experimental", "--compute-precision", "float16", "--json"]).output
                .utf8
        ).write(to: planFile)
        let evalPlan = runExporter(["eval", planFile.path, "--against", checkpoint.path, "--tokens-file", tokens.path])
        #expect(evalPlan.status == 65)
        #expect(
            evalPlan.error
                == "Error: '\(planFile.path)' is not an exporter artifact: it is a plan, which has no weights to run\n")
        let diffPackage = runExporter(["diff", compiled.path, folder.appendingPathComponent("Tiny.mlpackage").path])
        #expect(diffPackage.status == 64)
        #expect(
            diffPackage.error.hasPrefix(
                "Error: diff compares bundles, compiled artifacts and manifests; for the Core ML package "))
        for command in [["convert", compiled.path, "--to", "mlpackage"], ["compile", compiled.path]] {
            let refused = runExporter(command)
            #expect(refused.status == 65)
            #expect(
                refused.error
                    == "Error: '\(compiled.path)' is a compiled artifact, not a portable bundle (.aimodel); use the bundle it "
                    + "was compiled from, 'Tiny.aimodel'\n")
        }
    }

    @Test("verify of a compiled artifact finds a tied head copy that differs from the embedding, and lying memory sums")
    func compiledArtifactDamage() throws {
        let bundleURL = try bundle()
        let output = try Fixtures.temporaryDirectory()
        #expect(runExporter(["compile", bundleURL.path, "--output", output.path, "--device", "h17p"]).status == 0)
        let compiled = output.appendingPathComponent("Tiny.h17p.aimodelc")
        let reader = try CompiledArtifactReader(url: compiled)
        let head = try #require(reader.regions.last)
        let copy = try #require(head.tensors.first { $0.name == "model.embed_tokens.weight" })
        let values = try #require(copy.parts.last)
        #expect(values.kind == "values")
        // Change one byte of the copy and record the file's new checksum, as a careless tool would.
        let weightsURL = compiled.appendingPathComponent("weights.bin")
        var weights = [UInt8](try Data(contentsOf: weightsURL))
        weights[values.offset] ^= 0xFF
        try Data(weights).write(to: weightsURL)
        let cosURL = compiled.appendingPathComponent("tables/rope_cos.f32")
        var cos = [UInt8](try Data(contentsOf: cosURL))
        cos[5] ^= 0x01
        try Data(cos).write(to: cosURL)
        var manifest = reader.manifest
        let checksums = ["weights.bin": weights, "tables/rope_cos.f32": cos].mapValues { bytes in
            BundleWriter.hex(bytes.withUnsafeBytes { CRC32.checksum($0) })
        }
        manifest.files = manifest.files.map { file in
            var file = file
            file.crc32 = checksums[file.path] ?? file.crc32
            return file
        }
        manifest.compiled?.memory.totalBytes += 1
        let manifestURL = compiled.appendingPathComponent("manifest.json")
        try Data(try manifest.canonicalJSON()).write(to: manifestURL)
        let run = runExporter(["verify", compiled.path])
        #expect(run.status == 1)
        #expect(
            run.error
                == "Error: 'manifest.json': compiled.memory.total_bytes is \(reader.compiled.memory.totalBytes + 1), not the sum "
                + "of weights, KV cache, working and tables bytes\n"
                + "Error: tensor 'model.embed_tokens.weight': its copy in region \(head.index) differs from its first placement (values)\n"
                + "Error: 'tables/rope_cos.f32': the RoPE tables are not those of the graph\n")
    }

    @Test(
        "what would fail after an export is refused before it: --compile with no eligible device, --format mlpackage of phi3"
    )
    func refusedBeforeExport() throws {
        let checkpoint = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig())
        let table = try Fixtures.temporaryDirectory().appendingPathComponent("devices.json")
        // The shipped table's iOS devices, none of them compiled ahead of time.
        let shipped = try String(
            contentsOf: Fixtures.presetsDirectory.appendingPathComponent("devices.json"), encoding: .utf8)
        try Data(shipped.replacingOccurrences(of: #""ahead_of_time": true"#, with: #""ahead_of_time": false"#).utf8)
            .write(to: table)
        let output = try Fixtures.temporaryDirectory()
        let export = [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--synthetic", "--output-dir",
            output.path,
        ]
        let message =
            "Error: no iOS architecture to compile for: the device table marks none of h14p, h15p, h16p, h17p as eligible "
            + "(iPhone and iPad need an A17 Pro or later)\n"
        for extra in [["--compile"], ["--compile", "--dry-run"]] {
            let run = runExporter(export + extra + ["--devices", table.path])
            #expect(run.status == 69)
            #expect(run.error == message)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == [])
        let bundle = output.appendingPathComponent("tiny/Tiny.aimodel")
        #expect(runExporter(export).status == 0)
        let compile = runExporter(["compile", bundle.path, "--devices", table.path, "--output", output.path])
        #expect(compile.status == 69)
        #expect(compile.error == message)

        let phi3 = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "phi3"))
        let phi3Export = [
            phi3.path, "--experimental", "--compute-precision", "float16", "--synthetic", "--platform", "macOS",
            "--output-dir",
            output.path, "--format", "mlpackage", "--output-name", "Phi",
        ]
        for extra in [[], ["--dry-run"]] {
            let run = runExporter(phi3Export + extra)
            #expect(run.status == 69)
            #expect(
                run.error
                    == "Error: cannot write an mlpackage: no Core ML program for architecture 'phi3' (mistral, qwen2, qwen3)\n"
            )
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == ["tiny"])
    }

    @Test(
        "compile and convert refuse a bundle whose manifest lies about a part, naming tensor and file, never trapping")
    func lyingManifest() throws {
        let bundleURL = try bundle()
        let manifestURL = bundleURL.appendingPathComponent("manifest.json")
        let original = try BundleReader(url: bundleURL).manifest
        for bytes in [Int.max, 1 << 62, 1_000_000] {
            var manifest = original
            manifest.tensors[0].parts[1].bytes = bytes
            try Data(try manifest.canonicalJSON()).write(to: manifestURL)
            let expected =
                "Error: tensor 'model.embed_tokens.weight': values holds \(bytes) bytes, its shape and scheme need "
                + "\(original.tensors[0].parts[1].bytes)\n"
            let output = try Fixtures.temporaryDirectory()
            for command in [
                ["compile", bundleURL.path, "--output", output.path],
                ["convert", bundleURL.path, "--output", output.appendingPathComponent("x.mlpackage").path],
            ] {
                let run = runExporter(command)
                #expect(run.status == 1)
                #expect(run.error == expected)
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == [])
        }
        // A record that does not fit its scheme: the decoder's rule, before anything is written.
        var manifest = original
        let palettized = try #require(manifest.tensors.firstIndex { $0.compression.mode == .palettize })
        manifest.tensors[palettized].compression.groupSize = 1 << 62
        try Data(try manifest.canonicalJSON()).write(to: manifestURL)
        let run = runExporter(["compile", bundleURL.path, "--output", try Fixtures.temporaryDirectory().path])
        #expect(run.status == 1)
        #expect(run.error.hasPrefix("Error: tensor '\(manifest.tensors[palettized].name)': lut holds "))
    }

    @Test(
        "a hand-made graph with linear scaling and no factor is refused by compile and convert (65) and fails verify (1)"
    )
    func linearScalingWithoutFactor() throws {
        // Before, compile said linear scaling "has no precomputed tables yet", convert built a
        // package with a factor of 1 and verify passed the bundle.
        let checkpoint = try Fixtures.checkpointDirectory(
            config: Fixtures.tinyConfig(overrides: ["rope_scaling": ["type": "linear", "factor": 2]]))
        let output = try Fixtures.temporaryDirectory()
        let export = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--synthetic", "--output-dir",
            output.path,
        ])
        #expect(export.status == 0, "\(export.error)")
        let bundleURL = output.appendingPathComponent("tiny/Tiny.aimodel")
        let graphURL = bundleURL.appendingPathComponent("graph.json")
        let graph = try String(contentsOf: graphURL, encoding: .utf8)
        #expect(graph.contains(#""scaling_factor" : 2,"#))
        let edited = Array(
            graph.replacingOccurrences(of: #""scaling_factor" : 2,"#, with: #""scaling_factor" : null,"#).utf8)
        try Data(edited).write(to: graphURL)
        try TinyArtifacts.editManifest(bundleURL) { manifest in
            let index = try #require(manifest.files.firstIndex { $0.path == "graph.json" })
            manifest.sizes.bundleBytes = manifest.sizes.bundleBytes.map { $0 + edited.count - graph.utf8.count }
            manifest.files[index].bytes = edited.count
            manifest.files[index].crc32 = BundleWriter.hex(edited.withUnsafeBytes { CRC32.checksum($0) })
        }
        let problem =
            "rope.scaling_type is 'linear' but rope.scaling_factor is null; linear scaling divides positions by it"
        let verify = runExporter(["verify", bundleURL.path])
        #expect(verify.status == 1)
        #expect(verify.error == "Error: 'graph.json': \(problem)\n")
        let target = try Fixtures.temporaryDirectory()
        for command in [
            ["compile", bundleURL.path, "--output", target.path],
            ["convert", bundleURL.path, "--output", target.appendingPathComponent("x.mlpackage").path],
        ] {
            let run = runExporter(command)
            #expect(run.status == 65, "\(command[0])")
            #expect(run.error == "Error: '\(graphURL.path)': \(problem)\n", "\(command[0])")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: target.path) == [])
    }

    @Test("compile, and export --compile before exporting, refuse artifacts the disk cannot hold, writing nothing")
    func diskSpace() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let plan = try Fixtures.plan(checkpoint)
        let bundleBytes = plan.estimatedBundleBytes(
            copiedFileBytes: ExportRunner.copiedFileBytes(of: plan, tokenizer: nil))
        let output = try Fixtures.temporaryDirectory()
        let export = [checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path]
        // Room for the bundle (with its tokenizer) but not for its compiled artifacts.
        let room = ["EXPORTER_TEST_AVAILABLE_DISK": String(bundleBytes + (1 << 10))]
        let refused = runExporter(export + ["--compile"], environment: room)
        #expect(refused.status == 71)
        #expect(refused.error.hasPrefix("Error: the bundle and its compiled artifacts need about "))
        #expect(
            refused.error.hasSuffix(
                "but '\(output.path)' has \(Format.mebibytes(bundleBytes + (1 << 10))) free; free some space or choose another --output-dir\n"
            ))
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == [])
        #expect(runExporter(export, environment: room).status == 0)
        let bundle = output.appendingPathComponent("tiny/Tiny.aimodel")
        let compiled = try Fixtures.temporaryDirectory()
        let compile = runExporter(
            ["compile", bundle.path, "--output", compiled.path], environment: ["EXPORTER_TEST_AVAILABLE_DISK": "100000"]
        )
        #expect(compile.status == 71)
        #expect(compile.error.hasPrefix("Error: the compiled artifacts need about "))
        #expect(try FileManager.default.contentsOfDirectory(atPath: compiled.path) == [])
        #expect(
            runExporter(
                ["compile", bundle.path, "--output", compiled.path],
                environment: ["EXPORTER_TEST_AVAILABLE_DISK": "100000000"]
            ).status == 0)
    }
}
