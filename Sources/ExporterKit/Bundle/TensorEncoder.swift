import Dispatch

/// One part's payload, written when its turn comes: an array of plain values (written as
/// its bytes, without a copy), or bytes produced while they are written.
struct Blob {
    /// Bytes it holds.
    let byteCount: Int
    /// Appends the bytes to a file.
    let write: (OutputFile) throws -> Void

    init<Element>(_ values: [Element]) {
        byteCount = values.count * MemoryLayout<Element>.stride
        write = { file in try values.withUnsafeBytes { try file.write($0) } }
    }

    /// A payload of `byteCount` bytes that `write` produces as it appends them.
    init(byteCount: Int, write: @escaping (OutputFile) throws -> Void) {
        self.byteCount = byteCount
        self.write = write
    }
}

/// One tensor turned into its parts (docs/FORMAT.md), with its SQNR.
struct EncodedTensor {
    /// Part payloads in file order.
    let blobs: [Blob]
    /// SQNR in dB against the source weights; nil when stored exactly.
    let sqnr: Double?
}

/// A tensor's source values, in the precision its scheme starts from.
enum LoadedValues {
    /// Float16: what palettisation, int8 and float16 storage start from.
    case half([Float16])
    /// Float32: what float32 and bfloat16 storage start from.
    case single([Float])
    /// Stored bit patterns (bfloat16 or float16): what plain palettisation counts directly
    /// (``Palettizer/palettize(patterns:kind:rows:columns:spec:name:workerCount:clustering:)``).
    case patterns([UInt16], SourcePatterns)
    /// Nothing read yet: stored as 16-bit patterns, the tensor is compressed (or kept) while
    /// it is read, a block at a time, so that a large embedding (466 MB for Qwen2.5-1.5B in
    /// float16) is never held whole. Quantised to int8 per tensor, its codes are produced
    /// again block by block as they are written (``LinearQuantizer/int8PerTensorCodebook(streamedRows:columns:kind:workers:blockElements:read:)``);
    /// palettised per grouped channel, a few groups at a time by each worker
    /// (``Palettizer/palettize(streamedRows:columns:kind:spec:name:workerCount:clustering:readElements:read:)``);
    /// kept in float16, converted block by block as it is written.
    case stream(SourcePatterns)
}

/// Reads a tensor from a source (`load`) and stores it by its scheme (`compress`): kept,
/// palettised or quantised. The two halves are separate so the next tensor can be read
/// while this one is compressed.
struct TensorEncoder {
    let precision: ComputePrecision
    /// Activation energy per input column of each linear weight, from a calibration run;
    /// palettisation then weights its k-means by it. Empty: data-free.
    var importance: [String: [Float]] = [:]

    /// Reads `tensor` in the precision its scheme starts from.
    func load(_ tensor: PlannedTensor, from source: WeightSource) throws -> LoadedValues {
        let spec = tensor.spec
        if tensor.scheme.mode == .keep, precision != .float16 {
            return .single(
                try [Float](unsafeUninitializedCapacity: spec.elementCount) { buffer, count in
                    try source.readFloat(spec, into: buffer)
                    count = spec.elementCount
                })
        }
        if let kind = source.storedPatterns(spec) {
            if Self.streams(tensor, precision: precision, calibrated: importance[spec.name] != nil) {
                return .stream(kind)
            }
            if tensor.scheme.mode == .palettize && usesPlainPalette(tensor) {
                let patterns = try [UInt16](unsafeUninitializedCapacity: spec.elementCount) { buffer, count in
                    count = 0
                    try source.readStoredPatterns(spec, elements: 0..<spec.elementCount, into: buffer)
                    count = spec.elementCount
                }
                return .patterns(patterns, kind)
            }
        }
        return try loadHalf(tensor, from: source)
    }

    /// Reads `tensor` converted to float16 (what palettisation, int8 and float16 storage start from).
    private func loadHalf(_ tensor: PlannedTensor, from source: WeightSource) throws -> LoadedValues {
        let spec = tensor.spec
        // Not zero-filled first: the source writes every element, and zeroing half a
        // gigabyte of embedding costs as much as reading it.
        return .half(
            try [Float16](unsafeUninitializedCapacity: spec.elementCount) { buffer, count in
                try source.readFloat16(spec, into: buffer)
                count = spec.elementCount
            })
    }

    /// Tensors larger than this in float16 kept in float16 are converted a block at a time
    /// as they are written; smaller ones are converted by the reader, on every core.
    static let streamedTensorBytes = 64 << 20

    /// Whether a tensor stored as 16-bit patterns is handled while it is read, a block at a
    /// time (``LoadedValues/stream(_:)``): int8 per tensor, every plain palette per grouped
    /// channel, and large tensors kept in float16 (`precision`). Calibrated tensors
    /// (`calibrated`) take the tiled palettiser.
    ///
    /// Every grouped palette, not only large ones (whole, Qwen2.5-1.5B's embedding and its
    /// indices held 583 MB): each worker reads a few groups and counts and encodes them while
    /// they are still in its cache, where a whole tensor (27 MB for an MLP matrix) was
    /// fetched from memory twice; an export at group 8 then peaks at 85–107 MiB instead of
    /// 140–180, spends less time in the kernel (fewer fresh pages) and writes the same bytes.
    static func streams(_ tensor: PlannedTensor, precision: ComputePrecision, calibrated: Bool = false) -> Bool {
        let scheme = tensor.scheme
        switch scheme.mode {
        case .linear:
            return scheme.granularity != .perChannel
        case .palettize:
            return scheme.granularity == .perGroupedChannel && isPlainPalette(tensor, calibrated: calibrated)
        case .keep:
            return precision == .float16 && tensor.spec.elementCount > streamedTensorBytes / MemoryLayout<UInt16>.stride
        }
    }

    /// Whether the tensor is palettised with a LUT per group of rows and nothing else (no
    /// tiles, outliers or calibration): the ``Palettizer``'s job.
    func usesPlainPalette(_ tensor: PlannedTensor) -> Bool {
        Self.isPlainPalette(tensor, calibrated: importance[tensor.spec.name] != nil)
    }

    /// ``usesPlainPalette(_:)`` for a tensor calibrated or not, before an encoder exists.
    static func isPlainPalette(_ tensor: PlannedTensor, calibrated: Bool) -> Bool {
        tensor.scheme.granularity != .perBlock && tensor.scheme.outlierCount(elements: tensor.spec.elementCount) == 0
            && !calibrated
    }

    /// The palette of a plainly palettised tensor.
    private func paletteSpec(_ tensor: PlannedTensor) -> PaletteSpec {
        let granularity: PaletteGranularity =
            tensor.scheme.granularity == .perGroupedChannel
            ? .perGroupedChannel(groupSize: tensor.scheme.groupSize ?? tensor.spec.matrixShape.rows) : .perTensor
        return PaletteSpec(bits: tensor.scheme.bits ?? 4, granularity: granularity)
    }

    /// Stores loaded values by the tensor's scheme; `source` is read for a ``LoadedValues/stream(_:)``.
    func compress(_ tensor: PlannedTensor, _ loaded: LoadedValues, from source: WeightSource) throws -> EncodedTensor {
        let spec = tensor.spec
        let (rows, columns) = spec.matrixShape
        switch (tensor.scheme.mode, loaded) {
        case (.keep, .half(let values)):
            return EncodedTensor(blobs: [Blob(values)], sqnr: nil)
        case (.keep, .stream(let kind)):
            let read = { (elements: Range<Int>, buffer: UnsafeMutableBufferPointer<UInt16>) in
                try source.readStoredPatterns(spec, elements: elements, into: buffer)
            }
            guard
                try Self.float16Blocks(of: spec.elementCount, kind: kind, converting: false, read: read, body: { _ in })
            else {
                // Values float16 cannot hold: through the reader, which reports or clamps them.
                return try compress(tensor, try loadHalf(tensor, from: source), from: source)
            }
            // Converted on the write queue, a block at a time, as it is written.
            let values = Blob(byteCount: spec.elementCount * MemoryLayout<Float16>.stride) { file in
                let whole = try Self.float16Blocks(of: spec.elementCount, kind: kind, converting: true, read: read) {
                    try file.write(UnsafeRawBufferPointer($0))
                }
                guard whole else { throw CompressionError.changedWhileRead(tensor: spec.name) }
            }
            return EncodedTensor(blobs: [values], sqnr: nil)
        case (.keep, .single(let values)):
            if precision == .bfloat16 {
                return EncodedTensor(blobs: [Blob(values.map { PrecisionConversion.bfloat16Bits($0) })], sqnr: nil)
            }
            return EncodedTensor(blobs: [Blob(values)], sqnr: nil)
        case (.palettize, .half(let values)) where !usesPlainPalette(tensor):
            let scheme = tensor.scheme
            let groupRows = scheme.granularity == .perTensor ? rows : (scheme.groupSize ?? rows)
            let blockColumns = scheme.granularity == .perBlock ? (scheme.blockSize ?? columns) : columns
            let palette = try values.withUnsafeBufferPointer {
                try BlockPalettizer.palettize(
                    $0, rows: rows, columns: columns, bits: scheme.bits ?? 4, groupRows: groupRows,
                    blockColumns: blockColumns,
                    outlierCount: scheme.outlierCount(elements: spec.elementCount), importance: importance[spec.name],
                    name: spec.name, clustering: PaletteClustering(search: scheme.search))
            }
            var blobs = [Blob(palette.lut), Blob(palette.packedIndices)]
            if !palette.outlierIndices.isEmpty {
                blobs += [Blob(palette.outlierIndices.map(\.littleEndian)), Blob(palette.outlierValues)]
            }
            return EncodedTensor(blobs: blobs, sqnr: palette.sqnrDecibels)
        case (.palettize, .half(let values)):
            let palette = try values.withUnsafeBufferPointer {
                try Palettizer.palettize(
                    $0, rows: rows, columns: columns, spec: paletteSpec(tensor), name: spec.name,
                    clustering: PaletteClustering(search: tensor.scheme.search))
            }
            return EncodedTensor(blobs: [Blob(palette.lut), Blob(palette.packedIndices)], sqnr: palette.sqnrDecibels)
        case (.palettize, .patterns(let patterns, let kind)):
            let palette = try patterns.withUnsafeBufferPointer {
                try Palettizer.palettize(
                    patterns: $0, kind: kind, rows: rows, columns: columns, spec: paletteSpec(tensor), name: spec.name,
                    clustering: PaletteClustering(search: tensor.scheme.search))
            }
            guard let palette else {
                // Values float16 cannot hold: through the reader, which reports or clamps them.
                return try compress(tensor, try loadHalf(tensor, from: source), from: source)
            }
            return EncodedTensor(blobs: [Blob(palette.lut), Blob(palette.packedIndices)], sqnr: palette.sqnrDecibels)
        case (.palettize, .stream(let kind)):
            let palette = try Palettizer.palettize(
                streamedRows: rows, columns: columns, kind: kind, spec: paletteSpec(tensor), name: spec.name,
                clustering: PaletteClustering(search: tensor.scheme.search)
            ) { elements, buffer in
                try source.readStoredPatterns(spec, elements: elements, into: buffer)
            }
            guard let palette else {
                // Values float16 cannot hold: through the reader, which reports or clamps them.
                return try compress(tensor, try loadHalf(tensor, from: source), from: source)
            }
            return EncodedTensor(blobs: [Blob(palette.lut), Blob(palette.packedIndices)], sqnr: palette.sqnrDecibels)
        case (.linear, .stream(let kind)):
            let read = { (elements: Range<Int>, buffer: UnsafeMutableBufferPointer<UInt16>) in
                try source.readStoredPatterns(spec, elements: elements, into: buffer)
            }
            guard
                let codebook = try LinearQuantizer.int8PerTensorCodebook(
                    streamedRows: rows, columns: columns, kind: kind, read: read)
            else {
                // Values float16 cannot hold: through the reader, which reports or clamps them.
                return try compress(tensor, try loadHalf(tensor, from: source), from: source)
            }
            // The codes are made on the write queue, a block at a time, as they are written.
            let codes = Blob(byteCount: rows * columns) { file in
                try LinearQuantizer.writeInt8Codes(
                    codebook, streamedRows: rows, columns: columns, name: spec.name, read: read
                ) {
                    try file.write($0)
                }
            }
            return EncodedTensor(blobs: [Blob([codebook.scale]), codes], sqnr: codebook.sqnrDecibels)
        case (.linear, .half(let values)):
            let quantized = try values.withUnsafeBufferPointer {
                try LinearQuantizer.quantizeInt8(
                    $0, rows: rows, columns: columns,
                    granularity: tensor.scheme.granularity == .perChannel ? .perOutputChannel : .perTensor,
                    name: spec.name)
            }
            return EncodedTensor(blobs: [Blob(quantized.scales), Blob(quantized.values)], sqnr: quantized.sqnrDecibels)
        case (.palettize, .single), (.linear, .single), (.keep, .patterns), (.linear, .patterns):
            throw BundleError.invalidTensor(tensor: spec.name, reason: "compressed tensors are read as float16")
        }
    }

    /// Reads `count` elements stored as patterns of `kind` with `read`, a block at a time, and
    /// hands each block to `body`, as float16 patterns when `converting` (the reader's
    /// conversion), else as stored. Stops and returns false at a block holding a pattern that
    /// has no finite float16 value.
    static func float16Blocks(
        of count: Int, kind: SourcePatterns, converting: Bool,
        read: (Range<Int>, UnsafeMutableBufferPointer<UInt16>) throws -> Void,
        body: (UnsafeBufferPointer<UInt16>) throws -> Void
    ) throws -> Bool {
        let blockElements = max(1, min(count, LinearQuantizer.streamBlockElements))
        let converts = converting && kind == .bfloat16
        let patterns = UnsafeMutableBufferPointer<UInt16>.allocate(capacity: blockElements)
        defer { patterns.deallocate() }
        let halves = UnsafeMutableBufferPointer<Float16>.allocate(capacity: converts ? blockElements : 0)
        defer { halves.deallocate() }
        for start in stride(from: 0, to: count, by: blockElements) {
            let block = UnsafeMutableBufferPointer(rebasing: patterns[0..<min(blockElements, count - start)])
            try read(start..<(start + block.count), block)
            // A largest magnitude, which vectorises, where a search branches at every pattern.
            var largest: UInt16 = 0
            for pattern in block { largest = max(largest, pattern & 0x7FFF) }
            guard largest < kind.firstUnusable else { return false }
            guard converts else {
                try body(UnsafeBufferPointer(block))
                continue
            }
            let converted = UnsafeMutableBufferPointer(rebasing: halves[0..<block.count])
            _ = PrecisionConversion.toFloat16(
                bfloat16Bits: UnsafeBufferPointer(block), into: converted, clampingOutOfRange: false)
            try converted.withMemoryRebound(to: UInt16.self) { try body(UnsafeBufferPointer($0)) }
        }
        return true
    }
}

/// Reads tensors ahead on a background queue, so reading overlaps compression: always the
/// next tensor, and those after it while they fit in ``lookAheadBytes`` (a small tensor is
/// compressed before the large one after it could be read).
final class TensorPrefetcher: @unchecked Sendable {
    /// Source bytes read ahead at most beyond the next tensor.
    static let lookAheadBytes = 32 << 20
    /// Source bytes the system is asked to bring from the disk ahead of the reads: from a
    /// cold cache, the disk then works while the cores do.
    static let adviseAheadBytes = 256 << 20

    private let encoder: TensorEncoder
    private let tensors: [PlannedTensor]
    private let source: WeightSource
    private let queue = DispatchQueue(label: "exporter.prefetch")
    /// Where the system is told what comes next: from a cold cache, the call blocks while it
    /// queues the disk reads (0.3 s per 1.5B export here), which the compressor must not wait for.
    private let adviceQueue = DispatchQueue(label: "exporter.advise")
    /// Loads started and not yet taken, by tensor index.
    private var pending: [Int: (group: DispatchGroup, box: ResultBox)] = [:]
    /// The first tensor not started yet (loads start in order).
    private var nextToStart = 0
    /// The first tensor the source has not been told about yet.
    private var nextToAdvise = 0
    /// The tensors read ahead of the current one, and those the source is told about: windows
    /// that slide with it, so that each call costs what enters and leaves them, not their
    /// length (thousands of small tensors fit in them: rescanning made an export of 44,000
    /// tensors take a minute).
    private var readAhead = TensorWindow()
    private var advised = TensorWindow()

    private final class ResultBox: @unchecked Sendable {
        var result: Result<LoadedValues, Error>?
    }

    init(encoder: TensorEncoder, tensors: [PlannedTensor], source: WeightSource) {
        self.encoder = encoder
        self.tensors = tensors
        self.source = source
    }

    /// The values of tensor `index` (asked for in increasing order); starts reading the next ones.
    func values(of index: Int) throws -> LoadedValues {
        while nextToStart <= index { start(nextToStart) }
        let tensors = self.tensors
        let size = { (tensor: Int) in tensors[tensor].spec.elementCount * MemoryLayout<Float16>.stride }
        // The next tensor always, then those after it while all fit in the look-ahead.
        readAhead.slide(
            to: index + 1, count: tensors.count, limit: Self.lookAheadBytes, firstAlways: true, size: size)
        while nextToStart < readAhead.end { start(nextToStart) }
        // From this one on, while all fit in the advice's reach.
        advised.slide(to: index, count: tensors.count, limit: Self.adviseAheadBytes, firstAlways: false, size: size)
        nextToAdvise = max(nextToAdvise, index)
        while nextToAdvise < advised.end {
            let (source, tensor) = (self.source, tensors[nextToAdvise].spec)
            adviceQueue.async { source.willRead(tensor) }
            nextToAdvise += 1
        }
        guard let current = pending.removeValue(forKey: index) else {
            throw BundleError.invalidTensor(tensor: tensors[index].spec.name, reason: "not loaded")
        }
        current.group.wait()
        guard let result = current.box.result else {
            throw BundleError.invalidTensor(tensor: tensors[index].spec.name, reason: "not loaded")
        }
        return try result.get()
    }

    private func start(_ index: Int) {
        let group = DispatchGroup()
        let box = ResultBox()
        let tensor = tensors[index]
        let (encoder, source) = (self.encoder, self.source)
        group.enter()
        queue.async {
            box.result = Result { try encoder.load(tensor, from: source) }
            group.leave()
        }
        pending[index] = (group, box)
        nextToStart = index + 1
    }
}

/// Consecutive tensors from a start that only moves forward, as many as fit in a byte limit
/// (the first whatever its size, when asked): kept up to date by what enters and leaves it.
struct TensorWindow {
    /// The first tensor of the window.
    private(set) var start = 0
    /// One past its last tensor (`start` when empty).
    private(set) var end = 0
    /// The sizes of its tensors, added up.
    private var bytes = 0

    /// Moves the start to `newStart` (not before the current one), then takes in the tensors
    /// after the end while their sizes add up to at most `limit` (the first one whatever its
    /// size when `firstAlways`), stopping at the first that does not fit.
    mutating func slide(to newStart: Int, count: Int, limit: Int, firstAlways: Bool, size: (Int) -> Int) {
        while start < newStart {
            if start < end { bytes -= size(start) }
            start += 1
        }
        if end < start { (end, bytes) = (start, 0) }
        // `limit - bytes`, not `bytes + size`: a size may be near Int.max (a hostile config's plan).
        while end < count, (firstAlways && end == start) || size(end) <= limit - bytes {
            bytes += size(end)
            end += 1
        }
    }
}
