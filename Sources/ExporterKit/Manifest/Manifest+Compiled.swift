/// Whether a model fits a device's app memory limit.
public enum MemoryVerdict: String, Codable, Equatable, Sendable {
    /// Within the default app memory limit.
    case fits
    /// Over the default limit, within the limit the `increased-memory-limit` entitlement grants.
    case needsEntitlement = "needs-entitlement"
    /// Over every limit the device has.
    case doesNotFit = "does-not-fit"

    /// The verdict on `totalBytes` against a default limit and the raised one, if any: each limit inclusive.
    public init(totalBytes: Int, appMemoryLimitBytes: Int, increasedMemoryLimitBytes: Int?) {
        if totalBytes <= appMemoryLimitBytes {
            self = .fits
        } else if let increased = increasedMemoryLimitBytes, totalBytes <= increased {
            self = .needsEntitlement
        } else {
            self = .doesNotFit
        }
    }
}

/// Whether every region fits the Neural Engine's compile budget.
public enum NeuralEngineVerdict: String, Codable, Equatable, Sendable {
    /// Every region compiles for the Neural Engine.
    case allRegionsWithinBudget = "all-regions-within-budget"
    /// Some regions are over budget: on device they fall back to a slower compute unit.
    case regionsOverBudget = "regions-over-budget"
}

extension Manifest {
    /// A model's verdict on one device architecture (docs/MANIFEST.md, `verdicts[]` and `compiled.verdict`).
    public struct Verdict: Codable, Equatable, Sendable {
        /// The architecture id (`h17p`).
        public var architecture: String
        /// `iOS`, `macOS` or `visionOS`.
        public var platform: String
        /// The chip (`A18`).
        public var chip: String
        /// `fits`, `needs-entitlement` or `does-not-fit`.
        public var memory: MemoryVerdict
        /// The memory plan's total: weights, KV cache, peak working memory, static tables.
        public var totalBytes: Int
        /// The default app memory limit.
        public var appMemoryLimitBytes: Int
        /// The limit with the entitlement, or null where none raises it.
        @NullEncoded public var increasedMemoryLimitBytes: Int?
        /// The entitlements to add: the device's list when the verdict is `needs-entitlement`, else empty.
        public var entitlements: [String]
        /// Whether every region fits the Neural Engine budget.
        public var neuralEngine: NeuralEngineVerdict
        /// The Neural Engine's per-region budget.
        public var regionBudgetBytes: Int
        /// Regions in all.
        public var regions: Int
        /// Indices of the regions over budget (they fall back to a slower compute unit on device).
        public var regionsOverBudget: [Int]
        /// Whether the device is offered ahead-of-time compilation; false for one that loads the
        /// portable bundle only, specialised on it at first launch (the A15 and A16).
        public var aheadOfTime: Bool = true

        enum CodingKeys: String, CodingKey {
            case architecture, platform, chip, memory, entitlements, regions
            case totalBytes = "total_bytes"
            case appMemoryLimitBytes = "app_memory_limit_bytes"
            case increasedMemoryLimitBytes = "increased_memory_limit_bytes"
            case neuralEngine = "neural_engine"
            case regionBudgetBytes = "region_budget_bytes"
            case regionsOverBudget = "regions_over_budget"
            case aheadOfTime = "ahead_of_time"
        }
    }

    /// What compiling for one device architecture made (`compiled` of a `.aimodelc` manifest).
    public struct Compiled: Codable, Equatable, Sendable {
        /// The architecture id, the `<arch>` of `<Name>.<arch>.aimodelc`.
        public var architecture: String
        /// `iOS`, `macOS` or `visionOS`.
        public var platform: String
        /// The chip.
        public var chip: String
        /// Example products.
        public var products: [String]
        /// The minimum deployment version (`27.0`).
        public var minDeploymentVersion: String
        /// The device page size: every region starts at a multiple of it.
        public var pageSize: Int
        /// The regions, in execution order.
        public var regions: [Region]
        /// The memory plan.
        public var memory: CompiledMemory
        /// The verdict.
        public var verdict: Verdict
        /// The portable bundle compiled.
        public var portable: Portable
        /// Bytes of this artifact's files minus those of the portable bundle (`sizes.bundle_bytes` of each).
        public var sizeDeltaBytes: Int

        enum CodingKeys: String, CodingKey {
            case architecture, platform, chip, products, regions, memory, verdict, portable
            case minDeploymentVersion = "min_deployment_version"
            case pageSize = "page_size"
            case sizeDeltaBytes = "size_delta_bytes"
        }
    }

    /// One region: consecutive layers (or the embedding, or the head) compiled as one Neural Engine program.
    public struct Region: Codable, Equatable, Sendable {
        /// Position in execution order, from 0.
        public var index: Int
        /// `embedding`, `layers` or `head`.
        public var kind: String
        /// First decoder layer, null for embedding and head.
        @NullEncoded public var firstLayer: Int?
        /// Last decoder layer (inclusive), null for embedding and head.
        @NullEncoded public var lastLayer: Int?
        /// Offset of the region in `weights.bin` (a multiple of the page size).
        public var offset: Int
        /// Bytes of the region in `weights.bin`, padded to the page size.
        public var bytes: Int
        /// Bytes of its parts, without padding.
        public var storedBytes: Int
        /// KV-cache bytes of its layers.
        public var kvCacheBytes: Int
        /// Peak working memory while it runs.
        public var workingBytes: Int
        /// `bytes + kv_cache_bytes + working_bytes`: what the Neural Engine must hold to compile it.
        public var footprintBytes: Int
        /// The device's per-region budget.
        public var budgetBytes: Int
        /// Whether the footprint is within the budget.
        public var withinBudget: Bool
        /// Its tensors, in the order it executes them, with their parts in `weights.bin`.
        public var tensors: [RegionTensor]

        enum CodingKeys: String, CodingKey {
            case index, kind, offset, bytes, tensors
            case firstLayer = "first_layer"
            case lastLayer = "last_layer"
            case storedBytes = "stored_bytes"
            case kvCacheBytes = "kv_cache_bytes"
            case workingBytes = "working_bytes"
            case footprintBytes = "footprint_bytes"
            case budgetBytes = "budget_bytes"
            case withinBudget = "within_budget"
        }
    }

    /// A tensor placed in a region.
    public struct RegionTensor: Codable, Equatable, Sendable {
        /// The tensor's name (a tied head's copy of the embedding keeps the embedding's name).
        public var name: String
        /// Its parts in `weights.bin`.
        public var parts: [Part]
    }

    /// The memory plan of a compiled artifact.
    public struct CompiledMemory: Codable, Equatable, Sendable {
        /// `weights.bin`, memory-mapped and resident.
        public var weightsBytes: Int
        /// The KV cache as laid out in `static.json` (page-aligned buffers).
        public var kvCacheBytes: Int
        /// Working memory of the largest region.
        public var workingBytes: Int
        /// Precomputed tables (RoPE cos and sin).
        public var tablesBytes: Int
        /// The sum.
        public var totalBytes: Int
        /// The region whose working memory is the peak.
        public var peakRegion: Int

        enum CodingKeys: String, CodingKey {
            case weightsBytes = "weights_bytes"
            case kvCacheBytes = "kv_cache_bytes"
            case workingBytes = "working_bytes"
            case tablesBytes = "tables_bytes"
            case totalBytes = "total_bytes"
            case peakRegion = "peak_region"
        }
    }

    /// The portable bundle a compiled artifact was made from.
    public struct Portable: Codable, Equatable, Sendable {
        /// Its name as exported, `<model.name>.aimodel` (up to 0.8.0: the folder's name as given
        /// to the compile).
        public var name: String
        /// Its `sizes.bundle_bytes`.
        public var bytes: Int
        /// CRC-32 of its `manifest.json`.
        public var manifestCRC32: String
        /// Its `tool.version`: the version that exported it (the artifact's own `tool.version` is
        /// the compiler's). Nil in manifests before 0.8.2, whose `tool.version` was the bundle's.
        public var toolVersion: String?

        enum CodingKeys: String, CodingKey {
            case name, bytes
            case manifestCRC32 = "manifest_crc32"
            case toolVersion = "tool_version"
        }
    }
}

extension Manifest.Verdict {
    /// What the verdict's own figures contradict in it, if anything: its words must follow from
    /// its numbers, whatever the device table behind them said.
    public var contradiction: String? {
        let expected = MemoryVerdict(
            totalBytes: totalBytes, appMemoryLimitBytes: appMemoryLimitBytes,
            increasedMemoryLimitBytes: increasedMemoryLimitBytes)
        if memory != expected {
            let raised = increasedMemoryLimitBytes.map { " and \($0) with the entitlements" } ?? ""
            return
                "memory is \(memory.rawValue), but \(totalBytes) bytes against limits of \(appMemoryLimitBytes)\(raised) "
                + "is \(expected.rawValue)"
        }
        if (memory == .needsEntitlement) == entitlements.isEmpty {
            return memory == .needsEntitlement
                ? "memory is needs-entitlement, but entitlements names none to add"
                : "entitlements lists what to add, but memory is \(memory.rawValue)"
        }
        guard regionsOverBudget == Array(Set(regionsOverBudget)).sorted(),
            regionsOverBudget.allSatisfy({ (0..<regions).contains($0) })
        else {
            return "regions_over_budget must list distinct region indices below regions (\(regions)), in order"
        }
        if (neuralEngine == .regionsOverBudget) == regionsOverBudget.isEmpty {
            return
                "neural_engine is \(neuralEngine.rawValue), but regions_over_budget lists \(regionsOverBudget.count) regions"
        }
        return nil
    }

    /// What a plan tells the user of this verdict: the entitlements to add, a model that cannot
    /// load, regions that will not run on the Neural Engine. A compiled artifact says the same of
    /// its memory, and of its regions with their footprints.
    public var warnings: [String] {
        var warnings = memoryWarning.map { [$0] } ?? []
        if !regionsOverBudget.isEmpty {
            warnings.append(
                "\(device): regions \(regionsOverBudget.map(String.init).joined(separator: ", ")) of \(regions) are over "
                    + "the Neural Engine budget of \(regionBudgetBytes) bytes; they will run on a slower compute unit, and "
                    + "generation can be many times slower")
        }
        return warnings
    }

    /// What the memory verdict means on its platform, unless the model fits: an iPhone, iPad or
    /// Vision Pro kills an app over its limit; a Mac has no such limit, but swaps past it.
    public var memoryWarning: String? {
        let over = "\(device): \(totalBytes) bytes exceed"
        switch memory {
        case .fits: return nil
        case .needsEntitlement:
            return "\(over) the app memory limit of \(appMemoryLimitBytes); add the entitlements "
                + "\(entitlements.joined(separator: ", ")), or the app is killed at load"
        case .doesNotFit where platform == DevicePlatform.macOS.rawValue:
            return "\(over) the \(appMemoryLimitBytes) a model should stay within on this Mac (about the recommended "
                + "working set, 75% of its RAM): the system will swap, and generation slow down"
        case .doesNotFit:
            let raised =
                increasedMemoryLimitBytes.map { " and the raised limit of \($0)" } ?? ", which no entitlement raises"
            return "\(over) the app memory limit of \(appMemoryLimitBytes)\(raised): the app is killed at load"
        }
    }

    /// The device as warnings name it: one id (`h14g`) names both a Mac and Apple Vision Pro.
    private var device: String { "\(architecture) (\(platform))" }
}

extension Manifest.Verdict {
    /// Decodes a verdict; one written before `ahead_of_time` existed (0.7.4 and earlier, when
    /// verdicts covered eligible devices only) is of an ahead-of-time device.
    /// - Throws: `DecodingError` for a key missing or of the wrong type.
    public init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        architecture = try container.decode(String.self, forKey: .architecture)
        platform = try container.decode(String.self, forKey: .platform)
        chip = try container.decode(String.self, forKey: .chip)
        memory = try container.decode(MemoryVerdict.self, forKey: .memory)
        totalBytes = try container.decode(Int.self, forKey: .totalBytes)
        appMemoryLimitBytes = try container.decode(Int.self, forKey: .appMemoryLimitBytes)
        _increasedMemoryLimitBytes = try container.decode(NullEncoded<Int>.self, forKey: .increasedMemoryLimitBytes)
        entitlements = try container.decode([String].self, forKey: .entitlements)
        neuralEngine = try container.decode(NeuralEngineVerdict.self, forKey: .neuralEngine)
        regionBudgetBytes = try container.decode(Int.self, forKey: .regionBudgetBytes)
        regions = try container.decode(Int.self, forKey: .regions)
        regionsOverBudget = try container.decode([Int].self, forKey: .regionsOverBudget)
        // Absent is an older manifest; null is not a bool.
        aheadOfTime = container.contains(.aheadOfTime) ? try container.decode(Bool.self, forKey: .aheadOfTime) : true
    }
}
