import Foundation
import TestSupport
import Testing

@testable import ExporterCLI
@testable import ExporterKit

@Suite("command line: plan and refusals")
struct CommandLineTests {
    private func manifest(_ run: CommandLineRun) throws -> JSONObject {
        try #require(try JSONParser.parse(Array(run.output.utf8)).objectValue)
    }

    @Test("plan --json reports the brief's Qwen2.5-1.5B figures")
    func planQwen25() throws {
        let run = runExporter(["plan", "Qwen2.5-1.5B", "--context", "4096", "--json"])
        #expect(run.status == 0)
        #expect(run.error == "")
        let json = try manifest(run)
        #expect(json["schema"]?.stringValue == "exporter.manifest/1")
        #expect(json["parameters"]?.intValue == 1_543_714_304)
        #expect(json["kv_cache"]?.objectValue?["bytes"]?.intValue == 117_440_512)
        #expect(json["kv_cache"]?.objectValue?["layers"]?.intValue == 28)
        #expect(json["kv_cache"]?.objectValue?["kv_heads"]?.intValue == 2)
        #expect(json["kv_cache"]?.objectValue?["head_dim"]?.intValue == 128)
        #expect(json["kv_cache"]?.objectValue?["dtype"]?.stringValue == "float16")
        #expect(json["model"]?.objectValue?["preset"]?.stringValue == "qwen2.5-1.5b-instruct")
        #expect(json["model"]?.objectValue?["experimental"]?.boolValue == false)
        #expect(json["sizes"]?.objectValue?["estimated_bundle_bytes"]?.intValue == 891_341_952)
    }

    @Test("plan's text rounds an exact half as its --json and the manifest do: away from zero")
    func halfRounding() throws {
        // 8 × 43,776 bytes / 49,152 weights = 7.125 bits per weight exactly.
        let checkpoint = try Fixtures.checkpointDirectory(
            config: Fixtures.tinyConfig(
                modelType: "qwen3",
                overrides: ["hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "vocab_size": 1148]))
        let arguments = [
            "plan", checkpoint.path, "--experimental", "--compute-precision", "float16", "--context", "128",
        ]
        let text = runExporter(arguments)
        #expect(text.status == 0, "\(text.error)")
        #expect(text.output.contains(" kB (42.8 KiB), 7.13 bits per weight\n"), "\(text.output)")
        let json = try #require(
            try JSONParser.parse(Array(runExporter(arguments + ["--json"]).output.utf8)).objectValue)
        #expect(json["sizes"]?.objectValue?["bits_per_weight"]?.doubleValue == 7.13)
        #expect(Format.decimal(4.125) == "4.13" && Format.decimal(-4.125) == "-4.13" && Format.decimal(4.115) == "4.12")
        #expect(Format.decimal(0.25, places: 1) == "0.3" && Format.decimal(.infinity) == "inf")
    }

    @Test("plan Qwen3-4B reports 603,979,776 bytes of KV cache")
    func planQwen3() throws {
        let run = runExporter(["plan", "Qwen/Qwen3-4B", "--json"])
        #expect(run.status == 0)
        #expect(try manifest(run)["kv_cache"]?.objectValue?["bytes"]?.intValue == 603_979_776)
        // The brief's 4B on an iPhone 16: what to add, and what runs slowly, said after the table and in the manifest.
        let entitlement =
            "warning: h17p (iOS): 3536928768 bytes exceed the app memory limit of 3000000000; add the entitlements "
            + "com.apple.developer.kernel.increased-memory-limit, com.apple.developer.kernel.extended-virtual-addressing, "
            + "or the app is killed at load"
        let slow =
            "warning: h17p (iOS): regions 0, 19 of 20 are over the Neural Engine budget of 268435456 bytes; they will "
            + "run on a slower compute unit, and generation can be many times slower"
        let text = runExporter(["plan", "Qwen/Qwen3-4B"]).output
        #expect(text.contains("\n" + entitlement + "\n" + slow + "\n"), "\(text)")
        let table = try #require(text.range(of: "  h14g visionOS"))
        #expect(try #require(text.range(of: entitlement)).lowerBound > table.upperBound)
        let warnings = try manifest(run)["warnings"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(warnings.contains(String(entitlement.dropFirst("warning: ".count))))
        #expect(warnings.contains(String(slow.dropFirst("warning: ".count))))
        #expect(!warnings.contains { $0.hasPrefix("h14g") })
    }

    @Test("--dry-run prints the same plan as 'plan'")
    func dryRun() throws {
        // The memory available now is part of a plan: fixed, so that both runs see the same.
        let memory = ["EXPORTER_TEST_AVAILABLE_MEMORY": "8000000000"]
        let plan = runExporter(["plan", "qwen3-0.6b", "--json"], environment: memory)
        let dryRun = runExporter(["qwen3-0.6b", "--dry-run", "--json"], environment: memory)
        #expect(dryRun.status == 0)
        #expect(dryRun.output == plan.output)
        // Any export command line becomes its plan: the flags that change nothing are taken too.
        let export = [
            "qwen3-0.6b", "--synthetic", "--seed", "3", "--allow-clamp", "--output-dir", "/nonexistent", "--overwrite",
            "--format", "aimodel", "--compile", "--min-deployment-version", "27.0",
        ]
        let planned = runExporter(["plan"] + export + ["--tensors"], environment: memory)
        #expect(planned.status == 0, "\(planned.error)")
        #expect(planned.output.contains("model.layers.27.mlp.down_proj.weight"))
        #expect(runExporter(export + ["--dry-run", "--tensors"], environment: memory).output == planned.output)
        // What the export would refuse before reading a weight, the plan refuses too.
        let missingCalibration = runExporter(
            ["plan", "qwen3-0.6b", "--calibration", "/nonexistent/tokens.txt"], environment: memory)
        #expect(missingCalibration.status == 66)
        let outsideFile = try Fixtures.temporaryDirectory().appendingPathComponent("tokens.txt")
        try Data("1 2 151936".utf8).write(to: outsideFile)
        let outside = runExporter(["plan", "qwen3-0.6b", "--calibration", outsideFile.path], environment: memory)
        #expect(outside.status == 64)
        #expect(
            outside.error.hasPrefix(
                "Error: --calibration expects token ids below the vocabulary size 151936, got '151936'"))
        let file = try Fixtures.temporaryDirectory().appendingPathComponent("a-file")
        try Data("x".utf8).write(to: file)
        let outputIsAFile = runExporter(["plan", "qwen3-0.6b", "--output-dir", file.path], environment: memory)
        #expect(outputIsAFile.status == 74)
        #expect(outputIsAFile.error == "Error: cannot write '\(file.path)': not a directory\n")
        // A folder under a file, or a file where the model's folder goes: the same, from the plan on.
        let under = runExporter(
            ["plan", "qwen3-0.6b", "--output-dir", file.appendingPathComponent("sub").path], environment: memory)
        #expect(under.status == 74)
        #expect(under.error == "Error: cannot write '\(file.path)': not a directory\n")
        let output = try Fixtures.temporaryDirectory()
        try Data("x".utf8).write(to: output.appendingPathComponent("qwen3-0.6b"))
        let modelFolder = runExporter(["plan", "qwen3-0.6b", "--output-dir", output.path], environment: memory)
        #expect(modelFolder.status == 74)
        #expect(modelFolder.error == "Error: cannot write '\(output.path)/qwen3-0.6b': not a directory\n")
        let stray = runExporter(["qwen3-0.6b", "--tensors"])
        #expect(stray.status == 64)
        #expect(stray.error.hasPrefix("Error: --tensors applies to --dry-run\n"))
    }

    @Test("plan refuses a tokenizer file the export cannot read (74), with the export's message")
    func planUnreadableTokenizer() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        // A folder where tokenizer.json should be: there, and not a file to read.
        let tokenizer = checkpoint.appendingPathComponent("tokenizer.json")
        if FileManager.default.fileExists(atPath: tokenizer.path) { try FileManager.default.removeItem(at: tokenizer) }
        try FileManager.default.createDirectory(at: tokenizer, withIntermediateDirectories: false)
        let arguments = [checkpoint.path, "--experimental", "--compute-precision", "float16"]
        let plan = runExporter(["plan"] + arguments)
        let export = runExporter(arguments + ["--output-dir", try Fixtures.temporaryDirectory().path])
        #expect(plan.status == 74 && export.status == 74)
        #expect(plan.error == "Error: cannot read '\(tokenizer.path)': a folder, not a regular file\n")
        #expect(plan.error == export.error)
        #expect(plan.output.isEmpty)
        // Synthetic weights copy no tokenizer.
        #expect(runExporter(["plan"] + arguments + ["--synthetic"]).status == 0)
    }

    @Test("plan refuses a checkpoint the export refuses from its headers, with the same message, and warns alike")
    func planChecksCheckpoint() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let arguments = [checkpoint.path, "--experimental", "--compute-precision", "float16"]
        let output = try Fixtures.temporaryDirectory().path
        #expect(runExporter(["plan"] + arguments).status == 0)
        // An export command line pasted after 'plan' keeps its --dry-run.
        #expect(runExporter(["plan"] + arguments + ["--dry-run"]).status == 0)
        // The last tensor's bytes run past the end of the file.
        let file = checkpoint.appendingPathComponent("model.safetensors")
        let bytes = try Data(contentsOf: file)
        try bytes.dropLast(10).write(to: file)
        let plan = runExporter(["plan"] + arguments)
        let export = runExporter(arguments + ["--output-dir", output])
        #expect(plan.status == 65 && export.status == 65)
        #expect(plan.error.hasPrefix("Error: '\(file.path)': tensor '"))
        #expect(plan.error == export.error)
        #expect(plan.output.isEmpty)
        // Synthetic weights do not read the checkpoint's.
        #expect(runExporter(["plan"] + arguments + ["--synthetic"]).status == 0)
        // A folder holding only its config is planned from it.
        try FileManager.default.removeItem(at: file)
        #expect(runExporter(["plan"] + arguments).status == 0)
        // Tensors the architecture does not use: warned of by the plan as by the export.
        let extra = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig())
        let config = try ModelConfig(contentsOf: extra.appendingPathComponent("config.json"))
        let specs = try ArchitectureRegistry.tensors(for: config, configPath: "config.json")
        try SyntheticCheckpoint.write(
            tensors: specs.map { ($0.name, $0.shape) } + [("extra.scale", [2])], dtype: .bf16, seed: 1, to: extra,
            shardBytes: 1 << 40)
        let warned = runExporter(["plan", extra.path, "--experimental", "--compute-precision", "float16", "--json"])
        #expect(warned.status == 0)
        let warnings = try #require(try manifest(warned)["warnings"]?.arrayValue).compactMap(\.stringValue)
        #expect(
            warnings.contains("checkpoint has 1 tensor(s) the architecture does not use, not exported: extra.scale"))
    }

    @Test("a file an option names that is there but cannot be read exits 74 naming why; one not there, 66")
    func unreadableOptionFiles() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let folder = try Fixtures.temporaryDirectory()
        // A link to itself is there, and no process opens it (root neither), as one without permission.
        let loop = folder.appendingPathComponent("loop.json")
        try FileManager.default.createSymbolicLink(atPath: loop.path, withDestinationPath: "loop.json")
        let expected = "Error: cannot read '\(loop.path)': too many levels of symbolic links\n"
        let plan = ["plan", checkpoint.path, "--experimental", "--compute-precision", "float16"]
        for option in ["--compression-config", "--devices", "--calibration"] {
            let run = runExporter(plan + [option, loop.path])
            #expect(run.status == 74, "\(option): \(run.error)")
            #expect(run.error == expected, "\(option)")
        }
        let farm = runExporter(["batch", loop.path, "--matrix"])
        #expect(farm.status == 74)
        #expect(farm.error == expected)
        let missing = runExporter(plan + ["--compression-config", folder.appendingPathComponent("none.json").path])
        #expect(missing.status == 66)
    }

    @Test("plan gives the memory the export checks before reading a weight: refused a byte below it, run at it")
    func planConversion() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let arguments = [checkpoint.path, "--experimental", "--compute-precision", "float16"]
        let run = runExporter(["plan"] + arguments + ["--json"], environment: ["EXPORTER_TEST_AVAILABLE_MEMORY": "123"])
        let conversion = try #require(try manifest(run)["conversion"]?.objectValue)
        // The fixture stores every tensor as bfloat16, which the plan reads from its headers.
        var conditions = ConversionMemoryConditions()
        conditions.storedPatterns = { _ in .bfloat16 }
        let expected = try Fixtures.plan(checkpoint).conversionMemory(conditions)
        let peak = try #require(conversion["peak_bytes"]?.intValue)
        #expect(peak == expected.totalBytes)
        #expect(conversion["peak_tensor"]?.stringValue == expected.peakTensor)
        #expect(conversion["workers"]?.intValue == SystemResources.activeCores)
        #expect(conversion["storage_from"]?.stringValue == "checkpoint")
        #expect(conversion["available_bytes"]?.intValue == 123)
        #expect(run.status == 71)

        let human = runExporter(["plan"] + arguments, environment: ["EXPORTER_TEST_AVAILABLE_MEMORY": "\(peak - 1)"])
        #expect(
            human.output.contains(
                "  conversion      \(Format.mebibytes(peak)) at peak (est.); \(Format.mebibytes(peak - 1)) available: "
                    + "refused\n                  at \(expected.peakTensor)\n"))
        // The plan refuses as the export does, after showing the figures.
        #expect(human.status == 71)
        let output = try Fixtures.temporaryDirectory().path
        let refused = runExporter(
            arguments + ["--output-dir", output], environment: ["EXPORTER_TEST_AVAILABLE_MEMORY": "\(peak - 1)"])
        #expect(refused.status == 71)
        #expect(!refused.error.isEmpty && human.error == refused.error)
        #expect(
            runExporter(["plan"] + arguments, environment: ["EXPORTER_TEST_AVAILABLE_MEMORY": "\(peak)"]).status == 0)
        // And for disk: the bundle's estimate, or with --compile the compiled artifacts' too.
        for extra in [[], ["--compile"]] {
            let small = ["EXPORTER_TEST_AVAILABLE_DISK": "4096"]
            let plan = runExporter(["plan"] + arguments + ["--output-dir", output] + extra, environment: small)
            let export = runExporter(arguments + ["--output-dir", output] + extra, environment: small)
            #expect(plan.status == 71 && export.status == 71)
            #expect(
                plan.error.contains(" but '\(output)' has 4.0 KiB free; free some space or choose another --output-dir")
            )
            #expect(plan.error == export.error)
        }
        let exported = runExporter(
            arguments + ["--output-dir", output], environment: ["EXPORTER_TEST_AVAILABLE_MEMORY": "\(peak)"])
        #expect(exported.status == 0)
        // A bundle's manifest has no forecast: it would differ from machine to machine.
        let bundle = try Data(
            contentsOf: URL(fileURLWithPath: output).appendingPathComponent("tiny/Tiny.aimodel/manifest.json"))
        #expect(String(decoding: bundle, as: UTF8.self).contains("\n  \"conversion\" : null,\n"))
    }

    @Test("a plan without the weights assumes the config's torch_dtype; --dry-run counts --allow-clamp")
    func planConversionFromConfig() throws {
        let memory = ["EXPORTER_TEST_AVAILABLE_MEMORY": "8000000000"]
        let plan = try ExportPlan.make(options: ExportOptions(model: "Qwen2.5-1.5B"), resolver: try Fixtures.resolver())
        for (extra, allowClamp) in [([String](), false), (["--allow-clamp"], true)] {
            let run = runExporter(["Qwen2.5-1.5B", "--dry-run", "--json"] + extra, environment: memory)
            let conversion = try #require(try manifest(run)["conversion"]?.objectValue)
            let expected = plan.conversionMemory(
                ConversionMemoryConditions(torchDType: "bfloat16", allowClamp: allowClamp, calibrated: false))
            #expect(conversion["peak_bytes"]?.intValue == expected.totalBytes)
            #expect(conversion["peak_tensor"]?.stringValue == expected.peakTensor)
            #expect(conversion["storage_from"]?.stringValue == "torch_dtype")
        }
        let standard = plan.conversionMemory(
            ConversionMemoryConditions(torchDType: "bfloat16", allowClamp: false, calibrated: false))
        let human = runExporter(["plan", "Qwen2.5-1.5B"], environment: memory)
        #expect(
            human.output.contains(
                "  conversion      \(Format.mebibytes(standard.totalBytes)) at peak (est.); 7.5 GiB available\n"
                    + "                  at \(standard.peakTensor) (weights as bfloat16)\n"))
        // On two workers, as ConversionMemoryTests pins: streamed blocks. With clamping, the
        // int8 embedding may hold a value beyond float16 and be converted whole: its float16
        // copy and its int8 values come on top.
        var two = ConversionMemoryConditions(torchDType: "bfloat16", allowClamp: false, calibrated: false)
        two.workers = 2
        #expect(plan.conversionMemory(two).totalBytes == 266_520_064)
        two.allowClamp = true
        #expect(plan.conversionMemory(two).totalBytes == 827_680_768)
        #expect(plan.conversionMemory(two).peakTensor == "model.embed_tokens.weight")
    }

    @Test(
        "torch_dtype auto, the weights' own type: real weights export from their headers; a plan without them reads whole"
    )
    func automaticDType() throws {
        // Before, refused (65) whatever the weights: 'torch_dtype' is 'auto'; expected one of: …
        let checkpoint = try Fixtures.syntheticCheckpoint(overrides: ["torch_dtype": "auto"])
        let experimental = ["--experimental", "--compute-precision", "float16"]
        let export = runExporter(
            [checkpoint.path, "--output-dir", try Fixtures.temporaryDirectory().path, "--json"] + experimental)
        #expect(export.status == 0, "\(export.error)")
        #expect(export.error.isEmpty)
        let withWeights = runExporter(["plan", checkpoint.path, "--json"] + experimental)
        #expect(try manifest(withWeights)["conversion"]?.objectValue?["storage_from"]?.stringValue == "checkpoint")
        let configOnly = try Fixtures.checkpointDirectory(
            config: Fixtures.tinyConfig(overrides: ["torch_dtype": "auto"]))
        let plan = runExporter(["plan", configOnly.path] + experimental)
        #expect(plan.status == 0, "\(plan.error)")
        #expect(plan.output.contains(" (torch_dtype auto: read whole)\n"), "\(plan.output)")
    }

    @Test("a preset-less model type without iOS support is refused whatever the flags")
    func noIOSVariant() throws {
        let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "phi3"))
        for extra in [[], ["--experimental", "--compute-precision", "float16"]] {
            let run = runExporter(["plan", directory.path] + extra)
            #expect(run.status == 69)
            #expect(run.error == "Error: Model 'phi3' does not support iOS variant\n")
        }
        let macOS = runExporter([
            "plan", directory.path, "--platform", "macOS", "--experimental", "--compute-precision", "float16",
        ])
        #expect(macOS.status == 0)
        #expect(macOS.output.contains("phi3"))
    }

    @Test("gemma3 is remapped to gemma3_text before the lookup")
    func remapping() throws {
        let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "gemma3"))
        let run = runExporter(["plan", directory.path])
        #expect(run.error == "Error: Model 'gemma3_text' does not support iOS variant\n")
        // A real Gemma 3 config's gelu, which the graph refuses, does not hide the registry's refusal.
        let real = try Fixtures.checkpointDirectory(
            config: Fixtures.tinyConfig(
                modelType: "gemma3_text", overrides: ["hidden_activation": "gelu_pytorch_tanh", "hidden_act": nil]))
        for extra in [[], ["--experimental", "--compute-precision", "float16"]] {
            let refused = runExporter(["plan", real.path] + extra)
            #expect(refused.status == 69)
            #expect(refused.error == "Error: Model 'gemma3_text' does not support iOS variant\n")
        }
    }

    @Test("gemma3_text does not plan, export or synthesise (exit 69): graph.json cannot describe its computation")
    func gemma3Refused() throws {
        // Before, a config passing the activation and window checks (silu written out, every layer
        // of one type) planned and exported as a Llama-like decoder.
        let message =
            "Error: model type 'gemma3_text' is registered but graph.json cannot describe it: its MLP activated by "
            + "hidden_activation (gelu_pytorch_tanh when absent; hidden_act is not read), a rotary base per layer type "
            + "(rope_local_base_freq), (1 + weight) norms, embeddings scaled by √hidden_size and scores by "
            + "query_pre_attn_scalar\n"
        for modelType in ["gemma3", "gemma3_text"] {
            let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: modelType))
            let output = try Fixtures.temporaryDirectory()
            let macOS = ["--platform", "macOS", "--experimental", "--compute-precision", "float16"]
            for arguments in [
                ["plan", directory.path] + macOS,
                [directory.path, "--synthetic", "--output-dir", output.path] + macOS,
                ["synth", directory.path, "--out", output.appendingPathComponent("weights").path],
            ] {
                let run = runExporter(arguments)
                #expect(run.status == 69, "\(arguments)")
                #expect(run.error == message, "\(arguments)")
            }
        }
    }

    @Test(
        "a multimodal wrapper whose sizes sit under text_config gets its family's registry refusal (69), not a missing key"
    )
    func multimodalWrapper() throws {
        // Real Qwen3-VL and Gemma 3 (4B and up) configs are shaped so: before, both were refused
        // as malformed (65): "config '…' has no 'hidden_size'".
        let gemma3 =
            "Error: model type 'gemma3_text' is registered but graph.json cannot describe it: its MLP activated by "
            + "hidden_activation (gelu_pytorch_tanh when absent; hidden_act is not read), a rotary base per layer type "
            + "(rope_local_base_freq), (1 + weight) norms, embeddings scaled by √hidden_size and scores by "
            + "query_pre_attn_scalar\n"
        let qwen3VL =
            "Error: model type 'qwen3_vl' is registered but its tensor layout is not known to this version; "
            + "see docs/ADDING_AN_ARCHITECTURE.md\n"
        for (modelType, architecture, message) in [
            ("qwen3_vl", "Qwen3VLForConditionalGeneration", qwen3VL),
            ("gemma3", "Gemma3ForConditionalGeneration", gemma3),
        ] {
            let wrapper: [String: Any] = [
                "architectures": [architecture], "model_type": modelType,
                "text_config": Fixtures.tinyConfig(modelType: modelType + "_text"), "vision_config": ["depth": 24],
                "tie_word_embeddings": true,
            ]
            let flat = Fixtures.tinyConfig(modelType: modelType)
            let output = try Fixtures.temporaryDirectory()
            let macOS = ["--platform", "macOS", "--experimental", "--compute-precision", "float16"]
            for config in [wrapper, flat] {
                let directory = try Fixtures.checkpointDirectory(config: config)
                for arguments in [
                    ["plan", directory.path] + macOS,
                    [directory.path, "--synthetic", "--output-dir", output.path] + macOS,
                ] {
                    let run = runExporter(arguments)
                    #expect(run.status == 69, "\(modelType): \(arguments)")
                    #expect(run.error == message, "\(modelType): \(arguments)")
                }
            }
        }
    }

    @Test("the registry of the brief: ten families on macOS, three on iOS; qwen2_5 and gemma3 remapped")
    func registryTable() throws {
        let json = runExporter(["list", "--models", "--json"])
        let object = try #require(try JSONParser.parse(Array(json.output.utf8)).objectValue)
        let rows = (object["families"]?.arrayValue ?? []).compactMap(\.objectValue)
        let types = rows.compactMap { $0["model_type"]?.stringValue }
        #expect(
            types == [
                "gemma3_text", "gpt_oss", "mistral", "mixtral", "muse_glimmer_text", "phi3", "qwen2", "qwen3",
                "qwen3_moe", "qwen3_vl",
            ])
        #expect(rows.allSatisfy { $0["macOS"]?.boolValue == true })
        #expect(
            rows.filter { $0["iOS"]?.boolValue == true }.compactMap { $0["model_type"]?.stringValue } == [
                "mistral", "qwen2", "qwen3",
            ])
        let remapping = try #require(object["model_type_remapping"]?.objectValue)
        #expect(remapping["qwen2_5"]?.stringValue == "qwen2")
        #expect(remapping["gemma3"]?.stringValue == "gemma3_text")
        let experimental = ["--experimental", "--compute-precision", "float16"]
        let macOSOnly = [
            "gemma3", "gemma3_text", "gpt_oss", "mixtral", "muse_glimmer_text", "phi3", "qwen3_moe", "qwen3_vl",
        ]
        for modelType in macOSOnly {
            let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: modelType))
            let run = runExporter(["plan", directory.path] + experimental)
            #expect(run.status == 69, "\(modelType)")
            let family = modelType == "gemma3" ? "gemma3_text" : modelType
            #expect(run.error == "Error: Model '\(family)' does not support iOS variant\n")
        }
        for (modelType, family) in [
            ("mistral", "mistral"), ("qwen2", "qwen2"), ("qwen2_5", "qwen2"), ("qwen3", "qwen3"),
        ] {
            let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: modelType))
            let run = runExporter(["plan", directory.path, "--json"] + experimental)
            #expect(run.status == 0, "\(modelType): \(run.error)")
            let model = try manifest(run)["model"]?.objectValue
            #expect(model?["model_type"]?.stringValue == modelType)
            #expect(model?["registry_type"]?.stringValue == family)
        }
    }

    @Test("an unknown model type lists the registry")
    func unknownModelType() throws {
        let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "llama"))
        let run = runExporter(["plan", directory.path, "--experimental", "--compute-precision", "float16"])
        #expect(run.status == 69)
        #expect(
            run.error
                == "Error: Unknown model type 'llama'. Available: gemma3_text, gpt_oss, mistral, mixtral, "
                + "muse_glimmer_text, phi3, qwen2, qwen3, qwen3_moe, qwen3_vl\n")
    }

    @Test(
        "a name that is neither a preset nor an org/model id; Qwen3-4B-Instruct is no alias of qwen3-4b",
        arguments: ["Qwen2.5-7B", "Qwen3-4B-Instruct"])
    func notAModelName(_ name: String) {
        // Qwen3-4B-Instruct-2507 has no preset (the brief): the short name must not reach Qwen3-4B's.
        let run = runExporter(["plan", name])
        #expect(run.status == 66)
        #expect(
            run.error
                == "Error: '\(name)' is not a registered short-name and doesn't look like a HuggingFace ID "
                + "(expected 'org/model'). Run --list-models to see options.\n")
    }

    @Test(
        "a name found nowhere: the reference tool's words, then the presets it names in part or with a typo",
        arguments: [
            ("qwen3-0.6", "Did you mean 'qwen3-0.6b'?"),
            ("QWN3-0.6B", "Did you mean 'qwen3-0.6b'?"),
            // Two letters short of a name: two typos, still offered.
            ("qen3-0.6", "Did you mean 'qwen3-0.6b'?"),
            ("qwen2.5-1.5b-instrcut", "Did you mean 'qwen2.5-1.5b-instruct'?"),
            ("qwen3", "Did you mean 'qwen3-0.6b' or 'qwen3-4b'?"),
            ("qwen", "Did you mean 'qwen3-0.6b', 'qwen2.5-1.5b-instruct' or 'qwen3-4b'?"),
            // Another number is another model: never offered as a typo.
            ("qwen3-8b", nil), ("qwe", nil),
            (
                "./no-such-checkpoint",
                "There is no folder './no-such-checkpoint' here: if you meant a checkpoint folder, check the path."
            ),
        ])
    func unknownNameHint(_ name: String, hint: String?) {
        let run = runExporter(["plan", name])
        #expect(run.status == 66)
        #expect(
            run.error
                == "Error: '\(name)' is not a registered short-name and doesn't look like a HuggingFace ID "
                + "(expected 'org/model'). Run --list-models to see options.\n" + (hint.map { $0 + "\n" } ?? ""))
    }

    @Test("a path found nowhere, or to a file, says so after the registry's refusal; an id near a preset's names it")
    func unknownPathOrIdHint() throws {
        let folder = try Fixtures.temporaryDirectory()
        let missing = folder.appendingPathComponent("missing").path
        let refusal =
            "is not a registered short-name and doesn't look like a HuggingFace ID (expected 'org/model'). "
            + "Run --list-models to see options."
        let absolute = runExporter(["plan", missing])
        #expect(absolute.status == 66)
        #expect(
            absolute.error
                == "Error: '\(missing)' \(refusal)\nThere is no folder '\(missing)': if you meant a checkpoint folder, "
                + "check the path.\n")
        let config = folder.appendingPathComponent("config.json")
        try Data("{}".utf8).write(to: config)
        let file = runExporter(["plan", config.path])
        #expect(file.status == 66)
        #expect(
            file.error
                == "Error: '\(config.path)' \(refusal)\n'\(config.path)' is a file, not a checkpoint folder: pass the "
                + "folder that holds its config.json.\n")
        let id = runExporter(["plan", "Qwen/Qwen3-0.6"])
        #expect(id.status == 69)
        #expect(
            id.error
                == "Error: 'Qwen/Qwen3-0.6' has no registry preset. Pass --experimental to try exporting it anyway "
                + "(requires --compute-precision).\nSupported models: run 'exporter list' (docs in README.md).\n"
                + "This model may not be suitable for iOS application due to its memory requirements.\n"
                + "Did you mean 'qwen3-0.6b'?\n")
    }

    @Test("a preset without an export for the platform: the reference tool's words, by name or repository id")
    func presetNotAvailable() throws {
        // The shipped presets all have an iOS export: a catalog with a macOS-only one.
        let presets = try Fixtures.temporaryDirectory().appendingPathComponent("Presets")
        try FileManager.default.copyItem(at: Fixtures.presetsDirectory, to: presets)
        let file = presets.appendingPathComponent("presets.json")
        var document = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any])
        var entries = try #require(document["presets"] as? [[String: Any]])
        #expect(entries[0]["id"] as? String == "qwen3-0.6b")
        entries[0]["platforms"] = ["macOS"]
        document["presets"] = entries
        try JSONSerialization.data(withJSONObject: document).write(to: file)
        let environment = ["EXPORTER_PRESETS": presets.path]
        for name in ["qwen3-0.6b", "Qwen/Qwen3-0.6B"] {
            let run = runExporter([name, "--dry-run"], environment: environment)
            #expect(run.status == 69)
            #expect(run.error == "Error: '\(name)' is not available for iOS.\n")
        }
        #expect(runExporter(["qwen3-0.6b", "--platform", "macOS", "--dry-run"], environment: environment).status == 0)
    }

    @Test("EXPORTER_PRESETS, when set, is the one presets folder: a folder without presets.json is refused (66)")
    func namedPresetsFolder() throws {
        let folder = try Fixtures.temporaryDirectory()
        // Relative to the current folder; the tool's own Presets folder is reachable, but not taken.
        let run = runExporter(["list"], environment: ["EXPORTER_PRESETS": "Presets-typo"], currentDirectory: folder)
        #expect(run.status == 66)
        #expect(
            run.error
                == "Error: EXPORTER_PRESETS names '\(folder.path)/Presets-typo', which holds no presets.json; set it to a "
                + "Presets folder, or unset it to use the one found beside exporter\n")
        #expect(run.output.isEmpty)
        try FileManager.default.copyItem(
            at: Fixtures.presetsDirectory, to: folder.appendingPathComponent("Presets-typo"))
        #expect(
            runExporter(["list"], environment: ["EXPORTER_PRESETS": "Presets-typo"], currentDirectory: folder).status
                == 0)
    }

    @Test("a repo id without a preset needs --experimental, with the memory warning on iOS")
    func noPreset() {
        let run = runExporter(["Qwen/Qwen3-4B-Instruct-2507"])
        #expect(run.status == 69)
        #expect(
            run.error
                == "Error: 'Qwen/Qwen3-4B-Instruct-2507' has no registry preset. Pass --experimental to try "
                + "exporting it anyway (requires --compute-precision).\n"
                + "Supported models: run 'exporter list' (docs in README.md).\n"
                + "This model may not be suitable for iOS application due to its memory requirements.\n")
        let macOS = runExporter(["Qwen/Qwen3-4B-Instruct-2507", "--platform", "macOS"])
        #expect(!macOS.error.contains("memory requirements"))
        #expect(macOS.error.hasPrefix("Error: 'Qwen/Qwen3-4B-Instruct-2507' has no registry preset."))
    }

    @Test("a folder name that cannot name an artifact (hidden, control characters) asks for --output-name")
    func unusableFolderName() throws {
        for name in [".hidden-model", "bad\u{1B}[31mname"] {
            let folder = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(), name: name)
            let run = runExporter(["plan", folder.path, "--experimental", "--compute-precision", "float16"])
            #expect(run.status == 64)
            #expect(
                run.error.contains(
                    "cannot name its artifact (control characters, or a leading '.'); pass --output-name\n"))
            #expect(!run.error.contains("\u{1B}"))
            #expect(
                runExporter([
                    "plan", folder.path, "--experimental", "--compute-precision", "float16", "--output-name", "Fine",
                ]).status == 0)
        }
    }

    @Test("--preset on a fine-tune holding less context than the preset's: exported at its own, with a warning")
    func presetContextLowered() throws {
        let folder = try Fixtures.temporaryDirectory().appendingPathComponent("ShortQwen")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let shipped = try Data(
            contentsOf: Fixtures.presetsDirectory.appendingPathComponent("checkpoints/Qwen3-0.6B/config.json"))
        var config = try #require(try JSONSerialization.jsonObject(with: shipped) as? [String: Any])
        config["max_position_embeddings"] = 2048
        try JSONSerialization.data(withJSONObject: config).write(to: folder.appendingPathComponent("config.json"))
        let warning =
            "context: preset 'qwen3-0.6b' asks for 4,096 tokens, beyond the checkpoint's max_position_embeddings "
            + "(2,048): exported at 2,048 tokens"
        let plan = runExporter(["plan", folder.path, "--preset", "qwen3-0.6b"])
        #expect(plan.status == 0, "\(plan.error)")
        #expect(plan.output.contains("2,048 tokens (max 2,048)"))
        #expect(plan.output.contains("\nwarning: \(warning)\n"), "\(plan.output)")
        let json = try JSONParser.parse(
            Array(runExporter(["plan", folder.path, "--preset", "qwen3-0.6b", "--json"]).output.utf8))
        #expect(json.objectValue?["warnings"]?.arrayValue?.compactMap(\.stringValue).contains(warning) == true)
        // Asked for: no warning.
        let asked = runExporter(["plan", folder.path, "--preset", "qwen3-0.6b", "--context", "2048"])
        #expect(asked.status == 0)
        #expect(!asked.output.contains("warning: context"))
        // Holding exactly the preset's context: nothing lowered, nothing said.
        config["max_position_embeddings"] = 4096
        try JSONSerialization.data(withJSONObject: config).write(to: folder.appendingPathComponent("config.json"))
        let equal = runExporter(["plan", folder.path, "--preset", "qwen3-0.6b"])
        #expect(equal.status == 0, "\(equal.error)")
        #expect(equal.output.contains("4,096 tokens (max 4,096)"), "\(equal.output)")
        #expect(!equal.output.contains("warning: context"))
    }

    @Test(
        "the refusal without a preset adds what the user most likely meant: --preset for a preset's shape, a mistyped path"
    )
    func noPresetHints() throws {
        // A local fine-tune of Qwen3-4B: the config of the preset's shape.
        let folder = try Fixtures.temporaryDirectory().appendingPathComponent("MyQwen")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            at: Fixtures.presetsDirectory.appendingPathComponent("checkpoints/Qwen3-4B/config.json"),
            to: folder.appendingPathComponent("config.json"))
        let local = runExporter(["plan", folder.path, "--platform", "macOS"])
        #expect(local.status == 69)
        #expect(
            local.error.hasSuffix(
                "Supported models: run 'exporter list' (docs in README.md).\n"
                    + "Its config has the shape of preset 'qwen3-4b': pass --preset qwen3-4b to export it with that "
                    + "preset's defaults.\n"))
        #expect(runExporter(["plan", folder.path, "--platform", "macOS", "--preset", "qwen3-4b"]).status == 0)
        // 'Tests' is a folder of the repository (the tests' working directory); 'Tests/nothere' is not.
        let mistyped = runExporter(["Tests/nothere"])
        #expect(mistyped.status == 69)
        #expect(
            mistyped.error.hasSuffix(
                "There is no folder 'Tests/nothere' here, though 'Tests' is one: if you meant a checkpoint folder, "
                    + "check the path.\n"))
    }

    @Test("--experimental without --compute-precision")
    func precisionRequired() throws {
        let run = runExporter(["plan", "Qwen/Qwen3-4B-Instruct-2507", "--experimental"])
        #expect(run.status == 64)
        #expect(
            run.error
                == "Error: --compute-precision is required for 'Qwen/Qwen3-4B-Instruct-2507' (no registry preset found).\n"
                + planUsage
        )
        let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "qwen3"))
        let local = runExporter(["plan", directory.path, "--experimental"])
        #expect(
            local.error
                == "Error: --compute-precision is required for '\(directory.path)' (no registry preset found).\n"
                + planUsage)
    }

    @Test("a local checkpoint without a preset is refused unless --experimental")
    func localWithoutPreset() throws {
        let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "mistral"))
        let run = runExporter(["plan", directory.path])
        #expect(run.status == 69)
        #expect(run.error.hasPrefix("Error: '\(directory.path)' has no registry preset. Pass --experimental"))
    }

    @Test("an experimental id absent from the cache says where it looked")
    func notInCache() {
        let run = runExporter(["plan", "Org/Model", "--experimental", "--compute-precision", "float16"])
        #expect(run.status == 66)
        #expect(
            run.error == """
                Error: 'Org/Model' was not found; tried:
                  - a local directory 'Org/Model': none
                  - a preset named 'Org/Model': none (run 'exporter list')
                  - the Hugging Face cache: /nonexistent-hf-home/hub/models--Org--Model is absent

                """)
    }

    @Test("an id whose cache folder holds several snapshots and no refs/main says so, and which folder to pass")
    func ambiguousCache() throws {
        let home = try Fixtures.temporaryDirectory("hf-home")
        let repository = home.appendingPathComponent("hub/models--Org--Tiny")
        for revision in ["rev2", "rev1"] {
            let snapshot = repository.appendingPathComponent("snapshots/\(revision)")
            try FileManager.default.createDirectory(at: snapshot, withIntermediateDirectories: true)
            try JSONSerialization.data(withJSONObject: Fixtures.tinyConfig(), options: [.sortedKeys]).write(
                to: snapshot.appendingPathComponent("config.json"))
        }
        let run = runExporter(
            ["plan", "Org/Tiny", "--experimental", "--compute-precision", "float16"],
            environment: ["HF_HOME": home.path])
        #expect(run.status == 66)
        #expect(
            run.error == """
                Error: 'Org/Tiny' was not found; tried:
                  - a local directory 'Org/Tiny': none
                  - a preset named 'Org/Tiny': none (run 'exporter list')
                  - the Hugging Face cache: \(repository.path) has no refs/main and 2 snapshots (rev1, rev2): pass the \
                folder of the one to export, \(repository.path)/snapshots/<revision>

                """)
    }

    @Test("control characters typed on the command line are escaped in every line of an error, newlines too")
    func escapedArguments() throws {
        // A checkpoint folder's name is the model's: a message of several lines escapes it in its line.
        let checkpoint = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(), name: "Ti\nny\u{1B}[2J")
        let run = runExporter(["plan", checkpoint.path])
        #expect(run.status == 69)
        #expect(
            run.error == """
                Error: '\(checkpoint.deletingLastPathComponent().path)/Ti\\u{A}ny\\u{1B}[2J' has no registry preset. Pass --experimental to try exporting it anyway \
                (requires --compute-precision).
                Supported models: run 'exporter list' (docs in README.md).
                This model may not be suitable for iOS application due to its memory requirements.

                """)
        let usage = runExporter(["plan", "qwen3-4b", "--platform", "\u{1B}[2J\nx"])
        #expect(usage.status == 64)
        #expect(
            usage.error.hasPrefix(
                "Error: invalid value '\\u{1B}[2J\\u{A}x' for '--platform'; expected one of: iOS, macOS\nUsage: "))
        let name = runExporter(["plan", "qwen3-4b", "--output-name", "a\nb\u{1B}"])
        #expect(name.status == 64)
        #expect(
            name.error.hasPrefix(
                "Error: --output-name must not contain control characters, got 'a\\u{A}b\\u{1B}'\nUsage: "))
    }

    @Test("synth without --out and eval without --against are refused as their usage lines (no brackets) say")
    func requiredOptions() {
        let synth = runExporter(["synth", "qwen3-0.6b"])
        #expect(synth.status == 64)
        #expect(
            synth.error == """
                Error: missing '--out <dir>'
                Usage: exporter synth <model> --out <dir> [<options>]
                  See 'exporter synth --help' for more information.

                """)
        let synthHelp = runExporter(["synth", "--help"])
        #expect(synthHelp.output.contains("USAGE: exporter synth <model> --out <dir> [--seed <n>] [--dtype <dtype>]\n"))
        let evalHelp = runExporter(["eval", "--help"])
        #expect(evalHelp.output.contains("USAGE: exporter eval <artifact> --against <checkpoint>"))
    }

    @Test("an empty path, an empty positional, a negative gate, an empty token item, a bad --seed are usage errors")
    func emptyAndNegativeValues() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let bundle = try TinyArtifacts.export(checkpoint, bits: 4, group: 8, name: "Tiny4")
        let export = [checkpoint.path, "--experimental", "--compute-precision", "float16"]
        let cases: [([String], String)] = [
            (export + ["--output-dir", ""], "--output-dir expects a path, got ''"),
            (export + ["--output="], "--output expects a path, got ''"),
            (export + ["--compression-config", ""], "--compression-config expects a path, got ''"),
            (["synth", checkpoint.path, "--out", ""], "--out expects a path, got ''"),
            (["compile", bundle.path, "--output", ""], "--output expects a path, got ''"),
            (["inspect", bundle.path, "--html", ""], "--html expects a path, got ''"),
            (["verify", bundle.path, "--against", ""], "--against expects a path, got ''"),
            ([""], "'<model>' must not be empty"),
            (["inspect", ""], "'<artifact>' must not be empty"),
            (
                ["diff", bundle.path, bundle.path, "--max-size-growth", "-5"],
                "--max-size-growth expects a non-negative number, got '-5'"
            ),
            (
                ["verify", bundle.path, "--against", checkpoint.path, "--run", "--tokens", "1,,2"],
                "--tokens expects non-negative token ids, got ''"
            ),
            (
                ["verify", bundle.path, "--against", checkpoint.path, "--run", "--tokens", "1,2,"],
                "--tokens expects non-negative token ids, got ''"
            ),
            (export + ["--seed", "-1", "--dry-run"], "--seed expects a non-negative integer, got '-1'"),
            (
                export + ["--seed", "x", "--output-dir", try Fixtures.temporaryDirectory().path],
                "--seed expects a non-negative integer, got 'x'"
            ),
        ]
        for (arguments, message) in cases {
            let run = runExporter(arguments)
            #expect(run.status == 64, "\(arguments): \(run.error)")
            #expect(run.error.hasPrefix("Error: \(message)\nUsage: "), "\(arguments): \(run.error)")
        }
        // Brackets, commas and white space still separate ids.
        for tokens in ["[1, 2, 3]", "1 2  3", "1,2"] {
            let run = runExporter(["verify", bundle.path, "--against", checkpoint.path, "--run", "--tokens", tokens])
            #expect(run.status == 0, "\(tokens): \(run.error)")
        }
        let one = runExporter(["verify", bundle.path, "--against", checkpoint.path, "--run", "--tokens", "5"])
        #expect(one.output.contains("  forward pass  1 token: top-1 agreement 100.0% (1/1)\n"), "\(one.output)")
        #expect(runExporter(export + ["--seed", "7", "--synthetic", "--dry-run"]).status == 0)
    }

    @Test("a context above max_position_embeddings, or not a positive integer")
    func contextRefusals() {
        let tooLong = runExporter(["plan", "qwen2.5-1.5b", "--max-context-length", "40000"])
        #expect(tooLong.status == 64)
        #expect(
            tooLong.error == "Error: --max-context-length (40000) exceeds the model's max_position_embeddings (32768)\n"
                + planUsage
        )
        for bad in ["0", "-5", "abc", "4k"] {
            let run = runExporter(["plan", "qwen2.5-1.5b", "--max-context-length", bad])
            #expect(run.status == 64)
            #expect(
                run.error.hasPrefix("Error: --max-context-length expects a positive integer, got '\(bad)'\nUsage: "))
        }
    }

    @Test("--compression and --compression-config are exclusive; unknown names list the shipped ones")
    func compressionRefusals() {
        let both = runExporter(["plan", "qwen3-4b", "--compression", "none", "--compression-config", "x.json"])
        #expect(both.status == 64)
        #expect(both.error.hasPrefix("Error: --compression and --compression-config cannot be used together\n"))
        let unknown = runExporter(["plan", "qwen3-4b", "--compression", "3bit"])
        #expect(unknown.status == 64)
        #expect(
            unknown.error
                == "Error: unknown compression config '3bit'; available: 4bit_quality, 4bit_weight_palettized_group32, "
                + "4bit_weight_palettized_group8, qwen3-0.6b_mixed_4bit_8bit, qwen3-4b_mixed_4bit_8bit, none\n"
                + planUsage)
    }

    @Test("a hidden file among the shipped compression configs is none of them (a farm's digest leaves it out)")
    func hiddenCompressionConfig() throws {
        let presets = try Fixtures.temporaryDirectory().appendingPathComponent("Presets")
        try FileManager.default.copyItem(at: Fixtures.presetsDirectory, to: presets)
        try FileManager.default.copyItem(
            at: presets.appendingPathComponent("compression/4bit_weight_palettized_group8.json"),
            to: presets.appendingPathComponent("compression/.hid.json"))
        let catalog = try PresetCatalog(directory: presets)
        #expect(!catalog.compressionConfigNames().contains(".hid"))
        #expect(catalog.compressionConfigNames().contains("4bit_weight_palettized_group8"))
        #expect(throws: CompressionConfigError.self) { try catalog.compressionConfig(named: ".hid") }
    }

    @Test("a compression config's name is one text in any Unicode form: either opens it; two forms are refused (65)")
    func compressionConfigUnicodeForms() throws {
        let presets = try Fixtures.temporaryDirectory().appendingPathComponent("Presets")
        try FileManager.default.copyItem(at: Fixtures.presetsDirectory, to: presets)
        let compression = presets.appendingPathComponent("compression")
        let (composed, decomposed) = ("caf\u{E9}", "cafe\u{301}")
        try copyConfig("4bit_weight_palettized_group8", in: compression, as: composed)
        let group8 = try PresetCatalog(directory: presets).compressionConfig(named: "4bit_weight_palettized_group8")
        // The spelling the file does not have opens it, as on a Mac.
        for spelling in [decomposed, composed] {
            let config = try PresetCatalog(directory: presets).compressionConfig(named: spelling)
            #expect(config.name.utf8.elementsEqual(composed.utf8))
            #expect(config.rules == group8.rules && config.defaultScheme == group8.defaultScheme)
        }
        try copyConfig("4bit_weight_palettized_group32", in: compression, as: decomposed)
        let catalog = try PresetCatalog(directory: presets)
        for name in [composed, decomposed] {
            #expect(
                throws: CompressionConfigError.invalid(
                    path: compression.path,
                    reason: "'cafe\\u{301}.json' and 'caf\\u{E9}.json' are one name in two Unicode forms, which this "
                        + "tool (and a Mac's file system) takes as one config; rename or remove one")
            ) { try catalog.compressionConfig(named: name) }
        }
        let plan = runExporter(
            ["plan", "qwen3-0.6b", "--compression", decomposed], environment: ["EXPORTER_PRESETS": presets.path])
        #expect(plan.status == 65)
        #expect(
            plan.error
                == "Error: compression config '\(compression.path)': 'cafe\\u{301}.json' and 'caf\\u{E9}.json' are one "
                + "name in two Unicode forms, which this tool (and a Mac's file system) takes as one config; rename or "
                + "remove one\n")
    }

    @Test(
        "shipped compression configs one name on a Mac by case, or whose 'name' is not their file's, are refused (65)")
    func compressionConfigCaseAndNameField() throws {
        let presets = try Fixtures.temporaryDirectory().appendingPathComponent("Presets")
        try FileManager.default.copyItem(at: Fixtures.presetsDirectory, to: presets)
        let compression = presets.appendingPathComponent("compression")
        try copyConfig("4bit_weight_palettized_group8", in: compression, as: "Tiny")
        #expect(try PresetCatalog(directory: presets).compressionConfig(named: "Tiny").name == "Tiny")
        // Case counts on Linux: no config is called 'tiny' yet.
        #expect(
            throws: CompressionConfigError.unknownName(
                "tiny",
                available: try PresetCatalog(directory: presets)
                    .compressionConfigNames())
        ) { try PresetCatalog(directory: presets).compressionConfig(named: "tiny") }
        try copyConfig("4bit_weight_palettized_group32", in: compression, as: "TINY")
        for name in ["Tiny", "TINY"] {
            #expect(
                throws: CompressionConfigError.invalid(
                    path: compression.path,
                    reason: "'TINY.json' and 'Tiny.json' are one name on a Mac's file system, which ignores case; "
                        + "rename or remove one")
            ) { try PresetCatalog(directory: presets).compressionConfig(named: name) }
        }
        // A file whose 'name' is another config's: the manifest would record that name for its rules.
        try FileManager.default.removeItem(at: compression.appendingPathComponent("TINY.json"))
        let renamed = compression.appendingPathComponent("renamed.json")
        try FileManager.default.copyItem(
            at: compression.appendingPathComponent("4bit_weight_palettized_group32.json"), to: renamed)
        let plan = runExporter(
            ["plan", "qwen3-0.6b", "--compression", "renamed"], environment: ["EXPORTER_PRESETS": presets.path])
        #expect(plan.status == 65)
        #expect(
            plan.error
                == "Error: compression config '\(renamed.path)': its 'name' is '4bit_weight_palettized_group32', not "
                + "its file's name 'renamed': a manifest would record '4bit_weight_palettized_group32' for the rules "
                + "of this file; make them one\n")
    }

    /// Copies the shipped compression config `name` in `folder` to `<newName>.json`, its `name` made `newName`.
    private func copyConfig(_ name: String, in folder: URL, as newName: String) throws {
        let text = try String(contentsOf: folder.appendingPathComponent(name + ".json"), encoding: .utf8)
        let renamed = text.replacingOccurrences(of: "\"name\": \"\(name)\"", with: "\"name\": \"\(newName)\"")
        #expect(renamed != text)
        try renamed.write(to: folder.appendingPathComponent(newName + ".json"), atomically: false, encoding: .utf8)
    }

    /// What follows a usage error of `exporter plan`.
    let planUsage = "Usage: exporter plan <model> [<options>]\n  See 'exporter plan --help' for more information.\n"

    @Test("every shipped checkpoint: --max-context-length up to max_position_embeddings, never beyond; its KV cache")
    func contextBoundsOfShippedCheckpoints() throws {
        let checkpoints = Fixtures.presetsDirectory.appendingPathComponent("checkpoints")
        // (folder, max_position_embeddings, layers × kv_heads × head_dim, KV bytes at 4,096 tokens)
        let shipped = [
            ("Qwen2.5-1.5B-Instruct", 32_768, 28 * 2 * 128, 117_440_512),  // 112 MiB
            ("Qwen3-0.6B", 40_960, 28 * 8 * 128, 469_762_048),  // 448 MiB
            ("Qwen3-4B", 40_960, 36 * 8 * 128, 603_979_776),  // 576 MiB
            ("Mistral-7B-Instruct-v0.3", 32_768, 32 * 8 * 128, 536_870_912),  // 512 MiB
        ]
        for (folder, maximum, perToken, atDefault) in shipped {
            let base = [
                "plan", checkpoints.appendingPathComponent(folder).path, "--experimental", "--compute-precision",
                "float16", "--json",
            ]
            for context in [4_096, 1_000, maximum] {
                let run = runExporter(base + ["--max-context-length=\(context)"])
                #expect(run.status == 0, "\(folder) \(context): \(run.error)")
                let kvCache = try manifest(run)["kv_cache"]?.objectValue
                #expect(kvCache?["bytes"]?.intValue == 2 * perToken * context * 2, "\(folder) \(context)")
                #expect(kvCache?["context_length"]?.intValue == context)
            }
            let atDefaultRun = runExporter(base)
            #expect(try manifest(atDefaultRun)["kv_cache"]?.objectValue?["bytes"]?.intValue == atDefault, "\(folder)")
            let beyond = runExporter(base + ["--max-context-length", "\(maximum + 1)"])
            #expect(beyond.status == 64)
            #expect(
                beyond.error
                    == "Error: --max-context-length (\(maximum + 1)) exceeds the model's max_position_embeddings "
                    + "(\(maximum))\n" + planUsage)
        }
    }

    @Test("a plan refuses the --min-deployment-version its export refuses")
    func planDeploymentVersion() throws {
        let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig())
        let export = [directory.path, "--experimental", "--compute-precision", "float16", "--compile"]
        for (version, message) in [
            ("26.0", "--min-deployment-version 26.0 is below 27.0, the first version that loads compiled artifacts"),
            ("abc", "--min-deployment-version expects a version such as 27.0, got 'abc'"),
        ] {
            for arguments in [["plan"] + export, export + ["--dry-run"]] {
                let run = runExporter(arguments + ["--min-deployment-version", version])
                #expect(run.status == 64, "\(arguments)")
                #expect(run.error.hasPrefix("Error: \(message)\nUsage: exporter"), "\(run.error)")
            }
        }
        #expect(runExporter(["plan"] + export + ["--min-deployment-version", "28.0"]).status == 0)
    }

    @Test("the plan says how the iOS embedding is stored")
    func embeddingNote() {
        let int8 = runExporter(["plan", "qwen2.5-1.5b-instruct"])
        #expect(int8.output.contains("\n  compression     4bit_weight_palettized_group8, embedding int8 per tensor\n"))
        let kept = runExporter(["plan", "qwen2.5-1.5b-instruct", "--disable-embedding-quantization-ios"])
        #expect(kept.output.contains("\n  compression     4bit_weight_palettized_group8, embedding kept in float16\n"))
        #expect(kept.output.contains("\n  embedding        1    233,373,696  466.7 MB   16.00  fp16\n"))
        let macOS = runExporter(["plan", "qwen2.5-1.5b-instruct", "--platform", "macOS"])
        #expect(macOS.output.contains("\n  compression     4bit_weight_palettized_group8\n"))
        let notIOS = runExporter([
            "plan", "qwen2.5-1.5b-instruct", "--platform", "macOS", "--disable-embedding-quantization-ios",
        ])
        #expect(notIOS.status == 64)
        #expect(
            notIOS.error
                == "Error: --disable-embedding-quantization-ios applies to --platform iOS; the platform is macOS\n"
                + planUsage)
    }

    @Test("a reference-tool YAML recipe given to --compression-config is named as such")
    func referenceRecipe() throws {
        let file = try Fixtures.temporaryDirectory().appendingPathComponent("qwen3_4b_mixed_4bit_8bit.yaml")
        try Data(
            """
            kmeans_palettization_config:
              global_config:
                op_state_spec:
                  weight:
                    n_bits: 4

            """.utf8
        ).write(to: file)
        let run = runExporter(["qwen3-4b", "--compression-config", file.path, "--dry-run"])
        #expect(run.status == 65)
        #expect(
            run.error
                == "Error: compression config '\(file.path)': a coreai-opt YAML recipe of the reference tool, which "
                + "this tool does not read; write the same rules as an exporter.compression/1 JSON file "
                + "(docs/FORMAT.md, \"Compression configs\"; the shipped ones: 'exporter list')\n")
    }

    @Test("a usage error prints the message, the usage line and where help is")
    func usageError() {
        let run = runExporter(["plan", "qwen3-4b", "--platform", "android"])
        #expect(run.status == 64)
        #expect(
            run.error.hasPrefix(
                "Error: invalid value 'android' for '--platform'; expected one of: iOS, macOS\nUsage: exporter plan"))
        #expect(run.error.hasSuffix("  See 'exporter plan --help' for more information.\n"))
    }

    @Test("a broken config names the file and the field")
    func brokenConfig() throws {
        let directory = try Fixtures.checkpointDirectory(
            config: Fixtures.tinyConfig(overrides: ["num_hidden_layers": "28"]))
        let run = runExporter(["plan", directory.path, "--experimental", "--compute-precision", "float16"])
        #expect(run.status == 65)
        #expect(
            run.error
                == "Error: config '\(directory.path)/config.json': 'num_hidden_layers' should be an integer, found a string\n"
        )
    }

    @Test("list and --list-models in text and JSON")
    func list() throws {
        let text = runExporter(["list"])
        #expect(text.status == 0)
        #expect(text.output.contains("qwen2.5-1.5b-instruct"))
        #expect(text.output.contains("muse_glimmer_text"))
        let json = runExporter(["--list-models", "--json"])
        let object = try #require(try JSONParser.parse(Array(json.output.utf8)).objectValue)
        #expect(object["families"]?.arrayValue?.count == 10)
        #expect(object["presets"]?.arrayValue?.count == 3)
        let presets = runExporter(["--list-presets"])
        #expect(presets.output.hasPrefix("Presets"))
        #expect(!presets.output.contains("Model families"))
        #expect(!presets.output.contains("Device architectures"))
        // Listing exports nothing: a model or an export option with it is a usage error, not a silent no-op.
        let withModel = runExporter(["qwen3-0.6b", "--list-models"])
        #expect(withModel.status == 64)
        #expect(withModel.error.hasPrefix("Error: --list-models and --list-presets take no model, got 'qwen3-0.6b'\n"))
        let withOption = runExporter(["--list-presets", "--synthetic", "--json"])
        #expect(withOption.status == 64)
        #expect(
            withOption.error.hasPrefix(
                "Error: --synthetic does not apply to --list-models and --list-presets, which export nothing\n"))
        #expect(withModel.output.isEmpty && withOption.output.isEmpty)
    }

    @Test("--list-presets, as the reference tool's, lists the compression presets --compression takes")
    func listPresets() throws {
        let text = runExporter(["--list-presets"])
        #expect(text.status == 0)
        #expect(
            text.output.contains(
                "\nCompression configs (--compression NAME, or none; without a preset: "
                    + "4bit_weight_palettized_group32):\n"))
        for name in [
            "4bit_quality", "4bit_weight_palettized_group32", "4bit_weight_palettized_group8",
            "qwen3-0.6b_mixed_4bit_8bit", "qwen3-4b_mixed_4bit_8bit",
        ] {
            #expect(text.output.contains("\n  \(name) "), "\(name)")
        }
        #expect(runExporter(["list", "--presets"]).output == text.output)
        let json = runExporter(["--list-presets", "--json"])
        let object = try #require(try JSONParser.parse(Array(json.output.utf8)).objectValue)
        #expect(object["presets"]?.arrayValue?.count == 3)
        #expect(object["compression_configs"]?.arrayValue?.count == 5)
        #expect(object["default_compression"]?.stringValue == "4bit_weight_palettized_group32")
        #expect(object["families"] == nil)
    }

    @Test("every command answers --version with the tool's version")
    func version() {
        for command in [
            "", "plan", "list", "synth", "compile", "batch", "inspect", "verify", "diff", "convert", "eval",
        ] {
            let run = runExporter((command.isEmpty ? [] : [command]) + ["--version"])
            #expect(run.status == 0, "\(command)")
            #expect(run.output == ToolVersion.current + "\n", "\(command)")
            #expect(run.error == "", "\(command)")
        }
    }

    @Test("the command specifications are consistent")
    func specifications() {
        #expect(ExportCommand.spec.specificationProblems() == [])
        for command in [ExportCommand.spec] + ExportCommand.spec.subcommands {
            #expect(!command.abstract.isEmpty && !command.discussion.isEmpty, "\(command.name)")
        }
    }
}

@Suite("command line: list devices")
struct ListDevicesTests {
    @Test("list shows the device table with its estimates marked, in text and JSON")
    func devices() throws {
        let text = runExporter(["list", "--devices"])
        #expect(text.status == 0)
        #expect(
            text.output.contains("  h17p   iOS       A18         yes  8.0 GiB   2.8 GiB*   5.6 GiB*   256.0 MiB*\n"))
        let json = runExporter(["list", "--json"])
        let object = try #require(try JSONParser.parse(Array(json.output.utf8)).objectValue)
        let ids = object["devices"]?.arrayValue?.compactMap { $0.objectValue?["id"]?.stringValue } ?? []
        #expect(ids.contains("h17p"))
        #expect(object["presets"]?.arrayValue?.count == 3)
        // `estimates` names keys of the object it is in.
        let devices = object["devices"]?.arrayValue?.compactMap(\.objectValue) ?? []
        for device in devices {
            for estimate in device["estimates"]?.arrayValue?.compactMap(\.stringValue) ?? [] {
                #expect(device[estimate] != nil, "\(device["id"]?.stringValue ?? ""): \(estimate)")
            }
        }
        let h17p = try #require(devices.first { $0["id"]?.stringValue == "h17p" })
        #expect(
            h17p["estimates"]?.arrayValue?.compactMap(\.stringValue) == [
                "app_memory_limit_bytes", "increased_memory_limit_bytes", "region_budget_bytes",
            ])
        #expect(h17p["region_budget_bytes"]?.intValue == 268_435_456)
        #expect(h17p["page_size"]?.intValue == 16384)
    }

    @Test("list --device-table shows the table as a --devices file extends it: new entries, replaced numbers")
    func extendedTable() throws {
        let folder = try Fixtures.temporaryDirectory()
        func entry(_ id: String, limit: Int) -> String {
            #"{"id": "\#(id)", "platform": "iOS", "chip": "Lab chip", "products": ["Lab phone"], "#
                + #""ahead_of_time": true, "ram_bytes": 8589934592, "app_memory_limit_bytes": \#(limit), "#
                + #""increased_memory_limit_bytes": 6000000000, "entitlements": ["e"], "#
                + #""ane_region_budget_bytes": 268435456, "page_size": 16384}"#
        }
        try Data(
            (#"{"schema": "exporter.devices/1", "devices": ["# + entry("lab1", limit: 2_000_000_000) + ", "
                + entry("H17P", limit: 4_000_000_000) + "]}").utf8
        ).write(to: folder.appendingPathComponent("lab.json"))
        let text = runExporter(["list", "--device-table", "lab.json"], currentDirectory: folder)
        #expect(text.status == 0, "\(text.error)")
        #expect(
            text.output.hasPrefix(
                "Device architectures (Presets/devices.json extended by 'lab.json'; * = estimate, docs/DEVICES.md):\n"))
        // The replaced entry keeps the shipped id, with the file's chip and numbers, no longer estimates.
        #expect(text.output.contains("  h17p   iOS       Lab chip    yes  8.0 GiB   3.7 GiB    5.6 GiB    256.0 MiB\n"))
        #expect(text.output.contains("  lab1   iOS       Lab chip    yes  8.0 GiB   1.9 GiB    5.6 GiB    256.0 MiB\n"))
        #expect(!text.output.contains("Presets ("))
        let json = runExporter(["list", "--json", "--device-table", "lab.json"], currentDirectory: folder)
        let object = try #require(try JSONParser.parse(Array(json.output.utf8)).objectValue)
        #expect(object.keys == ["devices"])
        let devices = object["devices"]?.arrayValue?.compactMap(\.objectValue) ?? []
        let h17p = try #require(devices.first { $0["id"]?.stringValue == "h17p" })
        #expect(h17p["app_memory_limit_bytes"]?.intValue == 4_000_000_000)
        #expect(h17p["estimates"]?.arrayValue == [])
        #expect(devices.contains { $0["id"]?.stringValue == "lab1" })
        let shipped = try JSONParser.parse(Array(runExporter(["list", "--devices", "--json"]).output.utf8))
        #expect(devices.count == (shipped.objectValue?["devices"]?.arrayValue?.count ?? 0) + 1)
        // With another section, both are shown; a table that is not one is refused as compile refuses it.
        let both = runExporter(["list", "--models", "--device-table", "lab.json"], currentDirectory: folder)
        #expect(both.output.hasPrefix("Model families") && both.output.contains("  lab1 "))
        let missing = runExporter(["list", "--device-table", "nope.json"], currentDirectory: folder)
        #expect(missing.status == 66)
        #expect(missing.error.contains("'\(folder.appendingPathComponent("nope.json").path)'"))
        #expect(missing.output.isEmpty)
    }
}
