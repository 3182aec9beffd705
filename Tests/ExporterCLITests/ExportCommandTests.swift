import Foundation
import Testing
import TestSupport
@testable import ExporterCLI
@testable import ExporterKit

@Suite("command line: export and synth")
struct ExportCommandTests {
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

    @Test("synth writes a checkpoint that exports, and the summary names the bundle")
    func synthThenExport() throws {
        let config = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "mistral"), name: "Mini")
        let checkpoint = try Fixtures.temporaryDirectory().appendingPathComponent("Mini")
        let synth = runExporter(["synth", config.path, "--out", checkpoint.path, "--seed", "5", "--shard-size", "50000"])
        #expect(synth.status == 0, "\(synth.error)")
        #expect(FileManager.default.fileExists(atPath: checkpoint.appendingPathComponent("model.safetensors.index.json").path))
        let output = try Fixtures.temporaryDirectory()
        let arguments = [checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path]
        let run = runExporter(arguments)
        #expect(run.status == 0, "\(run.error)")
        #expect(run.output.hasPrefix("wrote \(output.path)/mini/Mini.aimodel\n"))
        #expect(run.output.contains("lowest SQNR:"))
        let again = runExporter(arguments)
        #expect(again.status == 73)
        #expect(again.error == "Error: '\(output.path)/mini/Mini.aimodel' already exists; pass --overwrite to replace it\n")
        #expect(runExporter(arguments + ["--overwrite"]).status == 0)
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
