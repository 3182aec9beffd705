import Foundation

/// The manifest of a plan, a bundle or a compiled artifact: schema `exporter.manifest/1`,
/// every field specified in `docs/MANIFEST.md`.
public struct Manifest: Codable, Equatable, Sendable {
    /// The schema identifier this version writes and reads.
    public static let currentSchema = "exporter.manifest/1"

    /// `exporter.manifest/1`.
    public var schema: String
    /// `plan`, `bundle` or `compiled`.
    public var kind: String
    /// The tool that wrote the manifest.
    public var tool: Tool
    /// The model.
    public var model: Model
    /// `iOS` or `macOS`.
    public var platform: String
    /// `float16`, `bfloat16` or `float32`.
    public var computePrecision: String
    /// Context length in tokens (the static KV cache is sized for it).
    public var contextLength: Int
    /// Parameter count, tied embeddings counted once.
    public var parameters: Int
    /// The compression applied.
    public var compression: Compression
    /// The static KV cache.
    public var kvCache: KVCache
    /// Runtime memory estimate.
    public var memory: Memory
    /// Sizes, estimated and (for artifacts) actual.
    public var sizes: Sizes
    /// What the tokenizer implies, once a tokenizer is available (null before).
    @NullEncoded public var tokenizer: Tokenizer?
    /// Every tensor, in execution order.
    public var tensors: [Tensor]
    /// Every file of the artifact with size and CRC-32 (empty for a plan).
    public var files: [File]
    /// Warnings raised while planning or exporting.
    public var warnings: [String]
    /// SHA-256 of the artifact's inputs (`BuildKey`): equal keys, equal artifacts. Null for a plan.
    @NullEncoded public var buildKey: String?
    /// What compiling for one device architecture made: null for plans and bundles.
    @NullEncoded public var compiled: Compiled?
    /// The verdict of each eligible device architecture, from the config alone: filled for a plan
    /// (`exporter plan`), empty for bundles and compiled artifacts (which carry `compiled.verdict`).
    public var verdicts: [Verdict]
    /// What exporting the plan will take on the machine that planned it: filled for a plan
    /// (`exporter plan`), null for bundles and compiled artifacts (it depends on the machine).
    @NullEncoded public var conversion: Conversion?

    /// The memory an export needs at its peak, estimated as the export checks it before reading
    /// a weight (``ExportPlan/conversionMemory(_:)``).
    public struct Conversion: Codable, Equatable, Sendable {
        /// Estimated peak resident memory of the export.
        public var peakBytes: Int
        /// The tensor being compressed at that peak.
        public var peakTensor: String
        /// Threads that compress (this machine's active cores).
        public var workers: Int
        /// How the estimate knows how the weights are stored: `checkpoint` (its safetensors
        /// headers), `torch_dtype` (the config's: weights not on the machine) or `synthetic`
        /// (`--synthetic`: generated as bfloat16 for a bfloat16 config, float16 otherwise).
        public var storageFrom: String
        /// Memory available now (`MemAvailable` on Linux), or less where a limit of the process
        /// leaves less (`availableLimit`); an export needing more is refused. Null when unknown.
        @NullEncoded public var availableBytes: Int?
        /// The process limit that leaves only `availableBytes` (`RLIMIT_AS`, `RLIMIT_DATA`); null
        /// when it is the machine's memory. Plans before 0.8.4 lack the key, which reads as null.
        @NullEncoded public var availableLimit: MemoryLimit? = nil

        enum CodingKeys: String, CodingKey {
            case workers
            case peakBytes = "peak_bytes"
            case peakTensor = "peak_tensor"
            case storageFrom = "storage_from"
            case availableBytes = "available_bytes"
            case availableLimit = "available_limit"
        }
    }

    /// The tool's identity.
    public struct Tool: Codable, Equatable, Sendable {
        /// Always `exporter`.
        public var name: String
        /// The tool's version.
        public var version: String
    }

    /// The model and where it came from.
    public struct Model: Codable, Equatable, Sendable {
        /// Display name, e.g. `Qwen2.5-1.5B-Instruct`.
        public var name: String
        /// `model_type` as written in the config.
        public var modelType: String
        /// The registry family after remapping (`qwen2_5` → `qwen2`).
        public var registryType: String
        /// `architectures` of the config.
        public var architectures: [String]
        /// The preset id, or null when none.
        @NullEncoded public var preset: String?
        /// Whether `--experimental` made the export possible.
        public var experimental: Bool
        /// Where the checkpoint came from.
        public var source: Source
        /// `checkpoint`, `synthetic`, or `none` (a plan from the config alone).
        public var weights: String

        enum CodingKeys: String, CodingKey {
            case name, architectures, preset, experimental, source, weights
            case modelType = "model_type"
            case registryType = "registry_type"
        }
    }

    /// Where the checkpoint came from: never an absolute path, so artifacts reproduce anywhere.
    public struct Source: Codable, Equatable, Sendable {
        /// `directory`, `huggingface-cache` or `preset-config`.
        public var kind: String
        /// The Hugging Face repository, when known.
        @NullEncoded public var repoID: String?
        /// The snapshot revision (commit hash), when read from the Hugging Face cache.
        @NullEncoded public var revision: String?
        /// The checkpoint's files with their sizes (empty for a plan from the config alone).
        public var files: [SourceFile]

        enum CodingKeys: String, CodingKey {
            case kind, revision, files
            case repoID = "repo_id"
        }
    }

    /// A checkpoint file, its size and its content fingerprint.
    public struct SourceFile: Codable, Equatable, Sendable {
        /// Path relative to the checkpoint folder.
        public var name: String
        /// Size in bytes.
        public var bytes: Int
        /// Its content fingerprint (``BuildKey/fingerprint(of:tensorRanges:whole:)``), by which
        /// `verify --against` and `eval` tell whether a checkpoint is the one exported; nil in
        /// manifests written before 0.6.0.
        @NullEncoded public var fingerprint: String?

        /// A file record.
        public init(name: String, bytes: Int, fingerprint: String? = nil) {
            self.name = name
            self.bytes = bytes
            self.fingerprint = fingerprint
        }
    }

    /// The compression applied.
    public struct Compression: Codable, Equatable, Sendable {
        /// The compression config's name (`none` for none).
        public var config: String
        /// Whether the iOS token embedding is quantised to int8 per tensor.
        public var iosEmbeddingInt8: Bool
        /// The calibration text palettisation was weighted by; absent for a data-free export.
        public var calibration: CalibrationRecord? = nil

        enum CodingKeys: String, CodingKey {
            case config, calibration
            case iosEmbeddingInt8 = "ios_embedding_int8"
        }
    }

    /// Which calibration text weighted the palettisation k-means.
    public struct CalibrationRecord: Codable, Equatable, Sendable {
        /// `activation_energy`: each weight counts by the mean square of the activation it multiplies.
        public var weighting: String
        /// Tokens of the calibration text.
        public var tokens: Int
        /// CRC-32 of the token ids written as comma-separated decimal.
        public var tokensCRC32: String

        enum CodingKeys: String, CodingKey {
            case weighting, tokens
            case tokensCRC32 = "tokens_crc32"
        }

        /// The record of the calibration text `tokens`: what a plan can say before running it.
        public init(tokens: [Int]) {
            var crc = CRC32()
            Array(tokens.map(String.init).joined(separator: ",").utf8).withUnsafeBytes { crc.update($0) }
            self.init(weighting: "activation_energy", tokens: tokens.count, tokensCRC32: BundleWriter.hex(crc.value))
        }

        init(weighting: String, tokens: Int, tokensCRC32: String) {
            self.weighting = weighting
            self.tokens = tokens
            self.tokensCRC32 = tokensCRC32
        }
    }

    /// The static KV cache.
    public struct KVCache: Codable, Equatable, Sendable {
        /// `2 × layers × kv_heads × head_dim × context_length × bytes(dtype)`.
        public var bytes: Int
        /// Decoder layers.
        public var layers: Int
        /// Key/value heads.
        public var kvHeads: Int
        /// Head dimension.
        public var headDim: Int
        /// Context length.
        public var contextLength: Int
        /// Element type (the compute precision).
        public var dtype: String

        enum CodingKeys: String, CodingKey {
            case bytes, layers, dtype
            case kvHeads = "kv_heads"
            case headDim = "head_dim"
            case contextLength = "context_length"
        }
    }

    /// Runtime memory estimate.
    public struct Memory: Codable, Equatable, Sendable {
        /// Resident weights.
        public var weightsBytes: Int
        /// KV cache.
        public var kvCacheBytes: Int
        /// Peak working buffers.
        public var workingBytes: Int
        /// The sum.
        public var totalBytes: Int
        /// Tokens per prefill chunk assumed for working memory.
        public var prefillChunk: Int

        enum CodingKeys: String, CodingKey {
            case weightsBytes = "weights_bytes"
            case kvCacheBytes = "kv_cache_bytes"
            case workingBytes = "working_bytes"
            case totalBytes = "total_bytes"
            case prefillChunk = "prefill_chunk"
        }
    }

    /// Sizes.
    public struct Sizes: Codable, Equatable, Sendable {
        /// Estimated bytes of the bundle's weights file, from the config alone.
        public var estimatedBundleBytes: Int
        /// Actual bytes of every file of the artifact (null for a plan).
        @NullEncoded public var bundleBytes: Int?
        /// Bits stored per parameter in the weights file.
        public var bitsPerWeight: Double
        /// Parameters, bytes and bits per weight by tensor role.
        public var byRole: [String: RoleSize]

        enum CodingKeys: String, CodingKey {
            case estimatedBundleBytes = "estimated_bundle_bytes"
            case bundleBytes = "bundle_bytes"
            case bitsPerWeight = "bits_per_weight"
            case byRole = "by_role"
        }
    }

    /// Size of one group of tensors.
    public struct RoleSize: Codable, Equatable, Sendable {
        /// Parameters.
        public var parameters: Int
        /// Stored bytes (without padding).
        public var bytes: Int
        /// Bits per parameter.
        public var bitsPerWeight: Double

        enum CodingKeys: String, CodingKey {
            case parameters, bytes
            case bitsPerWeight = "bits_per_weight"
        }
    }

    /// What the tokenizer implies for the runtime.
    public struct Tokenizer: Codable, Equatable, Sendable {
        /// The tokenizer files carried in the bundle.
        public var files: [String]
        /// The reasoning marker found in the vocabulary (`<think>` or `<|reasoning_start|>`), or null.
        @NullEncoded public var reasoningMarker: String?
        /// The runtime's default response budget implied: 2048 with a marker, 512 without.
        public var defaultResponseTokens: Int

        enum CodingKeys: String, CodingKey {
            case files
            case reasoningMarker = "reasoning_marker"
            case defaultResponseTokens = "default_response_tokens"
        }
    }

    /// One tensor.
    public struct Tensor: Codable, Equatable, Sendable {
        /// Checkpoint name.
        public var name: String
        /// Shape, output channels first.
        public var shape: [Int]
        /// `embedding`, `attention`, `mlp`, `norm` or `head`.
        public var role: String
        /// Decoder layer, or null.
        @NullEncoded public var layer: Int?
        /// The storage scheme.
        public var compression: CompressionScheme
        /// Rows in the last group when the group size does not divide the channels (null otherwise).
        @NullEncoded public var lastGroupRows: Int?
        /// Which rule chose the scheme.
        public var rule: String
        /// Stored bytes, excluding padding.
        public var storedBytes: Int
        /// Where its parts are in the weights file (empty for a plan).
        public var parts: [Part]
        /// Signal-to-quantisation-noise ratio in dB against the source weights (null for a plan or an exact tensor).
        @NullEncoded public var sqnrDB: Double?

        enum CodingKeys: String, CodingKey {
            case name, shape, role, layer, compression, rule, parts
            case lastGroupRows = "last_group_rows"
            case storedBytes = "stored_bytes"
            case sqnrDB = "sqnr_db"
        }
    }

    /// One stored part of a tensor in a weights file.
    public struct Part: Codable, Equatable, Sendable {
        /// `values`, `lut`, `indices` or `scales`.
        public var kind: String
        /// `float16`, `float32`, `bfloat16`, `int8` or `uint4`…`uint8` packed indices.
        public var dtype: String
        /// The weights file, relative to the artifact.
        public var file: String
        /// Byte offset in the file.
        public var offset: Int
        /// Byte length.
        public var bytes: Int
    }

    /// One file of an artifact.
    public struct File: Codable, Equatable, Sendable {
        /// Path relative to the artifact folder.
        public var path: String
        /// Size in bytes.
        public var bytes: Int
        /// CRC-32 (zlib) as 8 lowercase hex digits.
        public var crc32: String
    }

    enum CodingKeys: String, CodingKey {
        case schema, kind, tool, model, platform, parameters, compression, memory, sizes, tokenizer, tensors, files
        case warnings, compiled, verdicts, conversion
        case buildKey = "build_key"
        case computePrecision = "compute_precision"
        case contextLength = "context_length"
        case kvCache = "kv_cache"
    }

    /// The manifest as canonical JSON: sorted keys, two-space indentation, a final newline.
    /// - Throws: an `EncodingError` only for non-finite doubles, which the tool never stores.
    public func canonicalJSON() throws -> [UInt8] { try CanonicalJSON.encode(self) }
}

/// The tool's version, recorded in every manifest and part of every build key: raise it
/// whenever the same inputs would give different bytes, so the farm rebuilds.
public enum ToolVersion {
    /// Semantic version of this build (0.8.4: a manifest warns of a base vocabulary with ids
    /// beyond `vocab_size`, of a preset's context lowered to the checkpoint's, and of
    /// `architectures` of another registered family than `model_type`; configs that named no
    /// rope scaling type, a linear one without a factor, or sliding layers without a window by
    /// `max_window_layers` are refused, and `torch_dtype` `auto` is read; 0.8.3: the same bytes as 0.8.2; exit statuses, signals,
    /// the Hugging Face cache and the farm changed, docs/FARM.md and README say how; 0.8.2: a
    /// compiled artifact's `tool.version` is its
    /// compiler's, its bundle's is `compiled.portable.tool_version`; an uneven last group of one
    /// channel is warned of as "1 channel"; 0.8.1: a manifest records nothing its build key leaves out:
    /// the no-tokenizer warning no longer names the checkpoint folder, and a compiled artifact's
    /// `compiled.portable.name` is its bundle's name as exported, `<model.name>.aimodel`, not the
    /// folder it was compiled from, and a verdict's warning says what it means on its platform (a Mac
    /// swaps, an iOS app is killed at load); 0.8.0: every verdict records `ahead_of_time`, and a plan's
    /// verdicts cover the devices offered no ahead-of-time compilation too; a plan records its
    /// calibration text and warns of its verdicts; 0.7.4: the prefill chunk of the working-memory figures is
    /// at most the context (it was 128 at shorter contexts), and a Qwen3-MoE graph's
    /// `intermediate_size` is its experts' width, which those figures now take; 0.7.3: the shipped compression configs keep a mixture of
    /// experts' router in the compute precision; an export of real weights without tokenizer files,
    /// or whose tokenizer adds a token beyond `vocab_size`, records a warning; `architectures` without a language-model head are refused; 0.7.2:
    /// `rope_parameters`, where transformers 5 writes the
    /// rotary base frequency, reaches the graph, which took 10,000 when `rope_theta` was absent;
    /// a partial rotation, an activation other than silu and Gemma 3's `sliding_window_pattern` are
    /// refused; a bundle carries its checkpoint's `config.json`; qwen2, qwen3 and mistral configs
    /// are read with their transformers classes' defaults (`use_sliding_window` false,
    /// `max_window_layers` 28, `sliding_window` 4,096, KV heads, qwen3's `head_dim` of 128) and
    /// biases (qwen2 always, mistral never), and refuse a scaling other than linear; mixtral, phi3
    /// and qwen3_moe configs too (`rms_norm_eps` 1e-5 for mixtral and phi3, mixtral's `rope_theta`
    /// of 1,000,000, 8 and 4 KV heads, mixtral's and phi3's window on every layer and none when
    /// absent, qwen3_moe's only with `use_sliding_window`; no biases for mixtral and phi3, qwen3_moe's
    /// `attention_bias` refused; phi3 refuses every scaling), qwen3_moe experts are 768 wide
    /// without `moe_intermediate_size`, and layers without experts are refused; gemma3_text does
    /// not export, its computation being beyond graph.json; the full
    /// refinement (the thorough search, per-tensor LUTs of
    /// large tensors) polishes until it settles instead of for 8 rounds at most; 0.7.1: a group holding values far larger than its others
    /// (near ±65,504) gets the LUT its small values call for, and a tensor its LUTs reproduce
    /// exactly records no error (SQNR null); 0.7.0: the iOS token embedding is int8 under
    /// `--compression none` too and kept in the compute precision, never palettised, under
    /// `--disable-embedding-quantization-ios`; an attention window applies only when every layer
    /// slides by `layer_types` or `max_window_layers`; 0.6.0: the shipped configs' `*.bias` rule is optional, so
    /// families without biases lose that warning from their manifests, a LUT entry of zero is
    /// always +0, linear RoPE tables divide positions, build keys sample every tensor, and source
    /// files carry their fingerprints; 0.5.0: manifests gain `conversion`, a plan's forecast of the export's
    /// memory, null in bundles; 0.4.0: the standard palette search no longer polishes small
    /// groups and makes one swap round, which changes most grouped LUTs).
    public static let current = "0.8.4"
}
