/// One region of a compile plan: consecutive layers (or the embedding, or the head) that the
/// device compiles as one Neural Engine program, with its weights laid out contiguously.
public struct PlannedRegion: Equatable, Sendable {
    /// What a region holds.
    public enum Kind: String, Sendable {
        /// The token embedding (and anything else before the first layer).
        case embedding
        /// Consecutive decoder layers.
        case layers
        /// The final norm and the output head (a tied head gets its own copy of the embedding).
        case head
    }

    /// A tensor placed in the region.
    public struct Placement: Equatable, Sendable {
        /// Index of the tensor in the subject (and in the manifest's `tensors`).
        public let tensorIndex: Int
        /// The tensor's name.
        public let name: String
        /// Its parts at their offsets in the compiled `weights.bin`.
        public let parts: [WeightsFileLayout.Part]
        /// The same parts at their offsets in the portable `weights.bin`.
        public let sourceParts: [WeightsFileLayout.Part]
    }

    /// Position in execution order.
    public let index: Int
    /// What it holds.
    public let kind: Kind
    /// Its decoder layers, nil for embedding and head.
    public let layers: ClosedRange<Int>?
    /// Its tensors in execution order.
    public let placements: [Placement]
    /// Offset in the compiled `weights.bin` (a multiple of the page size).
    public let offset: Int
    /// Its extent in `weights.bin`, padded to the page size.
    public let bytes: Int
    /// Bytes of its parts without padding.
    public let storedBytes: Int
    /// KV-cache bytes of its layers.
    public let kvCacheBytes: Int
    /// Peak working memory while it runs.
    public let workingBytes: Int
    /// The device's per-region budget.
    public let budgetBytes: Int

    /// What the Neural Engine must hold to compile and run it: weights, KV state, working buffers.
    public var footprintBytes: Int { bytes + kvCacheBytes + workingBytes }
    /// Whether the footprint fits the budget.
    public var withinBudget: Bool { footprintBytes <= budgetBytes }
    /// `embedding`, `layers 0–7` or `head`.
    public var label: String {
        guard let layers else { return kind.rawValue }
        return layers.count == 1 ? "layer \(layers.lowerBound)" : "layers \(layers.lowerBound)–\(layers.upperBound)"
    }
}

/// The memory a compiled artifact needs on the device.
public struct CompiledMemoryPlan: Equatable, Sendable {
    /// The compiled `weights.bin` (memory-mapped, resident).
    public let weightsBytes: Int
    /// The KV cache as laid out (page-aligned buffers).
    public let kvCacheBytes: Int
    /// Working memory of the largest region.
    public let workingBytes: Int
    /// The precomputed RoPE tables.
    public let tablesBytes: Int
    /// The region whose working memory is the peak.
    public let peakRegion: Int

    /// The sum.
    public var totalBytes: Int { weightsBytes + kvCacheBytes + workingBytes + tablesBytes }
}

/// Everything compiling a subject for one device architecture will produce, known before any
/// weight is read: the regions, the compiled weights layout, the memory plan and the verdict.
/// `exporter plan` shows its verdict; `exporter compile` writes it.
public struct CompilePlan: Sendable {
    /// Alignment of every part inside a region.
    public static let partAlignment = ExportPlan.blobAlignment
    /// Fixed bytes of the compiled weights header before the region table.
    public static let headerFixedBytes = 64
    /// Bytes of one region-table entry (u64 offset, u64 bytes).
    public static let regionEntryBytes = 16

    /// The model.
    public let subject: CompileSubject
    /// The device architecture.
    public let device: DeviceArchitecture
    /// The regions, in execution order; every layer in exactly one.
    public let regions: [PlannedRegion]
    /// Bytes of the header (fixed part and region table, padded to the page size).
    public let headerBytes: Int
    /// Bytes of the compiled `weights.bin`.
    public let weightsFileBytes: Int
    /// The KV cache layout.
    public let kvCache: KVCacheLayout
    /// The memory plan.
    public let memory: CompiledMemoryPlan

    /// Bytes of the RoPE cos and sin tables (float32, `[context, head_dim / 2]` each).
    public static func ropeTableBytes(_ graph: GraphDescription) -> Int {
        2 * graph.contextLength * (graph.attention.headDim / 2) * 4
    }

    /// Plans the compile of `subject` for `device`.
    public init(subject: CompileSubject, device: DeviceArchitecture) {
        self.subject = subject
        self.device = device
        let graph = subject.graph
        let page = device.pageSize
        kvCache = KVCacheLayout(graph: graph, pageSize: page)
        let chunk = subject.prefillChunk
        let layerWorking =
            4 * chunk * graph.hiddenSize * 4 + 2 * chunk * graph.intermediateSize * 4
            + graph.attention.heads * chunk * graph.contextLength * 4
        let embeddingWorking = chunk * graph.hiddenSize * 4
        let headWorking = chunk * graph.hiddenSize * 4 + graph.vocabularySize * 4

        // Units in execution order: what precedes the layers, each layer, what follows them.
        let tensors = subject.tensors
        var leading: [Int] = []
        var layerUnits: [(layer: Int, tensors: [Int])] = []
        var trailing: [Int] = []
        for (index, tensor) in tensors.enumerated() {
            if let layer = tensor.layer {
                if let last = layerUnits.last, last.layer == layer {
                    layerUnits[layerUnits.count - 1].tensors.append(index)
                } else {
                    layerUnits.append((layer, [index]))
                }
            } else if layerUnits.isEmpty {
                leading.append(index)
            } else {
                trailing.append(index)
            }
        }
        // A tied head multiplies by the embedding matrix: the head region carries its own copy,
        // so that every region's weights are contiguous.
        if graph.tieWordEmbeddings, !tensors.contains(where: { $0.role == .head }) {
            trailing += tensors.indices.filter { tensors[$0].role == .embedding }
        }

        // Extent of a region holding `members`, starting at a page boundary.
        func extent(_ members: [Int]) -> (stored: Int, bytes: Int) {
            var offset = 0
            var stored = 0
            for index in members {
                for part in tensors[index].parts {
                    offset =
                        (offset + CompilePlan.partAlignment - 1) / CompilePlan.partAlignment * CompilePlan.partAlignment
                    offset += part.bytes
                    stored += part.bytes
                }
            }
            return (stored, (offset + page - 1) / page * page)
        }
        let kvPerLayer = 2 * kvCache.slotBytes
        var drafts: [(kind: PlannedRegion.Kind, layers: ClosedRange<Int>?, members: [Int], kv: Int, working: Int)] = []
        if !leading.isEmpty { drafts.append((.embedding, nil, leading, 0, embeddingWorking)) }
        // Greedy: consecutive layers while the footprint stays within budget; a layer alone over
        // budget is a region of its own, flagged, never split.
        var current: (first: Int, last: Int, members: [Int])?
        for unit in layerUnits {
            if let open = current {
                let members = open.members + unit.tensors
                let layerCount = open.last - open.first + 2
                if extent(members).bytes + kvPerLayer * layerCount + layerWorking <= device.regionBudgetBytes {
                    current = (open.first, unit.layer, members)
                    continue
                }
                drafts.append(
                    (
                        .layers, open.first...open.last, open.members, kvPerLayer * (open.last - open.first + 1),
                        layerWorking
                    ))
            }
            current = (unit.layer, unit.layer, unit.tensors)
        }
        if let open = current {
            drafts.append(
                (.layers, open.first...open.last, open.members, kvPerLayer * (open.last - open.first + 1), layerWorking)
            )
        }
        if !trailing.isEmpty { drafts.append((.head, nil, trailing, 0, headWorking)) }

        headerBytes =
            (CompilePlan.headerFixedBytes + CompilePlan.regionEntryBytes * drafts.count + page - 1) / page * page
        var offset = headerBytes
        var regions: [PlannedRegion] = []
        for (index, draft) in drafts.enumerated() {
            var cursor = offset
            var placements: [PlannedRegion.Placement] = []
            for member in draft.members {
                let source = tensors[member].parts
                let placed = source.map { part -> WeightsFileLayout.Part in
                    cursor =
                        (cursor + CompilePlan.partAlignment - 1) / CompilePlan.partAlignment * CompilePlan.partAlignment
                    defer { cursor += part.bytes }
                    return WeightsFileLayout.Part(kind: part.kind, dtype: part.dtype, offset: cursor, bytes: part.bytes)
                }
                placements.append(
                    .init(tensorIndex: member, name: tensors[member].name, parts: placed, sourceParts: source))
            }
            let size = extent(draft.members)
            regions.append(
                PlannedRegion(
                    index: index, kind: draft.kind, layers: draft.layers, placements: placements, offset: offset,
                    bytes: size.bytes, storedBytes: size.stored, kvCacheBytes: draft.kv, workingBytes: draft.working,
                    budgetBytes: device.regionBudgetBytes))
            offset += size.bytes
        }
        self.regions = regions
        weightsFileBytes = offset
        let peak = regions.max {
            $0.workingBytes < $1.workingBytes || ($0.workingBytes == $1.workingBytes && $0.index > $1.index)
        }
        memory = CompiledMemoryPlan(
            weightsBytes: offset, kvCacheBytes: kvCache.totalBytes, workingBytes: peak?.workingBytes ?? 0,
            tablesBytes: CompilePlan.ropeTableBytes(graph), peakRegion: peak?.index ?? 0)
    }

    /// The regions over the Neural Engine budget.
    public var regionsOverBudget: [PlannedRegion] { regions.filter { !$0.withinBudget } }

    /// The verdict: memory against the device's limits, regions against its Neural Engine budget.
    public var verdict: Manifest.Verdict {
        let total = memory.totalBytes
        let memoryVerdict = MemoryVerdict(
            totalBytes: total, appMemoryLimitBytes: device.appMemoryLimitBytes,
            increasedMemoryLimitBytes: device.increasedMemoryLimitBytes)
        let over = regionsOverBudget.map(\.index)
        return Manifest.Verdict(
            architecture: device.id, platform: device.platform.rawValue, chip: device.chip, memory: memoryVerdict,
            totalBytes: total, appMemoryLimitBytes: device.appMemoryLimitBytes,
            increasedMemoryLimitBytes: device.increasedMemoryLimitBytes,
            entitlements: memoryVerdict == .needsEntitlement ? device.entitlements : [],
            neuralEngine: over.isEmpty ? .allRegionsWithinBudget : .regionsOverBudget,
            regionBudgetBytes: device.regionBudgetBytes, regions: regions.count, regionsOverBudget: over,
            aheadOfTime: device.aheadOfTime)
    }

    /// The compiled weights header: magic `EXREGION`, version, page size, part alignment, region
    /// count, file size, then one (offset, bytes) entry per region; zero-padded to `headerBytes`.
    public func header() -> [UInt8] {
        var bytes = CompilePlan.magic
        bytes += withUnsafeBytes(of: CompilePlan.formatVersion.littleEndian, Array.init)
        bytes += withUnsafeBytes(of: UInt32(device.pageSize).littleEndian, Array.init)
        bytes += withUnsafeBytes(of: UInt32(CompilePlan.partAlignment).littleEndian, Array.init)
        bytes += withUnsafeBytes(of: UInt32(regions.count).littleEndian, Array.init)
        bytes += withUnsafeBytes(of: UInt64(weightsFileBytes).littleEndian, Array.init)
        bytes += [UInt8](repeating: 0, count: CompilePlan.headerFixedBytes - bytes.count)
        for region in regions {
            bytes += withUnsafeBytes(of: UInt64(region.offset).littleEndian, Array.init)
            bytes += withUnsafeBytes(of: UInt64(region.bytes).littleEndian, Array.init)
        }
        bytes += [UInt8](repeating: 0, count: headerBytes - bytes.count)
        return bytes
    }

    /// The compiled weights file's magic: ASCII `EXREGION`.
    public static let magic: [UInt8] = Array("EXREGION".utf8)
    /// Its format version.
    public static let formatVersion: UInt32 = 1
}

extension CompilePlan {
    /// The verdicts of `subject` on every architecture of every platform whose devices load its
    /// bundle (iOS bundles: iOS and visionOS; macOS bundles: macOS), in table order: those
    /// offered ahead-of-time compilation as compiled, the others as they specialise the portable
    /// bundle at first launch, to the same regions and memory.
    public static func verdicts(for subject: CompileSubject, table: DeviceTable) -> [Manifest.Verdict] {
        DevicePlatform.allCases.filter { $0.bundlePlatform == subject.platform }.flatMap { platform in
            table.devices.filter { $0.platform == platform }.map { CompilePlan(subject: subject, device: $0).verdict }
        }
    }
}
