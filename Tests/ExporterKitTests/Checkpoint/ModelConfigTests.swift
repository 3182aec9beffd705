import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("Checkpoint: config.json fields")
struct ModelConfigTests {
    /// The tiny config with `overrides`, parsed.
    private func config(_ overrides: [String: Any?]) throws -> ModelConfig {
        let object = Fixtures.tinyConfig(overrides: overrides)
        let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        return try ModelConfig(bytes: [UInt8](data), path: "config.json")
    }

    @Test("a usable rope_scaling reaches graph.json; absent or null it is null")
    func ropeScaling() throws {
        let directory = try Fixtures.syntheticCheckpoint(overrides: ["rope_scaling": ["type": "linear", "factor": 2]])
        let graph = GraphDescription(plan: try Fixtures.plan(directory))
        #expect(graph.rope.scalingType == "linear")
        #expect(graph.rope.scalingFactor == 2)
        #expect(try config(["rope_scaling": ["rope_type": "default"]]).ropeScaling.objectValue != nil)
        // A default type is no scaling in the graph, its factor dropped: no runtime may apply it.
        let unscaled = try Fixtures.syntheticCheckpoint(
            overrides: ["rope_scaling": ["rope_type": "default", "factor": 5]])
        let plain = GraphDescription(plan: try Fixtures.plan(unscaled))
        #expect(plain.rope.scalingType == nil && plain.rope.scalingFactor == nil)
        #expect(try config(["rope_scaling": NSNull()]).ropeScaling == .null)
        #expect(try config([:]).ropeScaling == .null)
    }

    @Test("architectures of another family than model_type: a warning; the shipped configs and aliases give none")
    func architectureMismatch() throws {
        for name in ["Mistral-7B-Instruct-v0.3", "Qwen2.5-1.5B-Instruct", "Qwen3-0.6B", "Qwen3-4B"] {
            let url = Fixtures.presetsDirectory.appendingPathComponent("checkpoints/\(name)/config.json")
            #expect(try ModelConfig(contentsOf: url).architectureMismatch == nil, "\(name)")
        }
        for (type, architectures) in [
            ("gemma3_text", #"["Gemma3ForCausalLM"]"#), ("qwen2_5", #"["Qwen2ForCausalLM"]"#),
            ("qwen3_moe", #"["Qwen3MoeForCausalLM"]"#), ("gpt_oss", #"["GptOssForCausalLM"]"#),
            ("qwen3", #"["Qwen3ForCausalLM", "MistralForCausalLM"]"#), ("qwen3", "[]"),
            ("qwen3", #"["Qwen3ForSequenceClassification", "Qwen3ForCausalLM"]"#),
            // A class of no registered family: a custom one, not an edit.
            ("qwen3", #"["TinyForCausalLM"]"#), ("qwen3_moe", #"["Qwen3MoeForCausalLM"]"#),
        ] {
            #expect(
                try config(json: #""architectures": \#(architectures)"#, modelType: type).architectureMismatch == nil)
        }
        #expect(
            try config(json: #""architectures": ["Qwen3ForCausalLM"]"#, modelType: "qwen3_moe").architectureMismatch
                == "config: architectures names 'Qwen3ForCausalLM', of another family than model_type 'qwen3_moe': "
                + "read as qwen3_moe, as transformers reads it")
        let edited = try config(json: #""architectures": ["MistralForCausalLM"]"#, modelType: "qwen3")
        #expect(
            edited.architectureMismatch
                == "config: architectures names 'MistralForCausalLM', of another family than model_type 'qwen3': "
                + "read as qwen3, as transformers reads it")
        let plan = try Fixtures.plan(
            try Fixtures.syntheticCheckpoint(modelType: "qwen3", overrides: ["architectures": ["MistralForCausalLM"]]))
        #expect(plan.warnings.first == edited.architectureMismatch)
    }

    @Test("the architecture warning: a class beginning several types is of none, the longest type it begins is its own")
    func architectureMismatchFamilies() throws {
        // "Qwen" begins qwen2, qwen3, qwen3_moe and qwen3_vl: of no one family, it says nothing.
        #expect(
            try config(json: #""architectures": ["QwenForCausalLM"]"#, modelType: "mistral").architectureMismatch == nil
        )
        // "Qwen3MoeX" begins with qwen3 and qwen3_moe: the longer, qwen3_moe, is its family.
        let moe = #""architectures": ["Qwen3MoeXForCausalLM"]"#
        #expect(try config(json: moe, modelType: "qwen3_moe").architectureMismatch == nil)
        #expect(
            try config(json: moe, modelType: "qwen3").architectureMismatch
                == "config: architectures names 'Qwen3MoeXForCausalLM', of another family than model_type 'qwen3': "
                + "read as qwen3, as transformers reads it")
        // A custom class beside another family's: not only other families' classes, so nothing is said.
        #expect(
            try config(json: #""architectures": ["MistralForCausalLM", "TinyForCausalLM"]"#, modelType: "qwen3")
                .architectureMismatch == nil)
    }

    /// The tiny config's required keys and its two KV heads, of `modelType`, plus `extra` (JSON
    /// text of more keys), parsed.
    private func config(json extra: String, modelType: String = "qwen2") throws -> ModelConfig {
        try ModelConfig(bytes: Array(configText(extra, modelType: modelType).utf8), path: "config.json")
    }

    /// The text ``config(json:modelType:)`` parses.
    private func configText(_ extra: String, modelType: String = "qwen2") -> String {
        #"{"model_type": ""# + modelType + #"", "hidden_size": 64, "intermediate_size": 128, "#
            + #""num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "#
            + #""max_position_embeddings": 512"# + (extra.isEmpty ? "" : ", " + extra) + "}"
    }

    @Test(
        "a rope_scaling factor that is not a positive number, or a rope_scaling of the wrong type, is refused by key",
        arguments: [
            (#"{"type": "linear", "factor": -2}"#, "'rope_scaling.factor' must be a positive number, found -2"),
            (#"{"type": "linear", "factor": 0}"#, "'rope_scaling.factor' must be a positive number, found 0"),
            (#"{"type": "linear", "factor": -0.0}"#, "'rope_scaling.factor' must be a positive number, found -0.0"),
            (
                #"{"type": "linear", "factor": 1e999}"#,
                "'rope_scaling.factor' is too large: beyond a double (about 1.8e308)"
            ),
            (#"{"type": "linear", "factor": "2"}"#, "'rope_scaling.factor' should be a number, found a string"),
            (#"{"type": 3, "factor": 2}"#, "'rope_scaling.type' should be a string, found a number"),
            (#"{"rope_type": ["linear"]}"#, "'rope_scaling.rope_type' should be a string, found an array"),
            (#""linear""#, "'rope_scaling' should be an object, found a string"),
            ("2", "'rope_scaling' should be an object, found a number"),
        ])
    func badRopeScaling(_ value: String, _ message: String) throws {
        let error = #expect(throws: ConfigError.self) { try config(json: #""rope_scaling": "# + value) }
        #expect(error?.description == "config 'config.json': " + message)
        #expect(error?.exitStatus == .badInput)
    }

    @Test(
        "a scaling that names no type, or a linear one without a factor, is refused (exit 65), for every family",
        arguments: [
            // transformers 4 looks the type up and fails on None: before, these exported as no
            // scaling, the factor dropped without a word.
            (
                #""rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768}"#,
                "'rope_scaling' names no rope_type or type (its factor is 4.0), so which scaling it means is unknown"
            ),
            (
                #""rope_scaling": {"type": null, "factor": 2}"#,
                "'rope_scaling' names no rope_type or type (its factor is 2), so which scaling it means is unknown"
            ),
            (#""rope_scaling": {}"#, "'rope_scaling' names no rope_type or type, so which scaling it means is unknown"),
            // transformers 5 reads rope_parameters without a type as default: a factor there says
            // a scaling was meant, and a type written null fails there too.
            (
                #""rope_parameters": {"rope_theta": 1e6, "factor": 4}"#,
                "'rope_parameters' names no rope_type or type (its factor is 4), so which scaling it means is unknown"
            ),
            (
                #""rope_parameters": {"rope_type": null, "rope_theta": 1e6}"#,
                "'rope_parameters' names no rope_type or type, so which scaling it means is unknown"
            ),
            (
                #""rope_parameters": {"full_attention": {"factor": 2}, "sliding_attention": {"factor": 2}}"#,
                "'rope_parameters.full_attention' names no rope_type or type (its factor is 2), so which scaling it "
                    + "means is unknown"
            ),
            // transformers requires linear's factor; before, graph.json got a null one.
            (
                #""rope_scaling": {"type": "linear"}"#,
                "'rope_scaling.factor' is absent; linear scaling divides positions by it"
            ),
            (
                #""rope_scaling": {"rope_type": "linear", "factor": null}"#,
                "'rope_scaling.factor' is null; linear scaling divides positions by it"
            ),
            (
                #""rope_parameters": {"rope_type": "linear", "rope_theta": 1e6}"#,
                "'rope_parameters.factor' is absent; linear scaling divides positions by it"
            ),
        ])
    func scalingWithoutTypeOrFactor(_ extra: String, _ message: String) throws {
        for family in ["qwen2", "qwen3", "mistral", "gemma3_text", "unknown_family"] {
            let error = #expect(throws: ConfigError.self) { try config(json: extra, modelType: family) }
            #expect(error?.description == "config 'config.json': " + message, "\(family)")
            #expect(error?.exitStatus == .badInput, "\(family)")
        }
        // Without a factor, rope_parameters that name no type are transformers 5's default.
        #expect(try config(json: #""rope_parameters": {"rope_theta": 1e6, "factor": null}"#).ropeScaling == .null)
    }

    @Test(
        "an rms_norm_eps of zero, below zero or beyond a double is refused",
        arguments: [
            ("0", "must be a positive number"), ("-1e-6", "must be a positive number"),
            // Before, "must be a positive number": it is one, too large to hold.
            ("1e999", "is too large: beyond a double (about 1.8e308)"),
        ])
    func badEpsilon(_ value: String, _ reason: String) throws {
        let error = #expect(throws: ConfigError.self) { try config(json: #""rms_norm_eps": "# + value) }
        #expect(error?.description == "config 'config.json': 'rms_norm_eps' " + reason)
        #expect(error?.exitStatus == .badInput)
    }

    @Test(
        "a number too large to hold is said to be so, not to be no integer or no positive number (exit 65)",
        arguments: [
            // Before: "must be an integer, found 99999999999999999999999".
            (
                #""num_hidden_layers": 99999999999999999999999"#,
                "'num_hidden_layers' is absurdly large (99999999999999999999999 > 1073741824)"
            ),
            (#""hidden_size": 1e16"#, "'hidden_size' is absurdly large (1e16 > 1073741824)"),
            (#""vocab_size": 1e400"#, "'vocab_size' is absurdly large (1e400 > 1073741824)"),
            (
                #""vocab_size": -99999999999999999999999"#,
                "'vocab_size' must be positive, found -99999999999999999999999"
            ),
            (#""hidden_size": 1.5e16"#, "'hidden_size' is absurdly large (1.5e16 > 1073741824)"),
            (#""hidden_size": 64.5"#, "'hidden_size' must be an integer, found 64.5"),
            // Before: "must be a positive number".
            (#""rope_theta": 1e400"#, "'rope_theta' is too large: beyond a double (about 1.8e308)"),
            (
                #""rope_parameters": {"rope_theta": 1e400}"#,
                "'rope_parameters.rope_theta' is too large: beyond a double (about 1.8e308)"
            ),
        ])
    func tooLargeToHold(_ field: String, _ message: String) throws {
        // The field replaces the tiny config's own, or is added.
        let key = String(field.prefix { $0 != ":" })
        let base = configText("")
        let json =
            base.contains(key + ":")
            ? base.replacingOccurrences(of: key + ": [0-9]+", with: field, options: .regularExpression)
            : configText(field)
        let error = #expect(throws: ConfigError.self) { try ModelConfig(bytes: Array(json.utf8), path: "config.json") }
        #expect(error?.description == "config 'config.json': " + message)
        #expect(error?.exitStatus == .badInput)
    }

    @Test("transformers 5's rope_parameters gives the base frequency and scaling rope_theta and rope_scaling give")
    func ropeParameters() throws {
        // A checkpoint saved by transformers 5 may leave rope_theta out or null: read before,
        // the graph took 10,000 for 1,000,000 without a word.
        for extra in [
            #""rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}"#,
            #""rope_theta": null, "rope_parameters": {"rope_theta": 1e6}"#,
            #""rope_theta": 1000000, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}"#,
            #""rope_parameters": {"full_attention": {"rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1000000}}"#,
        ] {
            let parsed = try config(json: extra)
            #expect(parsed.ropeTheta == 1_000_000, "\(extra)")
            #expect(parsed.ropeScaling == .null, "\(extra)")
        }
        #expect(try config(json: #""rope_parameters": {"rope_type": "default"}"#).ropeTheta == 10_000)
        #expect(
            try config(json: #""rope_theta": 5e5, "rope_parameters": {"rope_type": "default"}"#).ropeTheta == 500_000)
        let linear = try config(json: #""rope_parameters": {"rope_type": "linear", "factor": 2, "rope_theta": 1e4}"#)
        #expect(linear.ropeScaling.objectValue?["rope_type"] == .string("linear"))
        #expect(linear.ropeScaling.objectValue?["factor"]?.doubleValue == 2)
        // Both forms of one scaling agree; the legacy object is kept as written.
        let both = try config(
            json:
                #""rope_scaling": {"type": "linear", "factor": 2.0}, "rope_parameters": {"rope_type": "linear", "factor": 2}"#
        )
        #expect(both.ropeScaling.objectValue?["type"] == .string("linear"))
        let thetaOnly = try config(
            json: #""rope_scaling": {"type": "linear", "factor": 2}, "rope_parameters": {"rope_theta": 1e6}"#)
        #expect(thetaOnly.ropeScaling.objectValue?["type"] == .string("linear"))
        #expect(thetaOnly.ropeTheta == 1_000_000)
    }

    @Test("the same model saved by transformers 4 and 5 gives the same graph")
    func ropeParametersGraph() throws {
        let legacy = try Fixtures.syntheticCheckpoint(overrides: [
            "rope_theta": 1_000_000.0, "rope_scaling": ["type": "linear", "factor": 2],
        ])
        let newer = try Fixtures.syntheticCheckpoint(overrides: [
            "rope_theta": nil, "rope_parameters": ["rope_type": "linear", "factor": 2, "rope_theta": 1_000_000.0],
        ])
        let legacyGraph = GraphDescription(plan: try Fixtures.plan(legacy))
        #expect(legacyGraph.rope.theta == 1_000_000)
        #expect(legacyGraph.rope.scalingType == "linear")
        #expect(legacyGraph.rope.scalingFactor == 2)
        #expect(GraphDescription(plan: try Fixtures.plan(newer)) == legacyGraph)
    }

    @Test(
        "rope_parameters that disagree with rope_theta or rope_scaling, or malformed, are refused by key",
        arguments: [
            (
                #""rope_theta": 10000, "rope_parameters": {"rope_theta": 1e6}"#,
                "'rope_parameters.rope_theta' is 1000000.0 but rope_theta is 10000.0"
            ),
            (
                #""rope_scaling": {"type": "linear", "factor": 2}, "rope_parameters": {"rope_type": "default"}"#,
                "'rope_parameters.rope_type' is 'default' but rope_scaling says 'linear'"
            ),
            (
                #""rope_scaling": {"type": "linear", "factor": 2}, "rope_parameters": {"rope_type": "linear", "factor": 4}"#,
                // Before: "'rope_parameters.rope_type' is 'linear' but rope_scaling says 'linear' with another factor".
                "'rope_parameters.factor' is 4 but rope_scaling.factor is 2"
            ),
            (#""rope_parameters": "default""#, "'rope_parameters' should be an object, found a string"),
            (
                #""rope_parameters": {"rope_theta": "1e6"}"#,
                "'rope_parameters.rope_theta' should be a number, found a string"
            ),
            (#""rope_parameters": {"rope_type": 2}"#, "'rope_parameters.rope_type' should be a string, found a number"),
            (
                #""rope_parameters": {"rope_type": "linear", "factor": 0}"#,
                "'rope_parameters.factor' must be a positive number, found 0"
            ),
            (
                #""rope_parameters": {"full_attention": {"rope_theta": "x"}}"#,
                "'rope_parameters.full_attention.rope_theta' should be a number, found a string"
            ),
            (#""rope_parameters": {"rope_theta": -1}"#, "'rope_parameters.rope_theta' must be a positive number"),
            (#""rope_theta": 0"#, "'rope_theta' must be a positive number"),
        ])
    func badRopeParameters(_ extra: String, _ message: String) throws {
        let error = #expect(throws: ConfigError.self) { try config(json: extra) }
        #expect(error?.description == "config 'config.json': " + message)
        #expect(error?.exitStatus == .badInput)
    }

    @Test(
        "a partial rotation, or rotations that differ between layer types, are refused (exit 69)",
        arguments: [
            (
                #""partial_rotary_factor": 0.75"#,
                "'partial_rotary_factor' is 0.75: rotating part of each head is not supported (the graph rotates every dimension)"
            ),
            (
                #""rope_parameters": {"rope_theta": 1e6, "partial_rotary_factor": 0.5}"#,
                "'rope_parameters.partial_rotary_factor' is 0.5: rotating part of each head is not supported "
                    + "(the graph rotates every dimension)"
            ),
            (
                #""rope_parameters": {"sliding_attention": {"rope_theta": 1e4}, "full_attention": {"rope_theta": 1e6}}"#,
                "'rope_parameters' differs between layer types (full_attention, sliding_attention); "
                    + "one rotation for every layer is supported"
            ),
        ])
    func unsupportedRotation(_ extra: String, _ message: String) throws {
        try expectUnsupported(extra, message)
        #expect(
            try config(json: #""partial_rotary_factor": 1.0, "rope_parameters": {"partial_rotary_factor": 1}"#)
                .ropeTheta == 10_000)
    }

    @Test(
        "an MLP activation other than silu is refused (exit 69); swish is silu",
        arguments: [
            (
                #""hidden_act": "gelu""#,
                "'hidden_act' is 'gelu': the graph's MLP computes silu, the one activation supported"
            ),
            (
                #""hidden_activation": "gelu_pytorch_tanh""#,
                "'hidden_activation' is 'gelu_pytorch_tanh': the graph's MLP computes silu, the one activation supported"
            ),
        ])
    func unsupportedActivation(_ extra: String, _ message: String) throws {
        try expectUnsupported(extra, message)
        _ = try config(json: #""hidden_act": "swish", "hidden_activation": "silu""#)
    }

    @Test(
        "architectures without a language-model head (classifier, reward model, bare model) are refused (exit 69)",
        arguments: [
            #"["Qwen2ForSequenceClassification"]"#, #"["Qwen2ForTokenClassification", "Qwen2Model"]"#,
            #"["Qwen2ForRewardModel"]"#,
        ])
    func architectureWithoutLanguageModelHead(_ architectures: String) throws {
        let names = try #require(
            try JSONSerialization.jsonObject(with: Data(architectures.utf8)) as? [String])
        try expectUnsupported(
            #""architectures": "# + architectures,
            "'architectures' is " + names.map { "'\($0)'" }.joined(separator: ", ")
                + ": the export needs a language-model head (a class name ending in one of: "
                + "ForCausalLM, LMHeadModel, ForConditionalGeneration)")
    }

    @Test("a language-model head anywhere in architectures, or no architectures at all, is accepted")
    func architectureWithLanguageModelHead() throws {
        for architectures in [
            #"["Qwen2ForCausalLM"]"#, #"["Qwen3VLForConditionalGeneration"]"#, #"["GPT2LMHeadModel"]"#,
            #"["Qwen2Model", "Qwen2ForCausalLM"]"#, "[]", "null",
        ] {
            _ = try config(json: #""architectures": "# + architectures)
        }
        _ = try config(json: "")
    }

    /// Expects the tiny config with `extra` refused as unsupported (69) with `message`.
    private func expectUnsupported(_ extra: String, _ message: String) throws {
        let error = #expect(throws: ConfigError.self) { try config(json: extra) }
        #expect(error?.description == "config 'config.json': " + message)
        #expect(error?.exitStatus == .unsupported)
    }

    @Test("torch_dtype (or dtype) is a float type the weights can be read as, or absent")
    func torchDType() throws {
        for name in ["bfloat16", "float16", "float32"] {
            #expect(try config(["torch_dtype": name]).torchDType == name)
            #expect(try config(["torch_dtype": nil, "dtype": name]).torchDType == name)
        }
        #expect(try config(["torch_dtype": nil]).torchDType == nil)
        #expect(try config(["torch_dtype": NSNull()]).torchDType == nil)
        // auto, the weights' own type: before, refused, whatever the weights said.
        #expect(try config(["torch_dtype": "auto"]).torchDType == "auto")
        #expect(try config(["torch_dtype": nil, "dtype": "auto"]).torchDType == "auto")
        // transformers reads a string dtype as an attribute of torch, which torch.bfloat16 is not.
        for (field, value) in [("torch_dtype", "int4"), ("dtype", "float8_e4m3fn"), ("torch_dtype", "torch.bfloat16")] {
            let error = #expect(throws: ConfigError.self) { try config(json: "\"\(field)\": \"\(value)\"") }
            #expect(
                error?.description
                    == "config 'config.json': '\(field)' is '\(value)'; expected one of: bfloat16, float16, float32, auto"
            )
            #expect(error?.exitStatus == .badInput)
        }
    }

    private static let sliding2 = #""layer_types": ["sliding_attention", "sliding_attention"]"#
    private static let full2 = #""layer_types": ["full_attention", "full_attention"]"#
    private static let mixed2 = #""layer_types": ["full_attention", "sliding_attention"]"#

    @Test(
        "qwen2 and qwen3 slide only with use_sliding_window (false when absent), from max_window_layers (28) on",
        arguments: [
            // Before, an absent use_sliding_window was on and an absent max_window_layers 0: the
            // first three got a window of 64 (or none for want of sliding_window) that transformers
            // does not apply.
            (#""sliding_window": 64"#, nil),
            (#""sliding_window": 64, "use_sliding_window": true"#, nil),
            (#""use_sliding_window": true, "max_window_layers": 0"#, 4096),
            (#""sliding_window": 64, "use_sliding_window": true, "max_window_layers": 0"#, 64),
            (#""sliding_window": null, "use_sliding_window": true, "max_window_layers": 2"#, nil),
            (#""sliding_window": null, "use_sliding_window": false, "max_window_layers": 0"#, nil),
            (#""sliding_window": 64, "use_sliding_window": false, "max_window_layers": 0"#, nil),
            (#""sliding_window": 64, "use_sliding_window": true, "max_window_layers": 2"#, nil),
            (#""sliding_window": 64, "use_sliding_window": true, "# + sliding2, 64),
            (#""sliding_window": 64, "use_sliding_window": true, "# + full2, nil),
            (#""sliding_window": 64, "# + full2, nil),
            (#""sliding_window": 64, "max_window_layers": 0, "sliding_window_pattern": 2"#, nil),
            ("", nil),
        ] as [(String, Int?)])
    func qwenWindow(_ fields: String, _ window: Int?) throws {
        for family in ["qwen2", "qwen3"] {
            #expect(try config(json: fields, modelType: family).attentionWindow == window, "\(family)")
        }
    }

    @Test(
        "qwen2 and qwen3 layers that slide from max_window_layers with a null window are refused (65), as by layer_types"
    )
    func qwenSlidingLayersWithoutWindow() throws {
        // FORMAT.md refuses sliding layers with the window null; before, only layer_types did,
        // and these exported with full attention.
        for family in ["qwen2", "qwen3"] {
            for (fields, message) in [
                (
                    #""sliding_window": null, "use_sliding_window": true, "max_window_layers": 0"#,
                    "'max_window_layers' is 0: 2 of 2 layers slide but sliding_window is null"
                ),
                (
                    #""sliding_window": null, "use_sliding_window": true, "max_window_layers": 1"#,
                    "'max_window_layers' is 1: 1 of 2 layers slide but sliding_window is null"
                ),
                (
                    #""sliding_window": null, "use_sliding_window": true, "# + Self.sliding2,
                    "'layer_types' has sliding layers but sliding_window is null"
                ),
            ] {
                let error = #expect(throws: ConfigError.self) { try config(json: fields, modelType: family) }
                #expect(error?.description == "config 'config.json': " + message, "\(family): \(fields)")
                #expect(error?.exitStatus == .badInput, "\(family): \(fields)")
            }
            let error = #expect(throws: ConfigError.self) {
                try config([
                    "model_type": family, "num_hidden_layers": 30, "sliding_window": NSNull(),
                    "use_sliding_window": true,
                ])
            }
            #expect(
                error?.description
                    == "config 'config.json': 'max_window_layers' (default 28): 2 of 30 layers slide but sliding_window "
                    + "is null")
            #expect(error?.exitStatus == .badInput)
        }
    }

    @Test(
        "mistral slides every layer by sliding_window (4,096 when absent); use_sliding_window and max_window_layers are not its keys",
        arguments: [
            ("", 4096),
            (#""sliding_window": null"#, nil),
            (#""sliding_window": 64"#, 64),
            (#""sliding_window": 64, "use_sliding_window": false"#, 64),
            (#""sliding_window": 64, "use_sliding_window": true, "max_window_layers": 1"#, 64),
            (#""sliding_window": 64, "# + sliding2, 64),
            (#""sliding_window": null, "# + full2, nil),
        ] as [(String, Int?)])
    func mistralWindow(_ fields: String, _ window: Int?) throws {
        #expect(try config(json: fields, modelType: "mistral").attentionWindow == window)
    }

    @Test(
        "mixtral and phi3 slide every layer by sliding_window (none when absent); use_sliding_window and max_window_layers are not their keys",
        arguments: [
            // Before, use_sliding_window false or max_window_layers turned the window off (or, at
            // -1, refused the config), and max_window_layers 1 was refused as a partial window.
            ("", nil),
            (#""sliding_window": null"#, nil),
            (#""sliding_window": 64"#, 64),
            (#""sliding_window": 64, "use_sliding_window": false"#, 64),
            (#""sliding_window": 64, "use_sliding_window": true, "max_window_layers": 1"#, 64),
            (#""sliding_window": 64, "max_window_layers": 28"#, 64),
            (#""sliding_window": 64, "max_window_layers": -1"#, 64),
            (#""sliding_window": 64, "# + sliding2, 64),
            (#""sliding_window": null, "# + full2, nil),
        ] as [(String, Int?)])
    func mixtralPhi3Window(_ fields: String, _ window: Int?) throws {
        for family in ["mixtral", "phi3"] {
            #expect(try config(json: fields, modelType: family).attentionWindow == window, "\(family)")
        }
    }

    @Test(
        "qwen3_moe slides every layer only with use_sliding_window (false when absent), by sliding_window (4,096 when absent)",
        arguments: [
            // Before, an absent use_sliding_window was on, an absent sliding_window no window, and
            // max_window_layers chose the first sliding layer, which Qwen3MoeConfig does not.
            (#""sliding_window": 64"#, nil),
            (#""use_sliding_window": true"#, 4096),
            (#""sliding_window": 64, "use_sliding_window": true"#, 64),
            (#""sliding_window": 64, "use_sliding_window": true, "max_window_layers": 1"#, 64),
            (#""sliding_window": 64, "use_sliding_window": true, "max_window_layers": 28"#, 64),
            (#""sliding_window": null, "use_sliding_window": true"#, nil),
            (#""sliding_window": 64, "use_sliding_window": false, "max_window_layers": 0"#, nil),
            (#""sliding_window": 64, "use_sliding_window": true, "# + sliding2, 64),
            (#""sliding_window": 64, "# + full2, nil),
            ("", nil),
        ] as [(String, Int?)])
    func qwen3MoeWindow(_ fields: String, _ window: Int?) throws {
        #expect(try config(json: fields, modelType: "qwen3_moe").attentionWindow == window)
    }

    @Test(
        "the families not audited keep the generic reading: layer_types, else sliding_window_pattern, else use_sliding_window (on when absent)",
        arguments: [
            (#""sliding_window": 64"#, 64),
            (#""sliding_window": 64, "use_sliding_window": true"#, 64),
            (#""sliding_window": 64, "use_sliding_window": false"#, nil),
            (#""sliding_window": null, "use_sliding_window": true"#, nil),
            (#""sliding_window": 64, "use_sliding_window": true, "max_window_layers": 0"#, 64),
            (#""sliding_window": 64, "use_sliding_window": true, "max_window_layers": 2"#, nil),
            (#""sliding_window": 64, "use_sliding_window": true, "max_window_layers": 28"#, nil),
            (#""sliding_window": 64, "use_sliding_window": false, "max_window_layers": 1"#, nil),
            (#""sliding_window": 64, "# + full2, nil),
            (#""sliding_window": 64, "# + sliding2, 64),
            (#""sliding_window": 64, "use_sliding_window": false, "# + sliding2, 64),
            (#""sliding_window": 64, "sliding_window_pattern": 1"#, nil),
            (#""sliding_window": null, "sliding_window_pattern": 6"#, nil),
            ("", nil),
        ] as [(String, Int?)])
    func genericWindow(_ fields: String, _ window: Int?) throws {
        for family in ["gemma3_text", "gpt_oss", "unknown_family"] {
            #expect(try config(json: fields, modelType: family).attentionWindow == window, "\(family)")
        }
    }

    @Test(
        "a window on some layers only is refused as unsupported; malformed layer fields by key",
        arguments: [
            (
                "qwen2", #""sliding_window": 64, "use_sliding_window": true, "max_window_layers": 1"#,
                "'sliding_window' applies to 1 of 2 layers; one window for every layer is supported", true
            ),
            (
                "qwen3", #""sliding_window": 64, "use_sliding_window": true, "# + mixed2,
                "'sliding_window' applies to 1 of 2 layers; one window for every layer is supported", true
            ),
            (
                // Gemma 3 (before its configs listed layer_types): a window read as every layer's.
                "gemma3_text", #""sliding_window": 64, "sliding_window_pattern": 2"#,
                "'sliding_window' applies to 1 of 2 layers; one window for every layer is supported", true
            ),
            (
                "unknown_family", #""sliding_window": 64, "# + mixed2,
                "'sliding_window' applies to 1 of 2 layers; one window for every layer is supported", true
            ),
            (
                "qwen2", #""sliding_window": 64, "use_sliding_window": true, "max_window_layers": -1"#,
                "'max_window_layers' should be a non-negative integer, found -1", false
            ),
            (
                "unknown_family", #""sliding_window": 64, "use_sliding_window": true, "max_window_layers": -1"#,
                "'max_window_layers' should be a non-negative integer, found -1", false
            ),
            (
                "qwen2", #""sliding_window": 64, "layer_types": ["full_attention"]"#,
                "'layer_types' lists 1 layers, num_hidden_layers is 2", false
            ),
            (
                "qwen2", #""layer_types": ["full_attention", "chunked_attention"]"#,
                "'layer_types' has 'chunked_attention' (expected one of: full_attention, sliding_attention)", false
            ),
            (
                "unknown_family", #""sliding_window": null, "# + sliding2,
                "'layer_types' has sliding layers but sliding_window is null", false
            ),
            (
                "qwen2", #""sliding_window": null, "use_sliding_window": true, "# + sliding2,
                "'layer_types' has sliding layers but sliding_window is null", false
            ),
            // transformers sets sliding_window to None without use_sliding_window, and then fails
            // on sliding layers; before, these got a window of 64.
            (
                "qwen2", #""sliding_window": 64, "use_sliding_window": false, "# + sliding2,
                "'layer_types' has sliding layers but use_sliding_window is false", false
            ),
            (
                "qwen3", #""sliding_window": 64, "# + sliding2,
                "'layer_types' has sliding layers but use_sliding_window is false (absent)", false
            ),
            // MistralConfig does not read layer_types (transformers warns and slides every layer):
            // before, the first got no window and the others were refused as partial windows.
            (
                "mistral", #""sliding_window": 64, "# + full2,
                "'layer_types' names full_attention layers, but mistral does not read layer_types: "
                    + "every layer slides by sliding_window (64)", true
            ),
            (
                "mistral", mixed2,
                "'layer_types' names full_attention layers, but mistral does not read layer_types: "
                    + "every layer slides by sliding_window (4096)", true
            ),
            (
                "mistral", #""sliding_window": null, "# + mixed2,
                "'layer_types' names sliding_attention layers, but mistral does not read layer_types: "
                    + "every layer attends to the whole context", true
            ),
            // Nor do MixtralConfig, Phi3Config and Qwen3MoeConfig: before, mixtral's and phi3's
            // layer_types chose the sliding layers, and qwen3_moe's with use_sliding_window off.
            (
                "mixtral", #""sliding_window": 64, "# + mixed2,
                "'layer_types' names full_attention layers, but mixtral does not read layer_types: "
                    + "every layer slides by sliding_window (64)", true
            ),
            (
                "phi3", sliding2,
                "'layer_types' names sliding_attention layers, but phi3 does not read layer_types: "
                    + "every layer attends to the whole context", true
            ),
            (
                "qwen3_moe", #""sliding_window": 64, "# + sliding2,
                "'layer_types' names sliding_attention layers, but qwen3_moe does not read layer_types: "
                    + "every layer attends to the whole context", true
            ),
            (
                "qwen3_moe", #""use_sliding_window": true, "# + mixed2,
                "'layer_types' names full_attention layers, but qwen3_moe does not read layer_types: "
                    + "every layer slides by sliding_window (4096)", true
            ),
        ])
    func unsupportedWindow(_ family: String, _ fields: String, _ message: String, _ unsupported: Bool) throws {
        let error = #expect(throws: ConfigError.self) { try config(json: fields, modelType: family) }
        #expect(error?.description == "config 'config.json': " + message)
        #expect(error?.exitStatus == (unsupported ? .unsupported : .badInput))
    }

    @Test(
        "qwen2, qwen3, qwen3_moe, mistral and mixtral refuse a rotary scaling other than linear, phi3 any (exit 69): its own keys have no place in the graph",
        arguments: [
            (
                #""rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}"#,
                "'rope_scaling.type' is 'yarn'"
            ),
            (#""rope_scaling": {"rope_type": "dynamic", "factor": 2.0}"#, "'rope_scaling.rope_type' is 'dynamic'"),
            (
                #""rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "#
                    + #""high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_theta": 5e5}"#,
                "'rope_parameters.rope_type' is 'llama3'"
            ),
            (
                #""rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 4.0}, "#
                    + #""sliding_attention": {"rope_type": "yarn", "factor": 4.0}}"#,
                "'rope_parameters.full_attention.rope_type' is 'yarn'"
            ),
            (
                #""rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [2.0]}"#,
                "'rope_scaling.type' is 'longrope'"
            ),
        ])
    func unsupportedRopeScaling(_ extra: String, _ message: String) throws {
        for family in ["qwen2", "qwen3", "qwen3_moe", "mistral", "mixtral"] {
            let error = #expect(throws: ConfigError.self) { try config(json: extra, modelType: family) }
            #expect(
                error?.description
                    == "config 'config.json': " + message + ": the graph's rotation supports 'linear' scaling only",
                "\(family)")
            #expect(error?.exitStatus == .unsupported)
        }
        // Phi3Config knows longrope alone (su and yarn are read as it): before, phi3 recorded the
        // type and factor, which a longrope rotation does not have.
        let error = #expect(throws: ConfigError.self) { try config(json: extra, modelType: "phi3") }
        #expect(error?.description == "config 'config.json': " + message + ": the graph's rotation supports no scaling")
        #expect(error?.exitStatus == .unsupported)
        // The families not audited record the type and factor, as before.
        #expect(try config(json: extra, modelType: "unknown_family").ropeScaling != .null)
    }

    @Test("phi3 refuses even a linear scaling, which Phi3Config rejects; the others take it")
    func phi3LinearScaling() throws {
        let linear = #""rope_scaling": {"type": "linear", "factor": 2.0}"#
        let error = #expect(throws: ConfigError.self) { try config(json: linear, modelType: "phi3") }
        #expect(
            error?.description
                == "config 'config.json': 'rope_scaling.type' is 'linear': the graph's rotation supports no scaling")
        #expect(error?.exitStatus == .unsupported)
        for family in ["mixtral", "qwen3_moe"] {
            #expect(try config(json: linear, modelType: family).ropeScaling.objectValue?["factor"]?.doubleValue == 2)
        }
        #expect(try config(json: #""rope_scaling": {"rope_type": "default"}"#, modelType: "phi3").ropeTheta == 10_000)
    }

    @Test("the configs shipped with the presets all parse")
    func shippedConfigs() throws {
        let folder = Fixtures.presetsDirectory.appendingPathComponent("checkpoints")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(names == ["Mistral-7B-Instruct-v0.3", "Qwen2.5-1.5B-Instruct", "Qwen3-0.6B", "Qwen3-4B"])
        for name in names {
            let url = folder.appendingPathComponent(name).appendingPathComponent("config.json")
            // Qwen2.5's window (32,768 from layer 21) is off: use_sliding_window is false.
            #expect(try ModelConfig(contentsOf: url).attentionWindow == nil)
        }
    }

    @Test(
        "without num_key_value_heads a model not audited has as many KV heads as heads; without tie_word_embeddings, untied"
    )
    func absentKeys() throws {
        let parsed = try config(["model_type": "gemma3_text", "num_key_value_heads": nil, "head_dim": nil])
        #expect(parsed.keyValueHeads == 4)
        #expect(parsed.headDimension == 16)
        #expect(try config(["tie_word_embeddings": nil]).tieWordEmbeddings == false)
    }

    @Test("an absent num_key_value_heads or head_dim takes the default of the family's transformers class")
    func familyDefaults() throws {
        // Qwen2Config and Qwen3Config default to 32 KV heads, MistralConfig to 8, Qwen3Config to a
        // head dimension of 128: before, every family took the heads and hidden_size / heads.
        #expect(try config(["num_attention_heads": 32, "num_key_value_heads": nil]).keyValueHeads == 32)
        #expect(
            try config(["model_type": "qwen3", "num_attention_heads": 64, "num_key_value_heads": nil]).keyValueHeads
                == 32)
        #expect(
            try config(["model_type": "mistral", "num_key_value_heads": nil, "num_attention_heads": 16]).keyValueHeads
                == 8)
        #expect(try config(["num_key_value_heads": NSNull()]).keyValueHeads == 4)
        #expect(try config(["model_type": "qwen3", "head_dim": nil]).headDimension == 128)
        #expect(try config(["model_type": "qwen3", "head_dim": NSNull()]).headDimension == 128)
        #expect(try config(["model_type": "qwen2", "head_dim": nil]).headDimension == 16)
        #expect(try config(["model_type": "mistral", "head_dim": nil]).headDimension == 16)
        // MixtralConfig defaults to 8 KV heads and Qwen3MoeConfig to 4; Phi3Config, as many as the
        // heads. Before, all three took the heads.
        #expect(
            try config(["model_type": "mixtral", "num_key_value_heads": nil, "num_attention_heads": 16]).keyValueHeads
                == 8)
        #expect(
            try config(["model_type": "qwen3_moe", "num_key_value_heads": nil, "num_attention_heads": 16])
                .keyValueHeads == 4)
        #expect(try config(["model_type": "phi3", "num_key_value_heads": nil]).keyValueHeads == 4)
        for family in ["mixtral", "phi3", "qwen3_moe"] {
            #expect(try config(["model_type": family, "head_dim": nil]).headDimension == 16, "\(family)")
        }
        let error = #expect(throws: ConfigError.self) { try config(["num_key_value_heads": nil]) }
        #expect(
            error?.description
                == "config 'config.json': 'num_key_value_heads' is absent; its default (32) does not divide "
                + "num_attention_heads (4)")
        #expect(error?.exitStatus == .badInput)
    }

    @Test(
        "an absent rms_norm_eps or rope_theta takes the default of the family's transformers class",
        arguments: [
            // Before, every family took 1e-6 and 10,000: MixtralConfig's are 1e-5 and 1,000,000,
            // Phi3Config's epsilon 1e-5.
            ("mixtral", 1e-5, 1_000_000), ("phi3", 1e-5, 10_000), ("qwen3_moe", 1e-6, 10_000),
            ("qwen2", 1e-6, 10_000), ("qwen3", 1e-6, 10_000), ("mistral", 1e-6, 10_000),
            ("unknown_family", 1e-6, 10_000),
        ] as [(String, Double, Double)])
    func normAndRotationDefaults(_ family: String, _ epsilon: Double, _ theta: Double) throws {
        let absent = try config(["model_type": family, "rms_norm_eps": nil, "rope_theta": nil])
        #expect(absent.rmsNormEpsilon == epsilon)
        #expect(absent.ropeTheta == theta)
        let null = try config(["model_type": family, "rms_norm_eps": NSNull(), "rope_theta": NSNull()])
        #expect(null.rmsNormEpsilon == epsilon)
        #expect(null.ropeTheta == theta)
        // transformers 5's rope_parameters without rope_theta takes the family's default too.
        let parameters = try config([
            "model_type": family, "rope_theta": nil, "rope_parameters": ["rope_type": "default"],
        ])
        #expect(parameters.ropeTheta == theta)
        let written = try config(["model_type": family, "rms_norm_eps": 1e-6, "rope_theta": 5e5])
        #expect(written.rmsNormEpsilon == 1e-6)
        #expect(written.ropeTheta == 500_000)
    }

    @Test("graph.json of a mixtral and a qwen3_moe that leave their keys out holds their transformers defaults")
    func macOSFamilyGraphs() throws {
        let absent: [String: Any?] = [
            "num_attention_heads": 16, "num_key_value_heads": nil, "rms_norm_eps": nil, "rope_theta": nil,
            "sliding_window": 64, "attention_bias": true, "num_local_experts": 2, "num_experts": 2,
        ]
        let mixtral = GraphDescription(
            plan: try Fixtures.plan(
                Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "mixtral", overrides: absent)),
                platform: .macOS))
        // Before: 16 KV heads, epsilon 1e-6, theta 10,000 and q/k/v biases.
        #expect(mixtral.attention.kvHeads == 8)
        #expect(mixtral.rmsNormEpsilon == 1e-5)
        #expect(mixtral.rope.theta == 1_000_000)
        #expect(mixtral.attention.qkvBias == false)
        #expect(mixtral.attention.slidingWindow == 64)
        var moe = absent
        moe["attention_bias"] = nil
        let qwen3Moe = GraphDescription(
            plan: try Fixtures.plan(
                Fixtures.checkpointDirectory(config: Fixtures.tinyConfig(modelType: "qwen3_moe", overrides: moe)),
                platform: .macOS))
        // Before: 16 KV heads and a window of 64 (use_sliding_window read as on when absent).
        #expect(qwen3Moe.attention.kvHeads == 4)
        #expect(qwen3Moe.rmsNormEpsilon == 1e-6)
        #expect(qwen3Moe.rope.theta == 10_000)
        #expect(qwen3Moe.attention.slidingWindow == nil)
    }

    @Test("4,096 decoder layers are the most a config may have; 4,097 are refused, naming the field")
    func layerLimit() throws {
        #expect(try config(["num_hidden_layers": 4096]).layerCount == 4096)
        #expect(
            throws: ConfigError.invalidValue(
                path: "config.json", field: "num_hidden_layers", reason: "is absurdly large (4097 > 4096)")
        ) { _ = try config(["num_hidden_layers": 4097]) }
    }
}
