import Foundation

/// Which weights share one int8 scale.
public enum LinearQuantizationGranularity: Equatable, Sendable, Codable {
    /// One scale for the whole tensor (the iOS token embedding's default).
    case perTensor
    /// One scale per output channel (row).
    case perOutputChannel
}

/// A symmetric int8 tensor: `w ≈ Float(q) · scale`, `q` in `-127...127`.
public struct Int8QuantizedTensor: Equatable, Sendable {
    /// Output channels.
    public let rows: Int
    /// Input channels.
    public let columns: Int
    /// Which weights share a scale.
    public let granularity: LinearQuantizationGranularity
    /// One Float32 scale (per tensor) or one per row: `max|w| / 127`, or 1 where every
    /// weight is zero (any scale reproduces zeros; 1 avoids a zero divisor in readers).
    public let scales: [Float]
    /// The quantised weights, row-major.
    public let values: [Int8]
    /// Σ (w − q·scale)² over all weights, the product computed in Float32.
    public let squaredError: Double
    /// Σ w² over all weights.
    public let signalPower: Double

    /// Signal-to-quantisation-noise ratio in decibels (see ``SignalToNoise``; infinite when exact).
    public var sqnrDecibels: Double {
        SignalToNoise.decibels(signalPower: signalPower, squaredError: squaredError)
    }

    /// The scale of row `row`.
    public func scale(ofRow row: Int) -> Float {
        granularity == .perTensor ? scales[0] : scales[row]
    }
}

/// Per-tensor int8 decided from a tensor's pattern counts, before any weight is coded: its
/// scale, the code of every stored bit pattern, and the error those codes give.
struct Int8Codebook: Sendable {
    /// `max|w| / 127`, or 1 when every weight is zero.
    let scale: Float
    /// The code of each stored pattern (65,536 entries), ``absent`` for patterns the tensor lacks.
    let codes: [Int8]
    /// Σ (w − q·scale)² over all weights.
    let squaredError: Double
    /// Σ w² over all weights.
    let signalPower: Double

    /// Signal-to-quantisation-noise ratio in decibels.
    var sqnrDecibels: Double { SignalToNoise.decibels(signalPower: signalPower, squaredError: squaredError) }

    /// The code of patterns the counted tensor did not hold: no weight is coded −128.
    static let absent = Int8.min

    /// Writes the code of each pattern of `patterns` to `output`, in order (``absent`` for a
    /// pattern that was not among those counted).
    func code(_ patterns: UnsafeBufferPointer<UInt16>, into output: UnsafeMutablePointer<Int8>) {
        codes.withUnsafeBufferPointer { codes in
            for (index, pattern) in patterns.enumerated() { output[index] = codes[Int(pattern)] }
        }
    }
}

/// Symmetric int8 quantisation of Float16 tensors.
public enum LinearQuantizer {
    /// Quantises a `rows × columns` row-major tensor: `scale = max|w| / 127` (Float32) over
    /// the tensor or each row, `q = round(w / scale)` (half away from zero) clamped to
    /// `-127...127`. A group whose weights are all zero gets scale 1.
    ///
    /// - Throws: ``CompressionError`` for an empty or negative shape, a buffer of the wrong
    ///   size, or a NaN/infinite weight.
    public static func quantizeInt8(
        _ weights: UnsafeBufferPointer<Float16>, rows: Int, columns: Int,
        granularity: LinearQuantizationGranularity, name: String? = nil,
        workerCount: Int = Palettizer.defaultWorkerCount
    ) throws -> Int8QuantizedTensor {
        guard rows >= 0, columns >= 0 else {
            throw CompressionError.invalidShape(rows: rows, columns: columns, tensor: name)
        }
        guard rows > 0, columns > 0 else {
            throw CompressionError.emptyTensor(rows: rows, columns: columns, tensor: name)
        }
        let (count, overflow) = rows.multipliedReportingOverflow(by: columns)
        guard !overflow else { throw CompressionError.invalidShape(rows: rows, columns: columns, tensor: name) }
        guard weights.count == count else {
            throw CompressionError.weightCountMismatch(expected: count, actual: weights.count, tensor: name)
        }
        let workers = max(1, min(workerCount, rows))
        return try weights.withMemoryRebound(to: UInt16.self) { bits in
            switch granularity {
            case .perTensor:
                return try quantizePerTensor(bits, rows: rows, columns: columns, name: name, workers: workers)
            case .perOutputChannel:
                return try quantizePerRow(bits, rows: rows, columns: columns, name: name, workers: workers)
            }
        }
    }

    /// One scale: every weight with the same bit pattern gets the same code and error, so the
    /// weights are counted by pattern (which also gives the largest magnitude), the code and
    /// error of each pattern present computed once, and the codes written by table lookup.
    /// Totals are summed over patterns in ascending order: independent of the worker count.
    private static func quantizePerTensor(
        _ bits: UnsafeBufferPointer<UInt16>, rows: Int, columns: Int, name: String?, workers: Int
    ) throws -> Int8QuantizedTensor {
        let shared = WorkerShared(bits)
        let tensor = try quantizePerTensor(rows: rows, columns: columns, rowsPerBlock: 16, workers: workers) { block in
            UnsafeBufferPointer(rebasing: shared.value[(block.lowerBound * columns)..<(block.upperBound * columns)])
        }
        guard let tensor else {
            let (row, column) = Palettizer.firstNonFinite(bits, columns: columns)
            throw CompressionError.nonFiniteWeight(row: row, column: column, tensor: name)
        }
        return tensor
    }

    /// Per-tensor int8 of a tensor stored as bit patterns of `kind` (a bfloat16 value worth
    /// the checkpoint reader's float16 conversion), in two steps so that the codes need never
    /// be held whole: this one reads the tensor a block of rows at a time to count its
    /// patterns and decides every code; ``writeInt8Codes(_:streamedRows:columns:blockElements:name:read:write:)``
    /// reads it again and hands the codes on block by block. Only a block is in memory,
    /// never the tensor in float16 nor its codes. The same result as converting first.
    ///
    /// - Parameter read: fills the buffer with the patterns of an element range; called
    ///   from several threads at once.
    /// - Returns: nil when a value has no finite float16 (NaN, infinity, beyond ±65,504):
    ///   such tensors are converted by the reader, which reports or clamps them.
    /// - Throws: what `read` throws.
    static func int8PerTensorCodebook(
        streamedRows rows: Int, columns: Int, kind: SourcePatterns, workers: Int = Palettizer.defaultWorkerCount,
        blockElements: Int = streamBlockElements, read: (Range<Int>, UnsafeMutableBufferPointer<UInt16>) throws -> Void
    ) throws -> Int8Codebook? {
        guard rows > 0, columns > 0 else { return nil }
        let rowsPerBlock = max(1, blockElements / columns)
        return try perTensorCodebook(
            rows: rows, columns: columns, rowsPerBlock: rowsPerBlock, workers: workers, patterns: kind,
            scratchElements: rowsPerBlock * columns
        ) { block, scratch in
            let elements = (block.lowerBound * columns)..<(block.upperBound * columns)
            let buffer = UnsafeMutableBufferPointer(rebasing: scratch[0..<elements.count])
            try read(elements, buffer)
            return UnsafeBufferPointer(buffer)
        }
    }

    /// The codes of a tensor stored as bit patterns (of the codebook's kind), in row-major
    /// order: reads it with `read` a block of rows at a time and passes each block's codes to
    /// `write`, in order.
    /// - Throws: what `read` and `write` throw, and ``CompressionError/changedWhileRead(tensor:)``
    ///   (before writing the block) when a value was not there when the codebook was made.
    static func writeInt8Codes(
        _ codebook: Int8Codebook, streamedRows rows: Int, columns: Int, blockElements: Int = streamBlockElements,
        name: String? = nil, read: (Range<Int>, UnsafeMutableBufferPointer<UInt16>) throws -> Void,
        write: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        let rowsPerBlock = min(rows, max(1, blockElements / columns))
        let patterns = UnsafeMutableBufferPointer<UInt16>.allocate(capacity: rowsPerBlock * columns)
        defer { patterns.deallocate() }
        let codes = UnsafeMutableBufferPointer<Int8>.allocate(capacity: rowsPerBlock * columns)
        defer { codes.deallocate() }
        for firstRow in stride(from: 0, to: rows, by: rowsPerBlock) {
            let elements = (firstRow * columns)..<(min(rows, firstRow + rowsPerBlock) * columns)
            let block = UnsafeMutableBufferPointer(rebasing: patterns[0..<elements.count])
            try read(elements, block)
            codebook.code(UnsafeBufferPointer(block), into: codes.baseAddress!)
            // A separate search (memchr's): checking each code as it is made doubled the loop's time.
            guard memchr(codes.baseAddress!, Int32(UInt8(bitPattern: Int8Codebook.absent)), elements.count) == nil
            else {
                throw CompressionError.changedWhileRead(tensor: name)
            }
            try write(UnsafeRawBufferPointer(start: codes.baseAddress, count: elements.count))
        }
    }

    /// Elements per block read by ``int8PerTensorCodebook(streamedRows:columns:kind:workers:blockElements:read:)``
    /// and ``writeInt8Codes(_:streamedRows:columns:blockElements:name:read:write:)``.
    static let streamBlockElements = 1 << 21

    /// Pass 1 of the per-tensor pipeline, over blocks of rows handed out by
    /// `patternsOf(rows, scratch)` (the block's patterns, read into the worker's `scratch` if
    /// need be): counts the patterns and decides the scale, every pattern's code and the
    /// error. Returns nil when a pattern has no finite float16 value.
    private static func perTensorCodebook(
        rows: Int, columns: Int, rowsPerBlock: Int, workers: Int, patterns source: SourcePatterns, scratchElements: Int,
        patternsOf: (Range<Int>, UnsafeMutableBufferPointer<UInt16>) throws -> UnsafeBufferPointer<UInt16>
    ) throws -> Int8Codebook? {
        let patternCount = 1 << 16
        let blocks = (rows + rowsPerBlock - 1) / rowsPerBlock
        func rowRange(_ block: Int) -> Range<Int> { (block * rowsPerBlock)..<min(rows, (block + 1) * rowsPerBlock) }
        let failure = FirstFailure()

        let counts = UnsafeMutableBufferPointer<Int>.allocate(capacity: patternCount)
        counts.initialize(repeating: 0)
        defer { counts.deallocate() }
        let totals = WorkerShared(counts)
        WorkDispenser.perform(
            count: blocks, workers: workers,
            setUp: { _ in BlockWorkspace(patternCount: patternCount, scratchElements: scratchElements) },
            tearDown: { workspace in
                failure.lock.withLock {
                    for pattern in 0..<patternCount { totals.value[pattern] += workspace.counts[pattern] }
                }
            }
        ) { workspace, block in
            // The lowest failing block's error, whichever worker met it first.
            guard !failure.happened(before: block) else { return }
            do {
                for pattern in try patternsOf(rowRange(block), workspace.scratch) {
                    workspace.counts[Int(pattern)] &+= 1
                }
            } catch {
                failure.record(error, order: block)
            }
        }
        try failure.rethrow()
        let firstUnusable = Int(source.firstUnusable)
        if (0..<patternCount).contains(where: { counts[$0] > 0 && $0 & 0x7FFF >= firstUnusable }) { return nil }

        // The code and error of each float16 value present, from its count.
        let halfCounts: UnsafeMutableBufferPointer<Int>
        if source == .float16 {
            halfCounts = counts
        } else {
            halfCounts = UnsafeMutableBufferPointer<Int>.allocate(capacity: patternCount)
            halfCounts.initialize(repeating: 0)
            Float16Table.fromBFloat16.withUnsafeBufferPointer { map in
                for pattern in 0..<patternCount where counts[pattern] > 0 {
                    halfCounts[Int(map[pattern])] += counts[pattern]
                }
            }
        }
        defer { if source != .float16 { halfCounts.deallocate() } }
        // For finite values the magnitude order is the order of the pattern without its sign.
        let largest = (0..<patternCount).reduce(UInt16(0)) { halfCounts[$1] > 0 ? max($0, UInt16($1) & 0x7FFF) : $0 }
        let scale: Float = Float16Table.floats.withUnsafeBufferPointer { floats in
            largest == 0 ? 1 : floats[Int(largest)] / 127
        }
        var codes = [Int8](repeating: Int8Codebook.absent, count: patternCount)
        var squaredError = 0.0
        var signalPower = 0.0
        Float16Table.floats.withUnsafeBufferPointer { floats in
            for pattern in 0..<patternCount where halfCounts[pattern] > 0 {
                let weight = floats[pattern]
                let (code, error) = quantize(weight, scale: scale)
                codes[pattern] = code
                squaredError += Double(halfCounts[pattern]) * error
                signalPower += Double(halfCounts[pattern]) * (Double(weight) * Double(weight))
            }
        }
        // Codes by stored pattern, so that coding looks each weight up once.
        if source != .float16 {
            let halfCodes = codes
            Float16Table.fromBFloat16.withUnsafeBufferPointer { map in
                for pattern in 0..<patternCount {
                    codes[pattern] = counts[pattern] > 0 ? halfCodes[Int(map[pattern])] : Int8Codebook.absent
                }
            }
        }
        return Int8Codebook(scale: scale, codes: codes, squaredError: squaredError, signalPower: signalPower)
    }

    /// The per-tensor pipeline for weights in memory: the codebook, then every weight coded
    /// (pass 2, blocks shared among the workers).
    private static func quantizePerTensor(
        rows: Int, columns: Int, rowsPerBlock: Int, workers: Int,
        patternsOf: (Range<Int>) -> UnsafeBufferPointer<UInt16>
    ) throws -> Int8QuantizedTensor? {
        guard
            let codebook = try perTensorCodebook(
                rows: rows, columns: columns, rowsPerBlock: rowsPerBlock, workers: workers, patterns: .float16,
                scratchElements: 0, patternsOf: { block, _ in patternsOf(block) })
        else { return nil }
        let blocks = (rows + rowsPerBlock - 1) / rowsPerBlock
        let values = [Int8](unsafeUninitializedCapacity: rows * columns) { output, initialized in
            let target = WorkerShared(output)
            WorkDispenser.perform(count: blocks, workers: workers, setUp: { _ in () }) { _, block in
                let firstRow = block * rowsPerBlock
                codebook.code(
                    patternsOf(firstRow..<min(rows, firstRow + rowsPerBlock)),
                    into: target.value.baseAddress! + firstRow * columns)
            }
            initialized = rows * columns
        }
        return Int8QuantizedTensor(
            rows: rows, columns: columns, granularity: .perTensor, scales: [codebook.scale], values: values,
            squaredError: codebook.squaredError, signalPower: codebook.signalPower)
    }

    /// One scale per row, from the row's largest magnitude.
    private static func quantizePerRow(
        _ bits: UnsafeBufferPointer<UInt16>, rows: Int, columns: Int, name: String?, workers: Int
    ) throws -> Int8QuantizedTensor {
        // Largest magnitude per row, from bit patterns: for finite values the magnitude
        // order is the order of the pattern without its sign bit.
        var rowMaxima = [UInt16](repeating: 0, count: rows)
        rowMaxima.withUnsafeMutableBufferPointer { maxima in
            let shared = MaximaBuffers(bits: bits, maxima: maxima)
            WorkDispenser.perform(count: rows, workers: workers, batch: 16, setUp: { _ in () }) { _, row in
                var largest: UInt16 = 0
                for column in 0..<columns { largest = max(largest, shared.bits[row * columns + column] & 0x7FFF) }
                shared.maxima[row] = largest
            }
        }
        if rowMaxima.contains(where: { $0 >= 0x7C00 }) {
            let (row, column) = Palettizer.firstNonFinite(bits, columns: columns)
            throw CompressionError.nonFiniteWeight(row: row, column: column, tensor: name)
        }
        let scales: [Float] = Float16Table.floats.withUnsafeBufferPointer { floats in
            rowMaxima.map { $0 == 0 ? 1 : floats[Int($0)] / 127 }
        }
        var rowErrors = [Double](repeating: 0, count: rows)
        var rowSignals = [Double](repeating: 0, count: rows)
        let values = [Int8](unsafeUninitializedCapacity: bits.count) { valueBuffer, initialized in
            rowErrors.withUnsafeMutableBufferPointer { errorBuffer in
                rowSignals.withUnsafeMutableBufferPointer { signalBuffer in
                    scales.withUnsafeBufferPointer { scaleBuffer in
                        Float16Table.floats.withUnsafeBufferPointer { floats in
                            let shared = SharedBuffers(
                                bits: bits, floats: floats, scales: scaleBuffer, values: valueBuffer,
                                rowErrors: errorBuffer, rowSignals: signalBuffer)
                            WorkDispenser.perform(count: rows, workers: workers, batch: 16, setUp: { _ in () }) {
                                _, row in
                                quantizeRow(row, columns: columns, shared)
                            }
                        }
                    }
                }
            }
            initialized = bits.count
        }
        // Sum in row order so the totals do not depend on the worker count.
        return Int8QuantizedTensor(
            rows: rows, columns: columns, granularity: .perOutputChannel, scales: scales, values: values,
            squaredError: rowErrors.reduce(0, +), signalPower: rowSignals.reduce(0, +))
    }

    /// Quantises one row at its own scale; four running sums break the dependency chain of one.
    private static func quantizeRow(_ row: Int, columns: Int, _ shared: SharedBuffers) {
        let base = row * columns
        let scale = shared.scales[row]
        var errors = SIMD4<Double>()
        var signals = SIMD4<Double>()
        for column in 0..<columns {
            let lane = column & 3
            let weight = shared.floats[Int(shared.bits[base + column])]
            let (code, error) = quantize(weight, scale: scale)
            shared.values[base + column] = code
            errors[lane] += error
            signals[lane] += Double(weight) * Double(weight)
        }
        shared.rowErrors[row] = (errors[0] + errors[1]) + (errors[2] + errors[3])
        shared.rowSignals[row] = (signals[0] + signals[1]) + (signals[2] + signals[3])
    }

    /// Writes `Float(q) · scale` for every weight, row-major.
    ///
    /// - Throws: ``CompressionError/outputSizeMismatch(expected:actual:tensor:)`` when
    ///   `output` does not hold exactly `rows · columns` values.
    public static func dequantize(_ tensor: Int8QuantizedTensor, into output: UnsafeMutableBufferPointer<Float>) throws
    {
        let count = tensor.rows * tensor.columns
        guard output.count == count, tensor.values.count == count else {
            throw CompressionError.outputSizeMismatch(expected: count, actual: output.count, tensor: nil)
        }
        for row in 0..<tensor.rows {
            let scale = tensor.scale(ofRow: row)
            for column in 0..<tensor.columns {
                let index = row * tensor.columns + column
                output[index] = Float(tensor.values[index]) * scale
            }
        }
    }
}

extension LinearQuantizer {
    /// `round(weight / scale)` (half away from zero) clamped to ±127, and the squared error of
    /// that code (its product with the scale taken in Float32).
    @inline(__always)
    static func quantize(_ weight: Float, scale: Float) -> (code: Int8, squaredError: Double) {
        let ratio = min(127, max(-127, weight / scale))
        // Truncation and the exact remainder give round-half-away-from-zero without a libm call.
        let truncated = Float(Int32(ratio))
        let remainder = ratio - truncated
        let rounded = abs(remainder) >= 0.5 ? truncated + (remainder < 0 ? -1 : 1) : truncated
        let difference = Double(weight) - Double(rounded * scale)
        return (Int8(rounded), difference * difference)
    }
}

/// A worker's pattern counts and read buffer for the per-tensor passes.
private final class BlockWorkspace {
    let counts: UnsafeMutableBufferPointer<Int>
    let scratch: UnsafeMutableBufferPointer<UInt16>

    init(patternCount: Int, scratchElements: Int) {
        counts = .allocate(capacity: patternCount)
        counts.initialize(repeating: 0)
        scratch = .allocate(capacity: scratchElements)
    }

    deinit {
        counts.deallocate()
        scratch.deallocate()
    }
}

// Buffers the workers share; each writes only its own rows (or, for the totals, under a lock).
private struct MaximaBuffers: @unchecked Sendable {
    let bits: UnsafeBufferPointer<UInt16>
    let maxima: UnsafeMutableBufferPointer<UInt16>
}

private struct SharedBuffers: @unchecked Sendable {
    let bits: UnsafeBufferPointer<UInt16>
    let floats: UnsafeBufferPointer<Float>
    let scales: UnsafeBufferPointer<Float>
    let values: UnsafeMutableBufferPointer<Int8>
    let rowErrors: UnsafeMutableBufferPointer<Double>
    let rowSignals: UnsafeMutableBufferPointer<Double>
}
