import Foundation

/// Peak memory of converting a plan, from the way an export runs (BundleWriter): tensor i is
/// compressed while the tensors after it are read ahead (``TensorPrefetcher``) and the ones
/// before it wait to be written (``TensorWriteQueue``), so the peak is the largest sum, over
/// the tensors, of those three plus what the process holds throughout.
public struct ConversionMemoryEstimate: Equatable, Sendable {
    /// The process throughout: runtime and code (22 MiB for the process alone), plan,
    /// manifest, read buffers (256 KiB per read), and what the allocator keeps between tensors
    /// (freed buffers the next, differently sized ones cannot reuse): exports of Qwen2.5-1.5B
    /// peaked up to 62 MiB above the rest of this estimate.
    public static let fixedOverheadBytes = 96 << 20
    /// The weights file's two write buffers (OutputFile).
    public static let outputBufferBytes = 8 << 20
    /// One palettising worker's scratch: a float16 histogram of 65,536 patterns (about 39 bytes
    /// each across its tables) and k-means buffers; kept for the next tensor once made.
    public static let paletteWorkerBytes = 3 << 20
    /// What each tensor holds throughout: its entries in the plan, the layout and the manifest,
    /// and its share of the manifest's JSON at the end. Exports of 22,000 and 44,000 small
    /// tensors peaked about 6 KB per tensor above the rest of this estimate.
    public static let bytesPerTensor = 8 << 10

    /// The tensor being compressed at the peak.
    public let peakTensor: String
    /// That tensor's working buffers.
    public let tensorBytes: Int
    /// The peak: fixed overhead, output buffer, palette scratch, and at the worst tensor its
    /// working buffers, the tensors read ahead of it and those waiting to be written.
    public let totalBytes: Int
}

/// How the tensors of an export are read, which decides what each holds in memory.
public struct ConversionMemoryConditions {
    /// Threads that compress.
    public var workers = SystemResources.activeCores
    /// The 16-bit patterns the source reads a tensor as (``WeightSource/storedPatterns(_:)``):
    /// they are then counted, and a per-tensor int8 tensor, a palette per grouped channel or
    /// a large tensor kept in float16 is read a block at a time rather than held
    /// (``TensorEncoder/streams(_:precision:calibrated:)``). Nil: read whole as float16.
    public var storedPatterns: (TensorSpec) -> SourcePatterns? = { _ in nil }
    /// Whether a tensor's stored values can exceed float16's range (``WeightSource/mayExceedFloat16(_:)``);
    /// nil: those read as bfloat16 patterns.
    public var mayExceedFloat16: ((TensorSpec) -> Bool)?
    /// `--allow-clamp`: a bfloat16 or float32 tensor with values beyond float16's range is then converted
    /// whole and compressed (without it, such a tensor is refused).
    public var allowClamp = false
    /// Calibrated: palettised tensors take the tiled palettiser, which holds more per weight.
    public var calibrated = false

    /// The default conditions: float16 read whole, no clamping, uncalibrated, every core.
    public init() {}

    /// The conditions of an export reading `source`.
    public init(source: WeightSource, allowClamp: Bool, calibrated: Bool) {
        storedPatterns = source.storedPatterns
        mayExceedFloat16 = source.mayExceedFloat16
        self.allowClamp = allowClamp
        self.calibrated = calibrated
    }

    /// The conditions of an export whose weights are stored as a config's `torch_dtype` says
    /// (weights not on the machine yet): bfloat16 and float16 read as stored, float32
    /// converted to float16 patterns as it is read, any other dtype converted whole.
    public init(torchDType: String?, allowClamp: Bool, calibrated: Bool) {
        let dtype = TensorDType(torchDType: torchDType)
        storedPatterns = { _ in dtype?.compressionPatterns }
        mayExceedFloat16 = { _ in dtype?.mayExceedFloat16 ?? false }
        self.allowClamp = allowClamp
        self.calibrated = calibrated
    }
}

extension ExportPlan {
    /// What converting this plan needs at its peak (docs: README "Resource limits").
    public func conversionMemory(_ conditions: ConversionMemoryConditions = ConversionMemoryConditions())
        -> ConversionMemoryEstimate
    {
        let workers = max(1, conditions.workers)
        let costs = tensors.map { TensorMemory($0, precision: precision, conditions: conditions, workers: workers) }
        let palettizes = tensors.contains { $0.scheme.mode == .palettize }
        let base = [
            ConversionMemoryEstimate.fixedOverheadBytes, ConversionMemoryEstimate.outputBufferBytes,
            palettizes ? [workers, ConversionMemoryEstimate.paletteWorkerBytes].saturatingProduct : 0,
            [tensors.count, ConversionMemoryEstimate.bytesPerTensor].saturatingProduct,
        ].saturatingSum
        let peak = Self.peak(of: costs)
        return ConversionMemoryEstimate(
            peakTensor: tensors.isEmpty ? "" : tensors[peak.index].spec.name,
            tensorBytes: costs.isEmpty ? 0 : costs[peak.index].working, totalBytes: [base, peak.bytes].saturatingSum)
    }

    /// The tensor (by index) at whose compression the pipeline holds the most, and how much:
    /// its working buffers, the tensors read ahead of it and those waiting to be written.
    ///
    /// Both sides are windows that slide with the tensor, each one's sums kept by what enters
    /// and leaves it: rescanning them per tensor made the plan of 44,000 small tensors, whose
    /// windows hold thousands, take seconds. The sums are in `Double`: exact for any real model
    /// (below 2⁵³ bytes), and without overflow for the absurd shapes a hostile config gives,
    /// whose totals saturate.
    static func peak(of costs: [TensorMemory]) -> (index: Int, bytes: Int) {
        var peak = (index: 0, bytes: 0)
        // Read ahead while tensor `index` is compressed (TensorPrefetcher): the next one always,
        // then more while the float16 size from the next one on stays within the look-ahead;
        // loads started for an earlier tensor are still held: up to the furthest started.
        var lookAhead = TensorWindow()
        var readFrontier = -1
        var loadedAhead = 0.0  // Σ loaded over index+1...readFrontier
        // Waiting to be written: the one being written and those queued behind it, whose
        // stored bytes stay within the write queue's limit (TensorWriteQueue).
        var writeStart = 0
        var queuedStored = 0.0  // Σ stored over writeStart..<index
        var queuedHeld = 0.0  // Σ held over the same
        for index in costs.indices {
            lookAhead.slide(
                to: index + 1, count: costs.count, limit: TensorPrefetcher.lookAheadBytes, firstAlways: true,
                size: { costs[$0].lookAheadBytes })
            if index <= readFrontier { loadedAhead -= Double(costs[index].loaded) }
            while readFrontier < lookAhead.end - 1 {
                readFrontier += 1
                if readFrontier > index { loadedAhead += Double(costs[readFrontier].loaded) }
            }
            if index > 0 {
                queuedStored += Double(costs[index - 1].stored)
                queuedHeld += Double(costs[index - 1].held)
                let limit = Double(TensorWriteQueue.pendingByteLimit)
                while writeStart < index - 1, queuedStored - Double(costs[writeStart].stored) > limit {
                    queuedStored -= Double(costs[writeStart].stored)
                    queuedHeld -= Double(costs[writeStart].held)
                    writeStart += 1
                }
            }
            let bytes = [costs[index].working, saturating(loadedAhead), saturating(queuedHeld)].saturatingSum
            if bytes > peak.bytes { peak = (index, bytes) }
        }
        return peak
    }

    /// A sum of byte counts as an `Int`, `Int.max` past it.
    private static func saturating(_ sum: Double) -> Int { sum >= 0x1p63 ? Int.max : Int(max(0, sum)) }

    /// Bytes the bundle will take on disk: the weights file (exact), the files it copies
    /// (`config.json` and the tokenizer's), and an allowance for `graph.json` and
    /// `manifest.json` (a few KiB, about 1 KiB per tensor).
    public func estimatedBundleBytes(copiedFileBytes: Int) -> Int {
        [estimatedWeightsBytes, copiedFileBytes, 64 << 10, [tensors.count, 1 << 10].saturatingProduct].saturatingSum
    }
}

/// One tensor's memory as TensorEncoder handles it (docs: README "Resource limits").
struct TensorMemory {
    /// Its values as read ahead (``LoadedValues``): none for a streamed tensor.
    let loaded: Int
    /// Its float16 size, what the read-ahead budget counts.
    let lookAheadBytes: Int
    /// Peak while it is compressed, its read values included.
    let working: Int
    /// What its encoded parts hold until written.
    let held: Int
    /// Its stored bytes, what the write queue counts.
    let stored: Int

    init(loaded: Int, lookAheadBytes: Int, working: Int, held: Int, stored: Int) {
        (self.loaded, self.lookAheadBytes, self.working, self.held, self.stored) = (
            loaded, lookAheadBytes, working, held, stored
        )
    }

    init(_ tensor: PlannedTensor, precision: ComputePrecision, conditions: ConversionMemoryConditions, workers: Int) {
        let elements = tensor.spec.shape.saturatingProduct
        let half = [elements, 2].saturatingProduct
        let scheme = tensor.scheme
        let kind = conditions.storedPatterns(tensor.spec)
        let streams =
            kind != nil && TensorEncoder.streams(tensor, precision: precision, calibrated: conditions.calibrated)
        // A bfloat16 or float32 tensor whose values float16 cannot hold is converted whole after all.
        let exceeds = conditions.mayExceedFloat16?(tensor.spec) ?? (kind == .bfloat16)
        let clampedCopy = kind != nil && exceeds && conditions.allowClamp ? half : 0
        lookAheadBytes = half
        stored = tensor.storedBytes
        switch scheme.mode {
        case .keep:
            switch precision {
            case .float16 where streams:
                // Checked, then converted as written, a block at a time (TensorEncoder.float16Blocks).
                let block = [LinearQuantizer.streamBlockElements, 2].saturatingProduct
                loaded = 0
                working = [block, clampedCopy].saturatingSum
                held = [[block, 2].saturatingProduct, clampedCopy].saturatingSum
            case .float16:
                (loaded, working, held) = (half, half, half)
            case .float32:
                let single = [elements, 4].saturatingProduct
                (loaded, working, held) = (single, single, single)
            case .bfloat16:
                let single = [elements, 4].saturatingProduct
                (loaded, working, held) = (single, [single, half].saturatingSum, half)
            }
        case .palettize:
            let output = tensor.storedBytes
            let plain = TensorEncoder.isPlainPalette(tensor, calibrated: conditions.calibrated)
            held = output
            if streams {
                // Each worker reads a few whole groups at a time into a buffer of its own
                // (Palettizer.palettize(streamedRows:)); LUTs and indices go straight to the tensor's.
                let (rows, columns) = tensor.spec.matrixShape
                let groupElements = [min(rows, max(1, scheme.groupSize ?? rows)), columns].saturatingProduct
                let batch = Palettizer.streamReadGroups(
                    groupElements: groupElements, readElements: Palettizer.streamReadElements)
                let buffer = [min(elements, [batch, groupElements].saturatingProduct), 2].saturatingProduct
                loaded = 0
                working = [output, [workers, buffer].saturatingProduct, clampedCopy].saturatingSum
            } else if plain {
                // The stored patterns, or the float16 values, and the output; once more the
                // output's size for what the allocator keeps of the tensors before (a 1 GB
                // tensor at 8 bits per tensor peaked up to 5 % above the estimate without it).
                loaded = half
                working = [half, output, output, clampedCopy].saturatingSum
            } else {
                loaded = half
                // BlockPalettizer: outlier marks and an index byte per weight, each worker's
                // importance per float16 pattern (its palette workspace is the palettisers'
                // scratch), and per outlier a Double score in the selection's heap and at most
                // three element numbers (above the threshold, at it, chosen).
                let tile = [PaletteWorkspace.patternCount, MemoryLayout<Double>.stride, workers].saturatingProduct
                let outliers = [scheme.outlierCount(elements: elements), 20].saturatingProduct
                working = [half, clampedCopy, [elements, 2].saturatingProduct, output, tile, outliers].saturatingSum
            }
        case .linear:
            let rows = tensor.spec.matrixShape.rows
            if streams {
                // Streamed (LinearQuantizer.int8PerTensorCodebook): each worker counts a block,
                // and the writer codes a block at a time (patterns and codes).
                let block = LinearQuantizer.streamBlockElements
                let counting = [workers, [block * 2, 8 << 16].saturatingSum].saturatingProduct
                loaded = 0
                held = [block * 3, 1 << 16].saturatingSum
                working = [clampedCopy == 0 ? 0 : [half, elements].saturatingSum, counting].saturatingSum
            } else {
                let scales = [scheme.granularity == .perChannel ? rows : 1, 4].saturatingProduct
                loaded = half
                held = [elements, scales].saturatingSum
                working = [half, elements, scales].saturatingSum
            }
        }
    }
}
