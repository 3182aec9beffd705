import Foundation
import TestSupport
import Testing

@testable import ExporterCLI
@testable import ExporterKit

@Suite("exporter eval")
struct EvalCommandTests {
    @Test("reports both perplexities, KL and agreement; --json is stable")
    func evaluate() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let bundle = try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "TinyEval")
        let tokensFile = try Fixtures.temporaryDirectory().appendingPathComponent("tokens.txt")
        try Data("1, 5 9\n200,33 17\n".utf8).write(to: tokensFile)
        let run = runExporter(["eval", bundle.path, "--against", checkpoint.path, "--tokens-file", tokensFile.path])
        #expect(run.status == 0, "\(run.error)")
        #expect(run.output.hasPrefix("eval \(bundle.path)\n  compression      test_4bit\n"))
        #expect(run.output.contains("  tokens           6\n"))
        // Bits per weight with two decimals, as every other view prints them.
        let manifest = try TinyArtifacts.manifestOf(bundle)
        let linear = Format.decimal(FidelityEvaluation.linearBitsPerWeight(manifest))
        #expect(
            run.output.contains(
                "  bits/weight      \(linear) linear layers, \(Format.decimal(manifest.sizes.bitsPerWeight)) overall\n"),
            "\(run.output)")
        #expect(run.output.contains(" checkpoint → "))
        #expect(run.output.contains("  top-1 agreement  "))
        let json = runExporter([
            "eval", bundle.path, "--against", checkpoint.path, "--tokens-file", tokensFile.path, "--json",
        ])
        let root = try #require(try JSONParser.parse(Array(json.output.utf8)).objectValue)
        #expect(root["tokens"]?.intValue == 6)
        #expect(root["source_perplexity"]?.doubleValue != nil)
        #expect(root["linear_bits_per_weight"]?.doubleValue.map { $0 > 4 && $0 < 5 } == true)
        let again = runExporter([
            "eval", bundle.path, "--against", checkpoint.path, "--tokens-file", tokensFile.path, "--json",
        ])
        #expect(again.output == json.output)
        // Every number as the evaluation computed it, not rounded to six decimals.
        let result = try FidelityEvaluation.evaluate(
            artifact: try LoadedArtifact(url: bundle), checkpoint: checkpoint, tokens: [1, 5, 9, 200, 33, 17])
        #expect(root["mean_kl"]?.doubleValue == result.comparison.meanKL)
        #expect(root["source_perplexity"]?.doubleValue == result.sourcePerplexity)
    }

    @Test("a perplexity from a million on is printed in scientific notation, below it with three decimals")
    func largePerplexity() {
        #expect(
            EvalCommand.number(14_631_442_997_239_475_751_940_464_603_883_021_370_910_337_662_976, "%.3f")
                == "1.463e+49")
        #expect(EvalCommand.number(999_999.5, "%.3f") == "999999.500")
        #expect(EvalCommand.number(1_000_000, "%.3f") == "1.000e+06")
        #expect(EvalCommand.number(6_055.01, "%+.2f") == "+6055.01")
        #expect(EvalCommand.number(6.2e9, "%+.2f") == "+6.200e+09")
        #expect(EvalCommand.number(.infinity, "%.3f") == "inf")
        #expect(EvalCommand.number(.nan, "%+.2f") == "n/a")
    }

    @Test("an infinite perplexity is inf in the text of eval and verify --run, null in their JSON")
    func infinitePerplexity() throws {
        // A final norm of 60,000 makes logits of about 10⁵: exp(−mean log p) is beyond a double.
        let checkpoint = try Fixtures.syntheticCheckpoint()
        try Fixtures.setValues((0..<64).map { ($0, 60000) }, of: "model.norm.weight", in: checkpoint)
        let bundle = try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "TinyInf")
        let tokens = ["--tokens", "1,5,9,200,33,17"]
        let eval = runExporter(["eval", bundle.path, "--against", checkpoint.path] + tokens)
        #expect(eval.status == 0, "\(eval.error)")
        #expect(eval.output.contains("\n  perplexity       inf checkpoint → inf artifact (n/a%)\n"), "\(eval.output)")
        let evalJSON = runExporter(["eval", bundle.path, "--against", checkpoint.path, "--json"] + tokens)
        let root = try #require(try JSONParser.parse(Array(evalJSON.output.utf8)).objectValue)
        for key in ["source_perplexity", "artifact_perplexity", "perplexity_increase_percent"] {
            #expect(root[key] == .null, "\(key)")
        }
        #expect(root["mean_kl"]?.doubleValue != nil)

        let verify = runExporter(["verify", bundle.path, "--against", checkpoint.path, "--run"] + tokens)
        #expect(
            verify.output.contains("\n                perplexity inf (checkpoint), inf (artifact)\n"),
            "\(verify.output)")
        let verifyJSON = runExporter(["verify", bundle.path, "--against", checkpoint.path, "--run", "--json"] + tokens)
        let forward = try #require(
            try JSONParser.parse(Array(verifyJSON.output.utf8)).objectValue?["forward"]?.objectValue)
        #expect(forward["source_perplexity"] == .null)
        #expect(forward["artifact_perplexity"] == .null)
    }

    @Test("on a terminal a progress line follows both passes layer by layer and is cleared; in a pipe, nothing")
    func progress() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let bundle = try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "TinyEvalProgress")
        let arguments = ["eval", bundle.path, "--against", checkpoint.path, "--tokens", "1,5,9,200,33,17"]
        let piped = runExporter(arguments)
        #expect(piped.status == 0, "\(piped.error)")
        #expect(piped.error.isEmpty, "\(piped.error)")
        let shown = runExporter(arguments, terminal: true)
        #expect(shown.status == 0, "\(shown.error)")
        #expect(shown.output == piped.output)
        let lines = shown.error.split(separator: "\r").map(String.init).filter { $0.contains("%") }
        // The tiny model has 2 layers: each pass draws before its first layer, after each
        // layer and after the head (the bar redraws at most ten times a second, so the
        // last one, which always draws, is what is certain).
        #expect(lines.first?.contains("  0%  checkpoint pass, layer 1 of 2  ETA -- ") == true, "\(lines)")
        #expect(lines.last?.contains("100%  artifact pass, done  ETA 0s") == true, "\(lines)")
        #expect(shown.error.hasSuffix("\r\u{1B}[K"))
        // Within the terminal's width, less a column: the bar goes, then the detail is cut short.
        for columns in [40, 20] {
            let narrow = runExporter(arguments, environment: ["COLUMNS": "\(columns)"], terminal: true)
            let drawn = narrow.error.split(separator: "\r").map { $0.replacingOccurrences(of: "\u{1B}[K", with: "") }
                .filter { !$0.isEmpty }
            #expect(!drawn.isEmpty)
            #expect(drawn.allSatisfy { $0.count <= columns - 1 }, "\(drawn)")
            #expect(!narrow.error.contains("█"))
        }
        // A terminal without escape sequences: lines are erased with spaces.
        let dumb = runExporter(arguments, environment: ["TERM": "dumb", "COLUMNS": "60"], terminal: true)
        #expect(!dumb.error.contains("\u{1B}"))
        #expect(dumb.error.hasSuffix("\r" + String(repeating: " ", count: 59) + "\r"))
        // There, an error erases the line the failed step left with spaces too.
        let failed = runExporter(
            ["eval", bundle.path, "--against", "/nonexistent-checkpoint", "--tokens", "1,5"],
            environment: ["TERM": "dumb", "COLUMNS": "60"], terminal: true)
        #expect(failed.status != 0)
        #expect(failed.error.hasPrefix("\r" + String(repeating: " ", count: 59) + "\rError: "), "\(failed.error)")
        // A width of 0 (or not a number) is no width: 80 columns, the bar drawn.
        for columns in ["0", "-5", "wide"] {
            let unknown = runExporter(arguments, environment: ["COLUMNS": columns], terminal: true)
            let drawn = unknown.error.split(separator: "\r").map { $0.replacingOccurrences(of: "\u{1B}[K", with: "") }
                .filter { !$0.isEmpty }
            #expect(drawn.last == "████████████████████████ 100%  artifact pass, done  ETA 0s ", "\(columns)")
        }
    }

    @Test(
        "a damaged artifact is refused as verify refuses it, never measured; compile agrees; a missing file is named once"
    )
    func damagedArtifact() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let bundle = try TinyArtifacts.copy(
            try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "TinyDamaged"))
        // A compiled artifact without its weights: named once, by the file checks.
        let compiledFolder = try Fixtures.temporaryDirectory()
        #expect(runExporter(["compile", bundle.path, "--output", compiledFolder.path, "--device", "h17p"]).status == 0)
        let compiledArtifact = compiledFolder.appendingPathComponent("TinyDamaged.h17p.aimodelc")
        try FileManager.default.removeItem(at: compiledArtifact.appendingPathComponent("weights.bin"))
        let noWeights = runExporter(["verify", compiledArtifact.path])
        #expect(noWeights.status == 1)
        #expect(noWeights.error == "Error: 'weights.bin': missing\n", "\(noWeights.error)")
        let weights = bundle.appendingPathComponent("weights.bin")
        var bytes = try Data(contentsOf: weights)
        let crc = BundleWriter.hex(bytes.withUnsafeBytes { CRC32.checksum($0) })
        bytes[bytes.count - 1] ^= 0x55
        try bytes.write(to: weights)
        let flipped = BundleWriter.hex(bytes.withUnsafeBytes { CRC32.checksum($0) })
        let evaluation = ["eval", bundle.path, "--against", checkpoint.path, "--tokens", "1,5,9"]
        let corrupted = runExporter(evaluation)
        #expect(corrupted.status == 1)
        #expect(corrupted.error == "Error: 'weights.bin': CRC-32 is \(flipped), the manifest says \(crc)\n")
        #expect(corrupted.output.isEmpty)
        try FileManager.default.removeItem(at: weights)
        let compiled = try Fixtures.temporaryDirectory().path
        for arguments in [evaluation, ["compile", bundle.path, "--output", compiled], ["verify", bundle.path]] {
            let missing = runExporter(arguments)
            #expect(missing.status == 1, "\(arguments)")
            #expect(missing.error.hasPrefix("Error: 'weights.bin': missing\n"), "\(arguments): \(missing.error)")
        }
        // verify names a missing graph.json once, not again as unreadable.
        try FileManager.default.removeItem(at: bundle.appendingPathComponent("graph.json"))
        let noGraph = runExporter(["verify", bundle.path])
        #expect(noGraph.status == 1)
        #expect(noGraph.error.components(separatedBy: "'graph.json'").count == 2, "\(noGraph.error)")
        #expect(noGraph.error.contains("Error: 'graph.json': missing\n"))
    }

    @Test("missing inputs are usage errors")
    func usage() throws {
        let noCheckpoint = runExporter(["eval", "x.aimodel", "--tokens", "1,2"])
        #expect(noCheckpoint.status == 64)
        #expect(
            noCheckpoint.error == """
                Error: missing '--against <checkpoint>'
                Usage: exporter eval <artifact> --against <checkpoint> [<options>]
                  See 'exporter eval --help' for more information.

                """)
        let noTokens = runExporter(["eval", "x.aimodel", "--against", "y"])
        #expect(noTokens.error.hasPrefix("Error: eval requires --tokens-file <file> or --tokens <ids>\n"))
        let both = runExporter(["eval", "x", "--against", "y", "--tokens", "1,2", "--tokens-file", "f"])
        #expect(both.error.hasPrefix("Error: --tokens and --tokens-file cannot be used together\n"))
    }
}
