import Foundation
import TestSupport
import Testing

@testable import ExporterCLI
@testable import ExporterKit

@Suite("command line: inspect and diff")
struct InspectDiffTests {
    @Test("inspect prints one aligned screen within 80 columns, from a bundle or its manifest.json")
    func inspectBundle() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let bundle = try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny4")
        let run = runExporter(["inspect", bundle.path])
        #expect(run.status == 0, "\(run.error)")
        let lines = run.output.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.allSatisfy { $0.count <= 80 }, "\(lines.filter { $0.count > 80 })")
        #expect(lines.first == "Tiny4  (experimental (no preset), bundle)")
        #expect(run.output.contains("  KV cache       131,072 bytes (128.0 KiB)\n"))
        #expect(run.output.contains("  tokenizer      1 file(s); <think> in vocabulary: 2048 response tokens\n"))
        #expect(run.output.contains("  group      tensors  parameters    bytes  bits/w  storage\n"))
        #expect(run.output.contains("  lowest SQNR "))
        #expect(run.output.hasSuffix("  no device verdicts (compile with 'exporter compile')\n"))
        let viaManifest = runExporter(["inspect", bundle.appendingPathComponent("manifest.json").path])
        #expect(viaManifest.output == run.output)
        // --worst 0 lists none: the table goes, not "no SQNR recorded", which the bundle has.
        let noneListed = runExporter(["inspect", bundle.path, "--worst", "0"])
        #expect(noneListed.status == 0)
        #expect(!noneListed.output.contains("SQNR"))
        #expect(noneListed.output.contains("\n\n  no device verdicts"))
        #expect(!noneListed.output.contains("\n\n\n"))
    }

    @Test("a bundle whose manifest.json is a folder is no artifact (65), not a file that cannot be read")
    func manifestFolder() throws {
        let bundle = try Fixtures.export(try Fixtures.syntheticCheckpoint())
        let manifest = bundle.appendingPathComponent("manifest.json")
        try FileManager.default.removeItem(at: manifest)
        try FileManager.default.createDirectory(at: manifest, withIntermediateDirectories: false)
        for command in ["inspect", "verify"] {
            let run = runExporter([command, bundle.path])
            #expect(run.status == 65, "\(command)")
            #expect(
                run.error == "Error: '\(bundle.path)' is not an exporter artifact: no readable manifest.json\n",
                "\(command)")
        }
    }

    @Test("inspect --json, a plan's manifest, synthetic weights and a compiled section's verdicts")
    func inspectJSONAndVerdicts() throws {
        let plan = runExporter(["plan", "Qwen2.5-1.5B", "--json"])
        let planFile = try Fixtures.temporaryDirectory().appendingPathComponent("plan.json")
        try Data(plan.output.utf8).write(to: planFile)
        let human = runExporter(["inspect", planFile.path])
        #expect(human.status == 0)
        #expect(human.output.split(separator: "\n").allSatisfy { $0.count <= 80 })
        #expect(human.output.contains("  no SQNR recorded (a plan, or every tensor stored exactly)\n"))
        // A plan's size is the planned weights file, an estimate: not "size on disk".
        #expect(human.output.contains("\n  size (est.)    891.3 MB (850.0 MiB), 4.62 bits per weight\n"))
        #expect(!human.output.contains("size on disk"))
        let json = runExporter(["inspect", planFile.path, "--json"])
        let root = try #require(try JSONParser.parse(Array(json.output.utf8)).objectValue)
        #expect(root["parameters"]?.intValue == 1_543_714_304)
        #expect(root["kv_cache_bytes"]?.intValue == 117_440_512)
        let verdicts = try #require(root["device_verdicts"]?.arrayValue)
        let devices: [String] = verdicts.compactMap { $0.objectValue?["device"]?.stringValue }
        #expect(devices.contains("h17p"))
        #expect(root["groups"]?.arrayValue?.count == 4)
        #expect(human.output.contains("  h17p iOS       fits "), "\(human.output)")
        #expect(human.output.contains("  h14g visionOS  fits "))
        // A device offered no ahead-of-time compilation: the portable bundle's verdict, said so.
        #expect(human.output.contains("  h14p iOS       fits     no AOT; 1.2 GiB of 2.0 GiB (2.2 GiB entitled)\n"))
        #expect(verdicts.compactMap { $0.objectValue?["platform"]?.stringValue }.last == "visionOS")
        #expect(human.output.contains("\n  tokenizer      not recorded in a plan\n"))

        // A compiled artifact shows its own device's verdict, and synthetic weights are flagged.
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let export = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--synthetic", "--output-dir",
            output.path,
            "--compile",
        ])
        #expect(export.status == 0, "\(export.error)")
        let compiled = runExporter(["inspect", output.appendingPathComponent("tiny/Tiny.h17p.aimodelc").path])
        #expect(compiled.status == 0, "\(compiled.error)")
        #expect(compiled.output.contains("  weights       SYNTHETIC (generated by --synthetic): never ship these\n"))
        #expect(
            compiled.output.contains(
                "  device    verdict  detail\n  h17p iOS  fits     1.5 MiB of 2.8 GiB (5.6 GiB entitled)\n"))
        // Its HTML report shows the same memory: the device's own plan, tables included.
        let artifact = output.appendingPathComponent("tiny/Tiny.h17p.aimodelc")
        let manifest = try #require(try CompiledArtifactReader(url: artifact).manifest.compiled?.memory)
        // The KV figure of the bundle, then what the device reserves, page-padded.
        #expect(
            compiled.output.contains(
                "                reserved on h17p: \(Format.mebibytes(manifest.kvCacheBytes)), each layer's K and V "
                    + "padded to the 16.0 KiB page\n  memory        "))
        let page = output.appendingPathComponent("compiled.html")
        #expect(runExporter(["inspect", artifact.path, "--html", page.path]).status == 0)
        let html = try String(contentsOf: page, encoding: .utf8)
        #expect(html.contains("<td>\(Format.mebibytes(manifest.totalBytes)) (this device's plan)</td>"))
        #expect(html.contains(">tables<"))
        #expect(html.contains("The portable bundle's estimate: "))
        #expect(html.contains("reserved on h17p: \(Format.mebibytes(manifest.kvCacheBytes))"))
        let inspected = runExporter(["inspect", artifact.path, "--json"])
        let summary = try #require(try JSONParser.parse(Array(inspected.output.utf8)).objectValue)
        #expect(summary["kv_cache_reserved_bytes"]?.intValue == manifest.kvCacheBytes)
    }

    @Test("one token of context, one layer and one KV head are singular in plan, export and inspect")
    func singular() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(
            overrides: ["num_hidden_layers": 1, "num_key_value_heads": 1], name: "One")
        let output = try Fixtures.temporaryDirectory()
        let base = [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--context", "1", "--output-dir",
            output.path,
        ]
        let plan = runExporter(["plan"] + base)
        #expect(plan.status == 0, "\(plan.error)")
        #expect(plan.output.contains("\n  context         1 token (max 512)\n"))
        #expect(plan.output.contains("= 2 × 1 layer × 1 KV head × 16 × 1 × 2 B\n"))
        let export = runExporter(base)
        #expect(export.status == 0, "\(export.error)")
        #expect(export.output.contains(" context "))
        #expect(export.output.contains(" 1 token\n"))
        let inspect = runExporter(["inspect", output.appendingPathComponent("one/One.aimodel").path])
        #expect(inspect.output.contains("\n  context        1 token\n"))
        #expect(inspect.output.contains("= 2 × 1 layer × 1 KV head × 16 × 1 × float16\n"))
        #expect(!(plan.output + export.output + inspect.output).contains(" 1 tokens"))
    }

    @Test("inspect --html writes a self-contained report, byte-identical on a rerun")
    func html() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let bundle = try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny4")
        let folder = try Fixtures.temporaryDirectory()
        let first = folder.appendingPathComponent("a.html")
        let second = folder.appendingPathComponent("b.html")
        let run = runExporter(["inspect", bundle.path, "--html", first.path])
        #expect(run.status == 0)
        #expect(run.error == "wrote \(first.path)\n")
        _ = runExporter(["inspect", bundle.path, "--html", second.path])
        let html = try String(contentsOf: first, encoding: .utf8)
        #expect(try Data(contentsOf: first) == Data(contentsOf: second))
        for chart in ["size", "bits", "sqnr", "memory"] { #expect(html.contains("<svg id=\"\(chart)\"")) }
        #expect(
            html.contains("No device verdicts (compile with &#39;exporter compile&#39;).")
                || html.contains("No device verdicts"))
        for forbidden in ["<script", "src=", "href=", "@import", "url("] {
            #expect(!html.contains(forbidden), "\(forbidden)")
        }
    }

    @Test(
        "inspect --html naming a folder or a path in a missing folder fails naming it (74), without a Foundation dump")
    func htmlUnwritable() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let bundle = try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny4")
        let folder = try Fixtures.temporaryDirectory()
        let run = runExporter(["inspect", bundle.path, "--html", folder.path])
        #expect(run.status == 74)
        #expect(
            run.error == "Error: cannot write '\(folder.path)': a folder is there, not a regular file: not replaced\n")
        #expect(run.output.isEmpty)
        let missing = folder.appendingPathComponent("no/report.html")
        let nowhere = runExporter(["inspect", bundle.path, "--html", missing.path])
        #expect(nowhere.status == 74)
        #expect(nowhere.error == "Error: cannot write '\(missing.path)': no such file or directory\n")
        // Nothing but a regular file is replaced: not a FIFO (or a device such as /dev/null), not a link.
        let fifo = folder.appendingPathComponent("fifo.html")
        try FIFOFixture.make(at: fifo)
        let link = folder.appendingPathComponent("link.html")
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: "elsewhere.html")
        for (path, kind) in [(fifo, "a FIFO"), (link, "a symbolic link")] {
            let refused = runExporter(["inspect", bundle.path, "--html", path.path])
            #expect(refused.status == 74)
            #expect(
                refused.error
                    == "Error: cannot write '\(path.path)': \(kind) is there, not a regular file: not replaced\n")
        }
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: link.path) == "elsewhere.html")
        // Nor a file of the artifact inspected; beside a manifest given as a file, a report is fine.
        let inside = bundle.appendingPathComponent("weights.bin")
        let own = runExporter(["inspect", bundle.path, "--html", inside.path])
        #expect(own.status == 74)
        #expect(
            own.error
                == "Error: cannot write '\(inside.path)': it is inside the artifact '\(bundle.path)': a report would "
                + "replace its files\n")
        #expect(runExporter(["verify", bundle.path]).status == 0)
        let plan = folder.appendingPathComponent("plan.json")
        try Data(contentsOf: bundle.appendingPathComponent("manifest.json")).write(to: plan)
        #expect(
            runExporter(["inspect", plan.path, "--html", folder.appendingPathComponent("plan.html").path]).status == 0)
    }

    @Test(
        "inspect escapes control characters of the manifest's model name and tensor names: no terminal escape, no forged line"
    )
    func escapedManifestText() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let bundle = try TinyArtifacts.copy(try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny4"))
        try TinyArtifacts.editManifest(bundle) { manifest in
            manifest.model.name = "Ti\u{1B}[31mny\nFAKE"
            manifest.tensors[0].name = "bad\nname\u{1B}[1m"
            manifest.tensors[0].sqnrDB = 0.5
        }
        let run = runExporter(["inspect", bundle.path])
        #expect(run.status == 0, "\(run.error)")
        #expect(!run.output.contains("\u{1B}"))
        #expect(run.output.hasPrefix("Ti\\u{1B}[31mny\\u{A}FAKE  ("))
        #expect(run.output.contains("bad\\u{A}name\\u{1B}[1m"))
        #expect(!run.output.split(separator: "\n").contains { $0.hasPrefix("FAKE") || $0.hasPrefix("name") })
        // The HTML report shows them the same way, and markup as entities.
        try TinyArtifacts.editManifest(bundle) { manifest in manifest.model.name = "<b>\"Ti\u{1B}ny\u{0}" }
        let page = bundle.deletingLastPathComponent().appendingPathComponent("report.html")
        #expect(runExporter(["inspect", bundle.path, "--html", page.path]).status == 0)
        let html = try String(contentsOf: page, encoding: .utf8)
        #expect(!html.unicodeScalars.contains { $0.isControlCharacter && $0 != "\n" })
        #expect(html.contains("&lt;b&gt;&quot;Ti\\u{1B}ny\\u{0}"))
    }

    @Test("a broken manifest is refused naming the file and, in plain words, the key path")
    func brokenManifest() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let bundle = try TinyArtifacts.copy(try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny4"))
        let url = bundle.appendingPathComponent("manifest.json")
        let original = try Data(contentsOf: url)
        try (original + Data("junk".utf8)).write(to: url)
        for command in ["inspect", "verify"] {
            let run = runExporter([command, bundle.path])
            #expect(run.status == 65)
            #expect(
                run.error
                    == "Error: '\(url.path)' is not an exporter artifact: the manifest is not valid JSON: "
                    + "unexpected data after the document at byte \(original.count)\n")
        }
        let text = String(decoding: original, as: UTF8.self)
        let offset = try #require(text.range(of: "\"offset\" : 64"))
        try Data(text.replacingCharacters(in: offset, with: "\"offset\" : 64.5").utf8).write(to: url)
        let run = runExporter(["diff", bundle.path, bundle.path])
        #expect(run.status == 65)
        #expect(
            run.error
                == "Error: '\(url.path)' is not an exporter artifact: 'tensors[0].parts[0].offset' should be an integer, found 64.5\n"
        )
    }

    @Test("diff shows what changed and exits 1 only when the size grows beyond --max-size-growth")
    func diffGate() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let small = try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny")
        let large = try TinyArtifacts.export(checkpoint, bits: 8, name: "Tiny")
        let before = try TinyArtifacts.manifestOf(small).sizes.bundleBytes ?? 0
        let after = try TinyArtifacts.manifestOf(large).sizes.bundleBytes ?? 0
        let growth = Double(after - before) / Double(before) * 100
        #expect(growth > 10)

        let plain = runExporter(["diff", small.path, large.path])
        #expect(plain.status == 0)
        #expect(plain.output.contains("  size on disk "))
        #expect(plain.output.contains("  model.layers.0.self_attn.q_proj.weight  4-bit LUT g8 → 8-bit LUT/tensor "))

        let failing = runExporter(["diff", small.path, large.path, "--max-size-growth", "10"])
        #expect(failing.status == 1)
        #expect(
            failing.error
                == "Error: size on disk grew by \(String(format: "%.2f", growth))% (\(before) → \(after) bytes), more than --max-size-growth 10%\n"
        )
        #expect(failing.output.hasSuffix("release gate: failed\n"))

        let passing = runExporter([
            "diff", small.path, large.path, "--max-size-growth", String(Int(growth.rounded(.up)) + 1),
        ])
        #expect(passing.status == 0)
        #expect(passing.error == "")
        #expect(passing.output.hasSuffix("release gate: passed\n"))
        #expect(runExporter(["diff", large.path, small.path, "--max-size-growth", "0"]).status == 0)

        let drop = runExporter(["diff", large.path, small.path, "--min-sqnr-drop", "3"])
        #expect(drop.status == 1)
        #expect(
            drop.error.hasPrefix("Error: tensor 'model.embed_tokens.weight': SQNR fell by ")
                || drop.error.hasPrefix("Error: tensor 'model.layers.0"))
        #expect(
            runExporter(["diff", small.path, small.path, "--min-sqnr-drop", "0", "--max-size-growth", "0"]).status == 0)

        let json = runExporter(["diff", small.path, large.path, "--json", "--max-size-growth", "10"])
        let root = try #require(try JSONParser.parse(Array(json.output.utf8)).objectValue)
        #expect(root["regressions"]?.arrayValue?.count == 1)
        // Bits per weight read as every other view prints them: two decimals in text, the figure in JSON.
        let manifestA = try TinyArtifacts.manifestOf(small)
        let bits = try #require(
            root["quantities"]?.arrayValue?.first { $0.objectValue?["field"]?.stringValue == "bits per weight" })
        #expect(bits.objectValue?["a"]?.doubleValue == manifestA.sizes.bitsPerWeight)
        #expect(json.output.contains("\"a\" : \(manifestA.sizes.bitsPerWeight),"))
        #expect(
            plain.output.contains("  bits/w: norm           16.00      16.00                   =\n"), "\(plain.output)")
        // Memory grows with the 8-bit weights; the verdicts stay "fits" (a bundle has none anyway).
        let memory = runExporter([
            "diff", small.path, large.path, "--max-memory-growth", "1", "--no-verdict-regression",
        ])
        #expect(memory.status == 1)
        #expect(memory.error.hasPrefix("Error: memory grew by "), "\(memory.error)")
        #expect(memory.error.hasSuffix("bytes), more than --max-memory-growth 1%\n"))
        #expect(runExporter(["diff", small.path, large.path, "--no-verdict-regression"]).status == 0)
        #expect(runExporter(["diff", small.path, large.path, "--max-size-growth", "ten"]).status == 64)
    }

    @Test("an exactly stored tensor's SQNR is null in diff --json, as in the manifest, and 'exact' in the text")
    func diffExactSQNR() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let export = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--compression", "none",
            "--output-dir", output.path,
        ])
        #expect(export.status == 0, "\(export.error)")
        let kept = output.appendingPathComponent("tiny/Tiny.aimodel")
        let compressed = try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny")
        let name = "model.layers.0.self_attn.q_proj.weight"
        #expect(try TinyArtifacts.manifestOf(kept).tensors.first { $0.name == name }?.sqnrDB == nil)
        let sqnr = try #require(try TinyArtifacts.manifestOf(compressed).tensors.first { $0.name == name }?.sqnrDB)

        let json = runExporter(["diff", kept.path, compressed.path, "--json"])
        #expect(json.status == 0)
        let tensors = try #require(try JSONParser.parse(Array(json.output.utf8)).objectValue?["tensors"]?.arrayValue)
        let row = try #require(tensors.first { $0.objectValue?["name"]?.stringValue == name }?.objectValue)
        #expect(row["sqnr_db_a"] == .null)
        #expect(row["sqnr_db_b"]?.doubleValue == sqnr)
        // Every SQNR of the diff is a number or null, never a string.
        #expect(
            tensors.allSatisfy { tensor in
                ["sqnr_db_a", "sqnr_db_b"].allSatisfy { key in
                    tensor.objectValue?[key].map { $0 == .null || $0.doubleValue != nil } == true
                }
            })
        #expect(!json.output.contains("\"exact\""))
        // Back the other way, the compressed side first: null on the b side.
        let back = runExporter(["diff", compressed.path, kept.path, "--json"])
        let backRow = try #require(
            try JSONParser.parse(Array(back.output.utf8)).objectValue?["tensors"]?.arrayValue?.first {
                $0.objectValue?["name"]?.stringValue == name
            }?.objectValue)
        #expect(backRow["sqnr_db_a"]?.doubleValue == sqnr)
        #expect(backRow["sqnr_db_b"] == .null)

        let text = runExporter(["diff", kept.path, compressed.path])
        #expect(
            text.output.contains(
                "  \(name)  fp16 → 4-bit LUT g8     exact  \(String(format: "%.2f", sqnr)) dB\n"), "\(text.output)")
        // The gate counts compressing an exact tensor as an infinite drop, in the text and the JSON alike.
        let gated = runExporter(["diff", kept.path, compressed.path, "--json", "--min-sqnr-drop", "100"])
        #expect(gated.status == 1)
        #expect(
            gated.error.hasPrefix(
                "Error: tensor 'model.layers.0.self_attn.q_proj.weight': SQNR fell by ∞ dB (exact → "
                    + "\(String(format: "%.2f", sqnr)) dB), more than --min-sqnr-drop 100 dB\n"), "\(gated.error)")
    }
}

@Suite("forward pass: checkpoint against artifact")
struct ForwardAgreementTests {
    @Test("on a tiny synthetic model 8-bit agrees fully and 4-bit less, both reported")
    func agreement() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let eight = try LoadedArtifact(url: try TinyArtifacts.export(checkpoint, bits: 8, name: "Tiny8"))
        let four = try LoadedArtifact(url: try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny4"))
        var steps: [WorkProgress] = []
        let a = try ArtifactVerifier.compareForward(
            artifact: eight, checkpoint: checkpoint, tokens: TinyArtifacts.tokens, checkingFiles: true
        ) {
            steps.append($0)
        }
        // Two passes of a 2-layer model: before the first layer, after each layer, after the head.
        #expect(steps.map(\.done) == [0, 1, 2, 3, 3, 4, 5, 6])
        #expect(steps.allSatisfy { $0.total == 6 && !$0.countsBytes })
        #expect(
            steps.map(\.stage) == [
                "checkpoint pass, layer 1 of 2", "checkpoint pass, layer 2 of 2", "checkpoint pass, the head",
                "checkpoint pass, done", "artifact pass, layer 1 of 2", "artifact pass, layer 2 of 2",
                "artifact pass, the head", "artifact pass, done",
            ])
        let b = try ArtifactVerifier.compareForward(
            artifact: four, checkpoint: checkpoint, tokens: TinyArtifacts.tokens, checkingFiles: false)
        #expect(a.top1Agreement == 1)
        #expect(a.meanKL < 0.01)
        #expect(b.meanKL > a.meanKL)
        #expect(b.logitSNR < a.logitSNR)
        #expect(b.logitSNR > 3)
        print(
            "8-bit: agreement \(a.top1Agreement), max Δlogit \(a.maxLogitDifference), mean KL \(a.meanKL), logit SNR \(a.logitSNR), "
                + "ppl \(a.sourcePerplexity ?? 0) → \(a.artifactPerplexity ?? 0)")
        print(
            "4-bit: agreement \(b.top1Agreement), max Δlogit \(b.maxLogitDifference), mean KL \(b.meanKL), logit SNR \(b.logitSNR), "
                + "ppl \(b.sourcePerplexity ?? 0) → \(b.artifactPerplexity ?? 0)")
    }
}
