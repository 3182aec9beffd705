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
        guard rows >= 0, columns >= 0 else { throw CompressionError.invalidShape(rows: rows, columns: columns, tensor: name) }
        guard rows > 0, columns > 0 else { throw CompressionError.emptyTensor(rows: rows, columns: columns, tensor: name) }
        let (count, overflow) = rows.multipliedReportingOverflow(by: columns)
        guard !overflow else { throw CompressionError.invalidShape(rows: rows, columns: columns, tensor: name) }
        guard weights.count == count else {
            throw CompressionError.weightCountMismatch(expected: count, actual: weights.count, tensor: name)
        }
        let workers = max(1, min(workerCount, rows))
        var values = [Int8](repeating: 0, count: count)
        var rowErrors = [Double](repeating: 0, count: rows)
        var rowSignals = [Double](repeating: 0, count: rows)
        // Largest magnitude per row, from bit patterns: for finite values the magnitude
        // order is the order of the pattern without its sign bit.
        var rowMaxima = [UInt16](repeating: 0, count: rows)
        var nonFinite = false
        weights.withMemoryRebound(to: UInt16.self) { bits in
            rowMaxima.withUnsafeMutableBufferPointer { maxima in
                let shared = MaximaBuffers(bits: bits, maxima: maxima)
                WorkDispenser.perform(count: rows, workers: workers, batch: 16, setUp: { _ in () }) { _, row in
                    var largest: UInt16 = 0
                    for column in 0..<columns { largest = max(largest, shared.bits[row * columns + column] & 0x7FFF) }
                    shared.maxima[row] = largest
                }
            }
            nonFinite = rowMaxima.contains { $0 >= 0x7C00 }
        }
        if nonFinite {
            let (row, column) = weights.withMemoryRebound(to: UInt16.self) { Palettizer.firstNonFinite($0, columns: columns) }
            throw CompressionError.nonFiniteWeight(row: row, column: column, tensor: name)
        }
        let scales: [Float] = Float16Table.floats.withUnsafeBufferPointer { floats in
            func scale(_ largest: UInt16) -> Float { largest == 0 ? 1 : floats[Int(largest)] / 127 }
            switch granularity {
            case .perTensor: return [scale(rowMaxima.max() ?? 0)]
            case .perOutputChannel: return rowMaxima.map(scale)
            }
        }
        let job = LinearJob(rows: rows, columns: columns, perRow: granularity == .perOutputChannel)
        values.withUnsafeMutableBufferPointer { valueBuffer in
            rowErrors.withUnsafeMutableBufferPointer { errorBuffer in
                rowSignals.withUnsafeMutableBufferPointer { signalBuffer in
                    scales.withUnsafeBufferPointer { scaleBuffer in
                        Float16Table.floats.withUnsafeBufferPointer { floats in
                            weights.withMemoryRebound(to: UInt16.self) { bits in
                                job.run(
                                    bits: bits, floats: floats, scales: scaleBuffer, values: valueBuffer,
                                    rowErrors: errorBuffer, rowSignals: signalBuffer, workers: workers)
                            }
                        }
                    }
                }
            }
        }
        // Sum in row order so the totals do not depend on the worker count.
        return Int8QuantizedTensor(
            rows: rows, columns: columns, granularity: granularity, scales: scales, values: values,
            squaredError: rowErrors.reduce(0, +), signalPower: rowSignals.reduce(0, +))
    }

    /// Writes `Float(q) · scale` for every weight, row-major.
    ///
    /// - Throws: ``CompressionError/outputSizeMismatch(expected:actual:tensor:)`` when
    ///   `output` does not hold exactly `rows · columns` values.
    public static func dequantize(_ tensor: Int8QuantizedTensor, into output: UnsafeMutableBufferPointer<Float>) throws {
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

/// Quantises rows in parallel; each row's results are written by one worker.
private struct LinearJob {
    let rows: Int
    let columns: Int
    let perRow: Bool

    func run(
        bits: UnsafeBufferPointer<UInt16>, floats: UnsafeBufferPointer<Float>, scales: UnsafeBufferPointer<Float>,
        values: UnsafeMutableBufferPointer<Int8>, rowErrors: UnsafeMutableBufferPointer<Double>,
        rowSignals: UnsafeMutableBufferPointer<Double>, workers: Int
    ) {
        let shared = SharedBuffers(
            bits: bits, floats: floats, scales: scales, values: values, rowErrors: rowErrors, rowSignals: rowSignals)
        // One scale for the tensor: every weight with the same bit pattern gets the same code
        // and error, so they are computed once per pattern (65,536 at most) and looked up.
        let table = perRow ? nil : PatternTable(scale: scales[0], floats: floats)
        WorkDispenser.perform(count: rows, workers: workers, batch: 16, setUp: { _ in () }) { _, row in
            let base = row * columns
            // Four running sums break the dependency chain of one; summed in a fixed order.
            var errors = SIMD4<Double>()
            var signals = SIMD4<Double>()
            var column = 0
            if let table {
                while column + 4 <= columns {
                    var error = SIMD4<Double>()
                    var signal = SIMD4<Double>()
                    for lane in 0..<4 {
                        let pattern = Int(shared.bits[base + column + lane])
                        shared.values[base + column + lane] = table.codes[pattern]
                        error[lane] = table.squaredErrors[pattern]
                        let weight = Double(shared.floats[pattern])
                        signal[lane] = weight * weight
                    }
                    errors += error
                    signals += signal
                    column += 4
                }
                while column < columns {
                    let pattern = Int(shared.bits[base + column])
                    shared.values[base + column] = table.codes[pattern]
                    errors[0] += table.squaredErrors[pattern]
                    let weight = Double(shared.floats[pattern])
                    signals[0] += weight * weight
                    column += 1
                }
            } else {
                let scale = shared.scales[row]
                while column < columns {
                    let lane = column & 3
                    let weight = shared.floats[Int(shared.bits[base + column])]
                    let (code, error) = LinearQuantizer.quantize(weight, scale: scale)
                    shared.values[base + column] = code
                    errors[lane] += error
                    signals[lane] += Double(weight) * Double(weight)
                    column += 1
                }
            }
            shared.rowErrors[row] = (errors[0] + errors[1]) + (errors[2] + errors[3])
            shared.rowSignals[row] = (signals[0] + signals[1]) + (signals[2] + signals[3])
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

/// The int8 code and squared error of every finite Float16 bit pattern at one scale.
private final class PatternTable: @unchecked Sendable {
    let codes = UnsafeMutablePointer<Int8>.allocate(capacity: 1 << 16)
    let squaredErrors = UnsafeMutablePointer<Double>.allocate(capacity: 1 << 16)

    init(scale: Float, floats: UnsafeBufferPointer<Float>) {
        for pattern in 0..<(1 << 16) {
            // Non-finite patterns never reach the table (checked before quantising).
            let weight = Float16Table.isNonFinite(UInt16(pattern)) ? 0 : floats[pattern]
            (codes[pattern], squaredErrors[pattern]) = LinearQuantizer.quantize(weight, scale: scale)
        }
    }

    deinit {
        codes.deallocate()
        squaredErrors.deallocate()
    }
}

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
