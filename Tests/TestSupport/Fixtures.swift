import ExporterKit
import Foundation

/// Folders, configs and catalogs for tests.
public enum Fixtures {
    /// The repository's root folder.
    public static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The repository's `Presets/` folder.
    public static let presetsDirectory = repositoryRoot.appendingPathComponent("Presets")

    /// A fresh empty directory under the system temporary folder, removed with everything in
    /// it when the process exits (a test run made about 350 folders, 200 MB, and left them).
    public static func temporaryDirectory(_ label: String = "exporter-test") throws -> URL {
        let url = FileManager.default.temporaryDirectory
            .appendingPathComponent("\(label)-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        TemporaryFolders.shared.add(url)
        return url
    }

    /// Exports the checkpoint at `checkpoint` into a folder of its own and returns the bundle.
    public static func export(_ checkpoint: URL, contextLength: Int? = nil) throws -> URL {
        try ExportRunner.run(
            try plan(checkpoint, contextLength: contextLength),
            settings: ExportSettings(outputDirectory: try temporaryDirectory())
        ).bundleURL
    }

    /// Exchanges the folders `a` and `b`, as an export with `--overwrite` exchanges its new
    /// artifact with the old one.
    public static func exchange(_ a: URL, _ b: URL) throws {
        let aside = a.deletingLastPathComponent().appendingPathComponent(".aside-\(UUID().uuidString)")
        try FileManager.default.moveItem(at: a, to: aside)
        try FileManager.default.moveItem(at: b, to: a)
        try FileManager.default.moveItem(at: aside, to: b)
    }

    /// The shipped presets.
    public static func catalog() throws -> PresetCatalog {
        try PresetCatalog(directory: presetsDirectory)
    }

    /// A resolver over the shipped presets with an empty Hugging Face cache, or `cache` when given.
    public static func resolver(cache: [String: (URL, String)] = [:]) throws -> ModelResolver {
        ModelResolver(
            catalog: try catalog(),
            locateInCache: { repoID in cache[repoID].map { (snapshot: $0.0, revision: $0.1) } },
            cacheDescription: { "/nonexistent/hub/models--" + $0.replacingOccurrences(of: "/", with: "--") })
    }

    /// A tiny config of the given family as a JSON object; `overrides` replace or add keys
    /// (`nil` removes one). It writes `head_dim` (16, `hidden_size / num_attention_heads`), as real
    /// qwen3 configs do: Qwen3Config's default is 128.
    public static func tinyConfig(modelType: String = "qwen2", overrides: [String: Any?] = [:]) -> [String: Any] {
        var config: [String: Any] = [
            "architectures": ["TinyForCausalLM"],
            "model_type": modelType,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "vocab_size": 256,
            "max_position_embeddings": 512,
            "rope_theta": 10000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": true,
            "torch_dtype": "bfloat16",
        ]
        for (key, value) in overrides {
            if let value { config[key] = value } else { config.removeValue(forKey: key) }
        }
        return config
    }

    /// Writes `config` as `config.json` into a new folder and returns the folder.
    public static func checkpointDirectory(config: [String: Any], name: String = "Tiny") throws -> URL {
        let directory = try temporaryDirectory().appendingPathComponent(name, isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let data = try JSONSerialization.data(withJSONObject: config, options: [.sortedKeys])
        try data.write(to: directory.appendingPathComponent("config.json"))
        return directory
    }
}

extension Fixtures {
    /// A tiny checkpoint folder: `config.json`, synthetic safetensors (BF16 unless `dtype`
    /// says) of every tensor its architecture expects, and a small `tokenizer.json` (with
    /// `<think>` when `reasoning`).
    public static func syntheticCheckpoint(
        modelType: String = "qwen2", overrides: [String: Any?] = [:], seed: UInt64 = 7, shardBytes: Int = 1 << 40,
        reasoning: Bool = false, name: String = "Tiny", dtype: TensorDType = .bf16
    ) throws -> URL {
        let directory = try checkpointDirectory(
            config: tinyConfig(modelType: modelType, overrides: overrides), name: name)
        let config = try ModelConfig(contentsOf: directory.appendingPathComponent("config.json"))
        let tensors = try ArchitectureRegistry.tensors(for: config, configPath: "config.json")
        try SyntheticCheckpoint.write(
            tensors: tensors.map { ($0.name, $0.shape) }, dtype: dtype, seed: seed, to: directory,
            shardBytes: shardBytes)
        let vocabulary = reasoning ? #"{"<|im_start|>": 0, "<think>": 1}"# : #"{"<|im_start|>": 0}"#
        try Data(#"{"model": {"vocab": \#(vocabulary)}}"#.utf8).write(
            to: directory.appendingPathComponent("tokenizer.json"))
        return directory
    }

    /// The plan of an experimental float16 export of the checkpoint at `directory`.
    /// Overwrites elements of `tensor` in a single-file checkpoint (`model.safetensors`) with
    /// `values`, stored in the tensor's dtype (bfloat16 rounded to nearest even, float16 by
    /// Swift's conversion, float32 exactly); a negative index counts from the end.
    public static func setValues(_ values: [(index: Int, value: Float)], of tensor: String, in directory: URL) throws {
        let url = directory.appendingPathComponent("model.safetensors")
        let descriptor = try SafetensorsFile(url: url).tensor(named: tensor)
        var bytes = [UInt8](try Data(contentsOf: url))
        let size = descriptor.dtype == .f32 ? 4 : 2
        for (index, value) in values {
            let element = index >= 0 ? index : descriptor.elementCount + index
            let pattern: UInt32
            switch descriptor.dtype {
            case .f32: pattern = value.bitPattern
            case .f16: pattern = UInt32(Float16(value).bitPattern)
            default: pattern = UInt32(PrecisionConversion.bfloat16Bits(value))
            }
            for byte in 0..<size {
                bytes[descriptor.byteRange.lowerBound + element * size + byte] = UInt8(
                    truncatingIfNeeded: pattern >> (8 * byte))
            }
        }
        try Data(bytes).write(to: url)
    }

    public static func plan(
        _ directory: URL, platform: Platform = .iOS, compression: CompressionChoice = .automatic,
        precision: ComputePrecision = .float16, contextLength: Int? = nil
    ) throws -> ExportPlan {
        var options = ExportOptions(model: directory.path)
        options.contextLength = contextLength
        options.experimental = true
        options.computePrecision = precision
        options.platform = platform
        options.compression = compression
        return try ExportPlan.make(options: options, resolver: try resolver())
    }
}

/// The folders `Fixtures.temporaryDirectory` made, removed at exit: tests run side by side
/// and may hand a folder to a child process, so none can be removed earlier without care.
private final class TemporaryFolders: @unchecked Sendable {
    // @unchecked: `folders` is guarded by `lock`.
    static let shared: TemporaryFolders = {
        let folders = TemporaryFolders()
        atexit { TemporaryFolders.shared.removeAll() }
        return folders
    }()

    private let lock = NSLock()
    private var folders: [URL] = []

    func add(_ folder: URL) { lock.withLock { folders.append(folder) } }

    private func removeAll() {
        for folder in lock.withLock({ folders }) { try? FileManager.default.removeItem(at: folder) }
    }
}
