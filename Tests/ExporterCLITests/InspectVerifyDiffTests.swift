import Foundation
import TestSupport
import Testing

@testable import ExporterCLI
@testable import ExporterKit

/// Tiny exports shared by the tests: a synthetic qwen2 checkpoint, exported at 8 and 4 bits.
enum TinyArtifacts {
    static let tokens = [1, 5, 9, 200, 33, 17, 88, 4, 100, 250, 3, 64, 128, 7, 9, 11]

    /// A compression config file: palettise everything at `bits`, per tensor or per `group` channels.
    static func compressionConfig(bits: Int, group: Int?) throws -> URL {
        let granularity = group.map { #""per_grouped_channel", "group_size": \#($0)"# } ?? #""per_tensor""#
        let text = """
            {"schema": "exporter.compression/1", "name": "test_\(bits)bit", "description": "test", "rules": [],
             "default": {"mode": "palettize", "bits": \(bits), "granularity": \(granularity)}}
            """
        let url = try Fixtures.temporaryDirectory().appendingPathComponent("config.json")
        try Data(text.utf8).write(to: url)
        return url
    }

    /// Exports `checkpoint` at `bits` (fp16 embedding) and returns the bundle folder.
    static func export(_ checkpoint: URL, bits: Int, group: Int? = nil, name: String) throws -> URL {
        var options = ExportOptions(model: checkpoint.path)
        options.experimental = true
        options.computePrecision = .float16
        options.compression = .file(try compressionConfig(bits: bits, group: group))
        options.quantizeIOSEmbedding = false
        options.outputName = name
        let plan = try ExportPlan.make(options: options, resolver: try Fixtures.resolver())
        return try ExportRunner.run(plan, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory()))
            .bundleURL
    }

    /// Copies a bundle folder so a test can damage it.
    static func copy(_ bundle: URL) throws -> URL {
        let target = try Fixtures.temporaryDirectory().appendingPathComponent(bundle.lastPathComponent)
        try FileManager.default.copyItem(at: bundle, to: target)
        return target
    }

    /// Rewrites the manifest after `edit`, in canonical form.
    static func editManifest(_ bundle: URL, _ edit: (inout Manifest) throws -> Void) throws {
        let url = bundle.appendingPathComponent("manifest.json")
        var manifest = try Manifest.decoded(from: Data(contentsOf: url), path: url.path)
        try edit(&manifest)
        try Data(try manifest.canonicalJSON()).write(to: url)
    }

    /// Swaps the stored parts of two tensors of the same scheme and size, and records the new CRC-32:
    /// checksums hold, the layout is wrong.
    static func swapTensors(_ bundle: URL, _ a: String, _ b: String) throws {
        let weightsURL = bundle.appendingPathComponent("weights.bin")
        var bytes = [UInt8](try Data(contentsOf: weightsURL))
        try editManifest(bundle) { manifest in
            let first = try #require(manifest.tensors.first { $0.name == a })
            let second = try #require(manifest.tensors.first { $0.name == b })
            for (x, y) in zip(first.parts, second.parts) {
                #expect(x.bytes == y.bytes)
                let saved = Array(bytes[x.offset..<x.offset + x.bytes])
                bytes.replaceSubrange(x.offset..<x.offset + x.bytes, with: bytes[y.offset..<y.offset + y.bytes])
                bytes.replaceSubrange(y.offset..<y.offset + y.bytes, with: saved)
            }
            let index = try #require(manifest.files.firstIndex { $0.path == "weights.bin" })
            manifest.files[index].crc32 = BundleWriter.hex(bytes.withUnsafeBytes { CRC32.checksum($0) })
        }
        try Data(bytes).write(to: weightsURL)
    }
}

@Suite("command line: verify")
struct VerifyCommandTests {
    @Test(
        "a doctored response budget, reasoning marker or bits per weight fails (exit 1), each named with both figures")
    func doctoredFigures() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let bundle = try TinyArtifacts.copy(try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny4"))
        let manifest = try BundleReader(url: bundle).manifest
        let bits = manifest.sizes.bitsPerWeight
        try TinyArtifacts.editManifest(bundle) {
            $0.tokenizer?.defaultResponseTokens = 512
            $0.tokenizer?.reasoningMarker = nil
            $0.sizes.bitsPerWeight = 3
        }
        let run = runExporter(["verify", bundle.path])
        #expect(run.status == 1)
        #expect(
            run.error == """
                Error: 'manifest.json': sizes.bits_per_weight is 3, 8 × sizes.estimated_bundle_bytes \
                (\(manifest.sizes.estimatedBundleBytes)) / parameters (\(manifest.parameters)) rounded to two decimals is \
                \(bits)
                Error: 'manifest.json': tokenizer.reasoning_marker is null, the artifact's tokenizer files give <think>
                Error: 'manifest.json': tokenizer.default_response_tokens is 512, the artifact's tokenizer files give \
                2048 (reasoning marker <think>)

                """)
    }

    @Test("an untouched artifact verifies, with and without its checkpoint")
    func untouched() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let bundle = try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny4")
        let run = runExporter(["verify", bundle.path])
        #expect(run.status == 0, "\(run.error)")
        #expect(run.error == "")
        #expect(
            run.output == """
                verify \(bundle.path)
                  files    4 checked (size and CRC-32)
                  tensors  26 decoded
                everything holds

                """)
        let against = runExporter(["verify", bundle.path, "--against", checkpoint.path, "--min-sqnr", "10"])
        #expect(against.status == 0, "\(against.error)")
        #expect(against.output.contains("26 decoded, 26 compared with the checkpoint\n"))
        let manifestOnly = runExporter(["verify", bundle.appendingPathComponent("manifest.json").path])
        #expect(manifestOnly.status == 0)
        // A plan's --json output verifies too; it has no graph to hold its tensor list against.
        let planFile = try Fixtures.temporaryDirectory().appendingPathComponent("plan.json")
        let plan = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--dry-run", "--json",
        ])
        try Data(plan.output.utf8).write(to: planFile)
        let planRun = runExporter(["verify", planFile.path])
        #expect(planRun.status == 0, "\(planRun.error)")
        #expect(
            planRun.output == """
                verify \(planFile.path)
                  files    0 checked (size and CRC-32)
                  tensors  0 decoded
                           names and shapes not checked: a plan has no graph.json
                everything holds

                """)
    }

    @Test("diff names the tool versions that wrote two artifacts when they differ, in its text and its JSON")
    func diffToolVersion() throws {
        let original = try TinyArtifacts.export(try Fixtures.syntheticCheckpoint(), bits: 4, group: 8, name: "TinyV")
        let older = try TinyArtifacts.copy(original)
        let manifestURL = older.appendingPathComponent("manifest.json")
        try String(contentsOf: manifestURL, encoding: .utf8).replacingOccurrences(
            of: #""version" : "\#(ToolVersion.current)""#, with: #""version" : "0.7.0""#
        ).write(to: manifestURL, atomically: true, encoding: .utf8)
        let same = runExporter(["diff", original.path, original.path])
        #expect(!same.output.contains("tool version"))
        let text = runExporter(["diff", older.path, original.path])
        #expect(text.status == 0, "\(text.error)")
        let row = text.output.split(separator: "\n").map { $0.split(separator: " ").joined(separator: " ") }
            .filter { $0.hasPrefix("tool version") }
        #expect(row == ["tool version 0.7.0 \(ToolVersion.current)"], "\(text.output)")
        let json = runExporter(["diff", older.path, original.path, "--json"])
        let root = try #require(try JSONParser.parse(Array(json.output.utf8)).objectValue)
        let changed = root["changed"]?.arrayValue?.compactMap(\.objectValue) ?? []
        #expect(
            changed.map { [$0["field"]?.stringValue, $0["a"]?.stringValue, $0["b"]?.stringValue] } == [
                ["tool version", "0.7.0", ToolVersion.current]
            ], "\(json.output)")
    }

    @Test("a flipped byte, a truncated file, an edited manifest size each fail, naming the file")
    func damage() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let original = try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny4")
        let size = try #require(
            try FileManager.default.attributesOfItem(atPath: original.appendingPathComponent("weights.bin").path)[.size]
                as? Int)

        let flipped = try TinyArtifacts.copy(original)
        let weightsURL = flipped.appendingPathComponent("weights.bin")
        var bytes = try Data(contentsOf: weightsURL)
        bytes[size - 100] ^= 0x01
        try bytes.write(to: weightsURL)
        let flipRun = runExporter(["verify", flipped.path])
        #expect(flipRun.status == 1)
        #expect(flipRun.error.hasPrefix("Error: 'weights.bin': CRC-32 is "))
        #expect(flipRun.output.hasSuffix("problem(s) found\n"))
        #expect(!flipRun.error.contains("warning: "))
        // The same failure in an artifact an earlier version wrote: said, since its figures may follow older rules.
        let manifestURL = flipped.appendingPathComponent("manifest.json")
        let manifestText = try String(contentsOf: manifestURL, encoding: .utf8)
        try manifestText.replacingOccurrences(
            of: #""version" : "\#(ToolVersion.current)""#, with: #""version" : "0.7.0""#
        ).write(to: manifestURL, atomically: true, encoding: .utf8)
        let olderRun = runExporter(["verify", flipped.path])
        #expect(olderRun.status == 1)
        #expect(
            olderRun.error.hasSuffix(
                "\nwarning: exporter 0.7.0 wrote this artifact, and this is \(ToolVersion.current): a figure that version "
                    + "computed otherwise fails here; export or compile it again with this version\n"),
            "\(olderRun.error)")

        let tokenizer = try TinyArtifacts.copy(original)
        let tokenizerURL = tokenizer.appendingPathComponent("tokenizer/tokenizer.json")
        var text = try Data(contentsOf: tokenizerURL)
        text[3] ^= 0x20
        try text.write(to: tokenizerURL)
        #expect(
            runExporter(["verify", tokenizer.path]).error.hasPrefix("Error: 'tokenizer/tokenizer.json': CRC-32 is "))

        let truncated = try TinyArtifacts.copy(original)
        try bytes.prefix(size - 64).write(to: truncated.appendingPathComponent("weights.bin"))
        let truncRun = runExporter(["verify", truncated.path])
        #expect(truncRun.status == 1)
        #expect(
            truncRun.error.hasPrefix("Error: 'weights.bin': size is \(size - 64) bytes, the manifest says \(size)\n"))
        #expect(truncRun.error.contains("Error: 'weights.bin': header says \(size) bytes, the file has \(size - 64)\n"))
        #expect(truncRun.error.contains("runs past the end of 'weights.bin'"))
        // Cut to 1,000 bytes, inside the first tensor: every line says the file is short, none
        // names a size measured over the parts that still fit (68 bytes: "should be 128 bytes").
        try bytes.prefix(1000).write(to: truncated.appendingPathComponent("weights.bin"))
        let parts = try TinyArtifacts.manifestOf(original).tensors.flatMap { tensor in
            tensor.parts.map { (tensor.name, $0) }
        }
        let (firstName, first) = try #require(parts.first)
        #expect(first.offset + first.bytes > 1000)
        let shortRun = runExporter(["verify", truncated.path])
        #expect(shortRun.status == 1)
        #expect(
            shortRun.error == """
                Error: 'weights.bin': size is 1000 bytes, the manifest says \(size)
                Error: 'weights.bin': header says \(size) bytes, the file has 1000
                Error: tensor '\(firstName)': \(first.kind) at offset \(first.offset), \(first.bytes) bytes, runs past the end of 'weights.bin' (1000 bytes)
                Error: 'weights.bin': \(parts.count - 1) more part(s) run past its end

                """)

        let edited = try TinyArtifacts.copy(original)
        try TinyArtifacts.editManifest(edited) { manifest in
            let index = try #require(manifest.files.firstIndex { $0.path == "graph.json" })
            manifest.files[index].bytes += 1
        }
        let editRun = runExporter(["verify", edited.path])
        #expect(editRun.status == 1)
        let graphSize = try #require(
            try FileManager.default.attributesOfItem(atPath: edited.appendingPathComponent("graph.json").path)[.size]
                as? Int)
        #expect(
            editRun.error == """
                Error: 'graph.json': size is \(graphSize) bytes, the manifest says \(graphSize + 1)
                Error: 'manifest.json': sizes.bundle_bytes is \(try #require(try TinyArtifacts.manifestOf(original).sizes.bundleBytes)), the files listed sum to \(try #require(try TinyArtifacts.manifestOf(original).sizes.bundleBytes) + 1)

                """)

        let stray = try TinyArtifacts.copy(original)
        try Data("x".utf8).write(to: stray.appendingPathComponent("extra.txt"))
        #expect(
            runExporter(["verify", stray.path]).error
                == "Error: 'extra.txt': present in the artifact but not listed in the manifest\n")
    }

    @Test("a FIFO in place of weights.bin fails at once, naming it, instead of waiting for a writer")
    func fifoWeights() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let bundle = try TinyArtifacts.copy(try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny4"))
        let weights = bundle.appendingPathComponent("weights.bin")
        try FIFOFixture.make(at: weights)
        let start = Date()
        let run = runExporter(["verify", bundle.path])
        #expect(Date().timeIntervalSince(start) < 5, "waited for a writer")
        #expect(run.status == 1)
        #expect(
            run.error.hasPrefix("Error: 'weights.bin': cannot read '\(weights.path)': a FIFO, not a regular file\n"))
    }

    @Test("a pipe given as the manifest (a plan on /dev/stdin) is named as such (74), not as a folder without one")
    func pipeAsManifest() throws {
        let pipe = try Fixtures.temporaryDirectory().appendingPathComponent("plan.json")
        try FIFOFixture.make(at: pipe)
        for command in ["inspect", "verify"] {
            let run = runExporter([command, pipe.path])
            #expect(run.status == 74, "\(command)")
            #expect(run.error == "Error: cannot read '\(pipe.path)': a FIFO, not a regular file\n", "\(command)")
        }
        let diff = runExporter(["diff", pipe.path, pipe.path])
        #expect(diff.status == 74)
        #expect(diff.error == "Error: cannot read '\(pipe.path)': a FIFO, not a regular file\n")
    }

    @Test("an artifact exchanged during the forward pass of verify --run is reported as replaced (74), not broken (1)")
    func replacedDuringForwardPass() throws {
        // The same shapes, other weights: the forward pass reads the other artifact's.
        let checkpoint = try Fixtures.syntheticCheckpoint(overrides: ["num_hidden_layers": 2], seed: 7)
        let bundle = try Fixtures.export(checkpoint)
        let newer = try Fixtures.export(try Fixtures.syntheticCheckpoint(overrides: ["num_hidden_layers": 2], seed: 8))
        let exchanged = Locked(false)
        let error = TextSink()
        let context = CommandContext(
            arguments: ["verify", bundle.path, "--against", checkpoint.path, "--run", "--tokens", "1,5,9,200"],
            environment: ["HOME": "/nonexistent-home", "EXPORTER_PRESETS": Fixtures.presetsDirectory.path],
            currentDirectory: URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true),
            executable: URL(fileURLWithPath: "/nonexistent/exporter"), writeOutput: { _ in },
            writeError: { text in
                // The first progress line: the checks are done, the artifact pass is to come.
                if !exchanged.value, (try? Fixtures.exchange(bundle, newer)) != nil {
                    exchanged.mutate { $0 = true }
                }
                error.append(text)
            }, errorIsTerminal: true)
        let status = ExporterCommandLine.run(context)
        #expect(exchanged.value)
        #expect(status == 74, "\(error.text)")
        #expect(
            error.text.hasSuffix(
                "Error: cannot read '\(bundle.appendingPathComponent("manifest.json").path)': the artifact was replaced "
                    + "while it was verified; verify again\n"), "\(error.text)")
    }

    @Test("a file of the artifact that cannot be opened is an I/O failure (74), not corruption reported (1)")
    func unreadableFile() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let bundle = try TinyArtifacts.copy(try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny4"))
        // A link to itself: there, and no process opens it (root neither), as one without permission.
        let weights = bundle.appendingPathComponent("weights.bin")
        try FileManager.default.removeItem(at: weights)
        try FileManager.default.createSymbolicLink(atPath: weights.path, withDestinationPath: "weights.bin")
        var run = runExporter(["verify", bundle.path])
        #expect(run.status == 74)
        #expect(run.error == "Error: cannot read '\(weights.path)': too many levels of symbolic links\n")
        let manifest = bundle.appendingPathComponent("manifest.json")
        try FileManager.default.removeItem(at: manifest)
        try FileManager.default.createSymbolicLink(atPath: manifest.path, withDestinationPath: "manifest.json")
        run = runExporter(["verify", bundle.path])
        #expect(run.status == 74)
        #expect(run.error == "Error: cannot read '\(manifest.path)': too many levels of symbolic links\n")
    }

    @Test("swapped tensors pass the checksums and format checks but fail the forward pass")
    func swappedLayout() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let bundle = try TinyArtifacts.copy(try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny4"))
        try TinyArtifacts.swapTensors(
            bundle, "model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.o_proj.weight")
        let plain = runExporter(["verify", bundle.path])
        #expect(plain.status == 0, "\(plain.error)")
        let tokens = TinyArtifacts.tokens.map(String.init).joined(separator: ",")
        let run = runExporter(["verify", bundle.path, "--against", checkpoint.path, "--run", "--tokens", tokens])
        #expect(run.status == 1)
        #expect(run.error.contains("Error: forward pass: logit SNR "))
        #expect(run.error.contains(" is below --min-logit-snr 3.00 dB\n"))
        #expect(run.error.contains("Error: tensor 'model.layers.1.self_attn.q_proj.weight': SQNR "))
    }

    @Test("--run reports agreement; --json gives top-5 logits and next-token log-probabilities per position")
    func runJSON() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let bundle = try TinyArtifacts.export(checkpoint, bits: 8, name: "Tiny8")
        let run = runExporter([
            "verify", bundle.path, "--against", checkpoint.path, "--run", "--tokens", "1,2,3", "--json",
        ])
        #expect(run.status == 0, "\(run.error)")
        let root = try #require(try JSONParser.parse(Array(run.output.utf8)).objectValue)
        let forward = try #require(root["forward"]?.objectValue)
        let positions = try #require(forward["positions"]?.arrayValue)
        #expect(positions.count == 3)
        let first = try #require(positions[0].objectValue)
        #expect(first["next_token"]?.intValue == 2)
        #expect(first["source"]?.objectValue?["top5"]?.arrayValue?.count == 5)
        #expect(first["artifact"]?.objectValue?["next_token_logprob"]?.doubleValue != nil)
        #expect(positions[2].objectValue?["source"]?.objectValue?["next_token_logprob"]?.isNull == true)
        #expect(forward["top1_agreement"]?.doubleValue == 1)
        let again = runExporter([
            "verify", bundle.path, "--against", checkpoint.path, "--run", "--tokens", "1,2,3", "--json",
        ])
        #expect(again.output == run.output)
    }

    @Test("the manifest records its checkpoint's fingerprints; verify --against and eval warn on another checkpoint")
    func provenance() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(seed: 7)
        let other = try Fixtures.syntheticCheckpoint(seed: 8)
        let output = try Fixtures.temporaryDirectory()
        #expect(
            runExporter([
                checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
            ]).status == 0)
        let bundle = output.appendingPathComponent("tiny/Tiny.aimodel")
        let source = try BundleReader(url: bundle).manifest.model.source.files
        let weights = try CheckpointWeights(directory: checkpoint)
        let expected = try ExportRunner.inputFingerprints(directory: checkpoint, weights: weights).first {
            $0.name == "model.safetensors"
        }
        #expect(source.map(\.name) == ["model.safetensors"])
        #expect(source.first?.fingerprint == expected?.fingerprint)
        let tokens = output.appendingPathComponent("tokens.txt")
        try Data("1 2 3 4".utf8).write(to: tokens)
        let warning =
            "warning: the checkpoint is not the one this artifact was exported from: 'model.safetensors' differs from the "
            + "file its manifest records\n"
        let right = runExporter(["eval", bundle.path, "--against", checkpoint.path, "--tokens-file", tokens.path])
        #expect(right.status == 0 && right.error.isEmpty, "\(right.error)")
        let wrong = runExporter(["eval", bundle.path, "--against", other.path, "--tokens-file", tokens.path])
        #expect(wrong.status == 0)
        #expect(wrong.error == warning)
        let verify = runExporter(["verify", bundle.path, "--against", other.path])
        #expect(verify.error.hasPrefix(warning))
        // Its tokenizer edited (one token renamed, the same size), and a file added: the bundle's are not the checkpoint's.
        let tokenizer = checkpoint.appendingPathComponent("tokenizer.json")
        let text = try String(contentsOf: tokenizer, encoding: .utf8)
        let renamed = text.replacingOccurrences(of: "<|im_start|>", with: "<|im_begin|>")
        #expect(renamed != text && renamed.utf8.count == text.utf8.count)
        try Data(renamed.utf8).write(to: tokenizer)
        try Data("{}".utf8).write(to: checkpoint.appendingPathComponent("special_tokens_map.json"))
        let edited = runExporter(["verify", bundle.path, "--against", checkpoint.path])
        #expect(edited.status == 0)
        #expect(
            edited.error
                == "warning: the checkpoint's tokenizer files are not those this artifact carries: "
                + "'special_tokens_map.json', 'tokenizer.json' differ; export again to ship the checkpoint's\n")
        let evaluated = runExporter(["eval", bundle.path, "--against", checkpoint.path, "--tokens-file", tokens.path])
        #expect(evaluated.error == edited.error)
    }

    @Test("an artifact of synthetic weights carries no tokenizer: verify --against a checkpoint says nothing of one")
    func syntheticArtifactTokenizer() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        let export = runExporter([
            checkpoint.path, "--synthetic", "--experimental", "--compute-precision", "float16", "--output-dir",
            output.path,
        ])
        #expect(export.status == 0, "\(export.error)")
        let bundle = output.appendingPathComponent("tiny/Tiny.aimodel")
        let manifest = try BundleReader(url: bundle).manifest
        #expect(try ExportRunner.tokenizerMismatches(manifest, artifact: bundle, checkpoint: checkpoint) == [])
        let verify = runExporter(["verify", bundle.path, "--against", checkpoint.path])
        // Its weights are not the checkpoint's, which verify reports; of the tokenizer it says nothing.
        #expect(verify.error.hasPrefix("Error: tensor 'model.embed_tokens.weight': SQNR"), "\(verify.error)")
        #expect(!verify.error.contains("tokenizer"), "\(verify.error)")
    }

    @Test("flag combinations that cannot work are usage errors")
    func usage() throws {
        let run = runExporter(["verify", "x.aimodel", "--run"])
        #expect(run.status == 64)
        #expect(run.error.hasPrefix("Error: --run requires --against <checkpoint>\n"))
        for (option, value) in [("tokens", "1"), ("min-logit-snr", "50"), ("min-agreement", "0.5"), ("max-kl", "0.1")] {
            let stray = runExporter(["verify", "x", "--against", "y", "--\(option)", value])
            #expect(stray.status == 64)
            #expect(stray.error.hasPrefix("Error: --\(option) requires --run\n"))
        }
        #expect(
            runExporter(["verify", "x", "--against", "y", "--run", "--tokens", "1,a"]).error.hasPrefix(
                "Error: --tokens expects non-negative token ids, got 'a'\n"))
        let agreement = runExporter(["verify", "x", "--against", "y", "--run", "--min-agreement", "1.5"])
        #expect(agreement.status == 64)
        #expect(agreement.error.hasPrefix("Error: --min-agreement expects a number from 0 to 1, got '1.5'"))
        let missing = runExporter(["verify", "/nonexistent/x.aimodel"])
        #expect(missing.status == 66)
        #expect(missing.error == "Error: no artifact at '/nonexistent/x.aimodel': no such file or folder\n")
    }

    @Test("an artifact, a package or a token file that does not exist is 'not found' (66), naming it")
    func missingInputs() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let bundle = try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny4")
        let tokens = try Fixtures.temporaryDirectory().appendingPathComponent("tokens.txt")
        try Data("1, 2, 3".utf8).write(to: tokens)
        let gone = "Error: no artifact at '/nonexistent/x.aimodel': no such file or folder\n"
        let cases: [([String], String)] = [
            (["inspect", "/nonexistent/x.aimodel"], gone),
            (["diff", bundle.path, "/nonexistent/x.aimodel"], gone),
            (["eval", "/nonexistent/x.aimodel", "--against", checkpoint.path, "--tokens-file", tokens.path], gone),
            (["convert", "/nonexistent/x.aimodel", "--to", "mlpackage"], gone),
            (
                ["verify", "/nonexistent/x.mlpackage"],
                "Error: no artifact at '/nonexistent/x.mlpackage': no such file or folder\n"
            ),
            (
                ["inspect", "/nonexistent/x.mlpackage"],
                "Error: no artifact at '/nonexistent/x.mlpackage': no such file or folder\n"
            ),
            (
                ["verify", bundle.path, "--against", checkpoint.path, "--run", "--tokens-file", "/nonexistent/t.txt"],
                "Error: cannot read --tokens-file '/nonexistent/t.txt': no such file\n"
            ),
            (
                ["eval", bundle.path, "--against", checkpoint.path, "--tokens-file", "/nonexistent/t.txt"],
                "Error: cannot read --tokens-file '/nonexistent/t.txt': no such file\n"
            ),
            (
                [
                    checkpoint.path, "--experimental", "--compute-precision", "float16", "--calibration",
                    "/nonexistent/t.txt",
                    "--output-dir", try Fixtures.temporaryDirectory().path,
                ],
                "Error: cannot read --calibration '/nonexistent/t.txt': no such file\n"
            ),
        ]
        for (arguments, error) in cases {
            let run = runExporter(arguments)
            #expect(run.status == 66, "\(arguments): \(run.error)")
            #expect(run.error == error, "\(arguments)")
        }
        // A folder is there but cannot be read as a file: 74, as for every file an option names.
        let folder = runExporter(["eval", bundle.path, "--against", checkpoint.path, "--tokens-file", "/tmp"])
        #expect(folder.status == 74)
        #expect(folder.error == "Error: cannot read '/tmp': a folder, not a regular file\n")
        let calibrationFolder = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--calibration", "/tmp",
            "--output-dir", try Fixtures.temporaryDirectory().path,
        ])
        #expect(calibrationFolder.status == 74)
        #expect(calibrationFolder.error == "Error: cannot read '/tmp': a folder, not a regular file\n")
    }
}

extension TinyArtifacts {
    static func manifestOf(_ bundle: URL) throws -> Manifest {
        let url = bundle.appendingPathComponent("manifest.json")
        return try Manifest.decoded(from: Data(contentsOf: url), path: url.path)
    }
}
