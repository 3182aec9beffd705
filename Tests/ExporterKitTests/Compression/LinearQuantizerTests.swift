import TestSupport
import Testing

@testable import ExporterKit

extension CompressionTests {
    @Suite("Int8 linear quantiser")
    struct LinearQuantizerTests {
        private func quantize(
            _ weights: [Float16], rows: Int, columns: Int, granularity: LinearQuantizationGranularity, workers: Int = 2
        ) throws -> Int8QuantizedTensor {
            try weights.withUnsafeBufferPointer {
                try LinearQuantizer.quantizeInt8(
                    $0, rows: rows, columns: columns, granularity: granularity, name: "embed", workerCount: workers)
            }
        }

        @Test("the fast rounding is round-half-away-from-zero, clamped, for every Float16 at several scales")
        func fastRounding() {
            var mismatches: [String] = []
            for scale: Float in [1, 0.5 / 127, 3.0 / 127, 1e-3, 65504.0 / 127] {
                for pattern in UInt16.min...UInt16.max where !Float16Table.isNonFinite(pattern) {
                    let weight = Float(Float16(bitPattern: pattern))
                    let reference = min(127, max(-127, (weight / scale).rounded()))
                    let (code, squaredError) = LinearQuantizer.quantize(weight, scale: scale)
                    let difference = Double(weight) - Double(reference * scale)
                    if Float(code) != reference || squaredError != difference * difference {
                        mismatches.append("\(weight) at scale \(scale): \(code), expected \(reference)")
                    }
                }
            }
            #expect(mismatches.isEmpty, "\(mismatches.prefix(5))")
        }

        @Test("per tensor (pattern table) and per channel give the per-weight formula's codes and errors")
        func tableMatchesFormula() throws {
            let rows = 37
            let columns = 53
            let weights = HeavyTailedWeights.make(rows: rows, columns: columns, seed: 11)
            for granularity in [LinearQuantizationGranularity.perTensor, .perOutputChannel] {
                let tensor = try quantize(weights, rows: rows, columns: columns, granularity: granularity, workers: 3)
                var squaredError = 0.0
                for row in 0..<rows {
                    for column in 0..<columns {
                        let weight = Float(weights[row * columns + column])
                        let scale = tensor.scale(ofRow: row)
                        let code = min(127, max(-127, (weight / scale).rounded()))
                        #expect(Float(tensor.values[row * columns + column]) == code)
                        let difference = Double(weight) - Double(code * scale)
                        squaredError += difference * difference
                    }
                }
                #expect(abs(tensor.squaredError - squaredError) <= 1e-12 * squaredError)
                let single = try quantize(weights, rows: rows, columns: columns, granularity: granularity, workers: 1)
                #expect(single == tensor)
            }
        }

        @Test("quantises per tensor with scale max|w|/127")
        func perTensorKnownAnswer() throws {
            let tensor = try quantize([127, -63.5, 0.5, -127, 1, 2], rows: 2, columns: 3, granularity: .perTensor)
            #expect(tensor.scales == [1])
            // 0.5 rounds half away from zero.
            #expect(tensor.values == [127, -64, 1, -127, 1, 2])
            #expect(tensor.squaredError == 0.25 + 0.25)
        }

        @Test("quantises per output channel, zero rows with scale 1")
        func perChannelKnownAnswer() throws {
            let tensor = try quantize([2, -1, 0, 0, 0.25, 0.5], rows: 3, columns: 2, granularity: .perOutputChannel)
            #expect(tensor.scales == [2 / 127, 1, 0.5 / 127])
            #expect(tensor.values == [127, -64, 0, 0, 64, 127])
            #expect(tensor.scale(ofRow: 1) == 1)
        }

        @Test("round trip error stays within half a step, per channel beats per tensor, reruns are identical")
        func roundTrip() throws {
            let weights = HeavyTailedWeights.make(rows: 16, columns: 64, seed: 5)
            let perTensor = try quantize(weights, rows: 16, columns: 64, granularity: .perTensor)
            let perChannel = try quantize(weights, rows: 16, columns: 64, granularity: .perOutputChannel)
            #expect(perChannel.squaredError < perTensor.squaredError)
            for tensor in [perTensor, perChannel] {
                var restored = [Float](repeating: 0, count: 16 * 64)
                try restored.withUnsafeMutableBufferPointer { try LinearQuantizer.dequantize(tensor, into: $0) }
                for row in 0..<16 {
                    for column in 0..<64 {
                        let weight = Float(weights[row * 64 + column])
                        #expect(abs(restored[row * 64 + column] - weight) <= tensor.scale(ofRow: row) * 0.5001)
                    }
                }
                let again = try quantize(weights, rows: 16, columns: 64, granularity: tensor.granularity, workers: 1)
                #expect(again == tensor)
            }
        }

        @Test("an all-zero tensor is exact with scale 1")
        func zeros() throws {
            let tensor = try quantize([0, 0, 0, 0], rows: 2, columns: 2, granularity: .perTensor)
            #expect(tensor.scales == [1])
            #expect(tensor.sqnrDecibels == .infinity)
        }

        @Test("refuses empty shapes, wrong sizes and non-finite weights")
        func errors() {
            #expect(throws: CompressionError.emptyTensor(rows: 2, columns: 0, tensor: "embed")) {
                try quantize([], rows: 2, columns: 0, granularity: .perTensor)
            }
            #expect(throws: CompressionError.weightCountMismatch(expected: 4, actual: 3, tensor: "embed")) {
                try quantize([1, 2, 3], rows: 2, columns: 2, granularity: .perTensor)
            }
            #expect(throws: CompressionError.nonFiniteWeight(row: 1, column: 0, tensor: "embed")) {
                try quantize([1, 2, .nan, 3], rows: 2, columns: 2, granularity: .perOutputChannel)
            }
        }
    }
}
