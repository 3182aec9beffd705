import TestSupport
import Testing

@testable import ExporterKit

/// Palettises an array (tests use small tensors).
func palettize(
    _ weights: [Float16], rows: Int, columns: Int, bits: Int, granularity: PaletteGranularity = .perTensor,
    name: String? = "w", workerCount: Int = 2, clustering: PaletteClustering = .automatic
) throws -> PalettizedTensor {
    try weights.withUnsafeBufferPointer {
        try Palettizer.palettize(
            $0, rows: rows, columns: columns, spec: PaletteSpec(bits: bits, granularity: granularity), name: name,
            workerCount: workerCount, clustering: clustering)
    }
}

extension CompressionTests {
    @Suite("Palettizer")
    struct PalettizerTests {
        @Test("reproduces a tensor with at most 2^bits distinct values exactly")
        func exactWhenFewValues() throws {
            let weights: [Float16] = [0.5, -1, 2, 0.5, -1, 3]
            let tensor = try palettize(weights, rows: 2, columns: 3, bits: 2)
            #expect(tensor.lut == [-1, 0.5, 2, 3])
            #expect(tensor.packedIndices == [0x61, 0x0C])
            #expect(tensor.squaredError == 0)
            #expect(tensor.sqnrDecibels == .infinity)
            #expect(tensor.dequantized() == weights.map { Float($0) })
        }

        @Test("a tensor reproduced exactly has zero error beside large values too, so its SQNR is infinite")
        func exactBesideLargeValues() throws {
            // Eleven values from −728 to 883.5: each its own LUT entry. Their errors came from
            // the histogram's sums, whose rounding left 1.16·10⁻¹⁰ (an SQNR of 162.74 dB).
            let weights: [Float16] = [
                -0.978, -0.9155, 883.5, -251.1, 0.6606, -231.4, 0.007, 873.0, 0.6133, -728.0, -0.544,
            ]
            let tensor = try palettize(weights, rows: 1, columns: weights.count, bits: 4)
            #expect(tensor.dequantized() == weights.map { Float($0) })
            #expect(tensor.squaredError == 0)
            #expect(tensor.sqnrDecibels == .infinity)
        }

        @Test("a cluster whose mean rounds to zero stores +0, never −0, so stored zeros decode as +0")
        func zeroEntryIsPositive() throws {
            // 1000 zeros and one tiny negative weight share a cluster whose mean rounds to −0 in float16.
            let weights: [Float16] =
                Array(repeating: 0, count: 1000) + [-Float16.leastNonzeroMagnitude, -100, -50, 50, 100]
            let tensor = try palettize(weights, rows: 1, columns: weights.count, bits: 2)
            #expect(tensor.lut.map(\.bitPattern).contains(0x0000))
            #expect(!tensor.lut.map(\.bitPattern).contains(0x8000))
            #expect(tensor.dequantized().prefix(1000).allSatisfy { $0 == 0 && $0.sign == .plus })
        }

        @Test("fills unused LUT entries with the largest value")
        func unusedEntriesRepeatLargest() throws {
            let tensor = try palettize([2, 1, 1, 2], rows: 1, columns: 4, bits: 3)
            #expect(tensor.lut == [1, 2, 2, 2, 2, 2, 2, 2])
            // Indices 1, 0, 0, 1: a value never refers to a repeated entry.
            #expect(
                try tensor.packedIndices.withUnsafeBufferPointer { try BitPacking.unpack($0, bits: 3, count: 4) } == [
                    1, 0, 0, 1,
                ])
        }

        @Test("finds the optimal LUT of a tiny tensor")
        func optimalTiny() throws {
            // Four entries for five values: merging {0, 0, 0, 1} costs 0.75, any other merge more.
            let weights: [Float16] = [0, 0, 0, 1, 10, 12, 100, 100]
            let tensor = try palettize(weights, rows: 2, columns: 4, bits: 2)
            #expect(tensor.lut == [0.25, 10, 12, 100])
            #expect(tensor.packedIndices == [0x00, 0xF9])
            #expect(tensor.squaredError == 0.75)
            #expect(tensor.signalPower == 1 + 100 + 144 + 20_000)
        }

        @Test("a histogram's sums grow outward from zero: small values beside ±65,504 keep their exact error")
        func histogramSumsFromZero() {
            // 1,000 weights of −65,504 and of +65,504 around −0, +0 and 1, 2, 3 × 2⁻¹⁰: summed
            // from the lowest value, the small squares vanished in 4.3·10¹² (spaced 2⁻¹¹).
            let unit = 0x1p-10
            let source =
                [UInt16](repeating: Float16(-65504).bitPattern, count: 1000) + [0x8000, 0x0000]
                + [1, 2, 3].map { Float16(Double($0) * unit).bitPattern }
                + [UInt16](repeating: Float16(65504).bitPattern, count: 1000)
            let workspace = PaletteWorkspace()
            source.withUnsafeBufferPointer { workspace.accumulate($0.baseAddress!, count: $0.count) }
            let histogram = workspace.extractHistogram()
            #expect((0..<histogram.count).map { histogram.values[$0] } == [-65504, 0, unit, 2 * unit, 3 * unit, 65504])
            // The sums start at zero, the first non-negative entry.
            #expect(histogram.prefixSum[1] == 0 && histogram.prefixSquares[1] == 0)
            #expect(histogram.weight(1, 2) == 2)
            #expect(histogram.mean(2, 5) == 2 * unit)
            #expect(histogram.cost(2, 5) == 2 * unit * unit)
            #expect(histogram.cost(1, 4) == 2.75 * unit * unit)
            #expect(histogram.cost(0, 1) == 0)
            #expect(histogram.cost(5, 6) == 0)
        }

        @Test(
            "beside 40,000 weights of −65,504, every search finds the optimal LUT of small subnormal weights",
            arguments: [1.5, 8.5, 15.5])
        func optimalBesideHugeValues(closeValue: Double) throws {
            // Sixteen subnormal values (× 2⁻²²), 1...16 with `closeValue` in place of the integer
            // above it: the one closest pair is `closeValue` and the value half below it, so with
            // −65,504 taking one entry the optimum merges that pair. Summed from −65,504 (2.6·10⁹,
            // spaced 2⁻²¹), the small values' sums and squares were rounded away and the LUT
            // merged another pair.
            let unit = 0x1p-22
            let values = ((1...16).map(Double.init).filter { $0 != closeValue + 0.5 } + [closeValue]).sorted()
            let weights = [Float16](repeating: -65504, count: 40000) + values.map { Float16($0 * unit) }
            let kept = values.filter { $0 != closeValue && $0 != closeValue - 0.5 } + [closeValue - 0.25]
            let lut = [Float16(-65504)] + kept.sorted().map { Float16($0 * unit) }
            for clustering in [PaletteClustering.automatic, .thorough, .heuristic, .thoroughHeuristic, .exact] {
                let tensor = try palettize(weights, rows: 1, columns: weights.count, bits: 4, clustering: clustering)
                #expect(tensor.lut == lut, "\(clustering)")
                // (±0.25 × 2⁻²²)² twice.
                #expect(tensor.squaredError == 0x1p-47, "\(clustering)")
            }
        }

        @Test("folds −0 into +0")
        func negativeZero() throws {
            let tensor = try palettize([-0.0, 0, 1, 2, 3], rows: 1, columns: 5, bits: 2)
            #expect(tensor.squaredError == 0)
            #expect(tensor.lut.map(\.bitPattern) == [Float16(0), 1, 2, 3].map(\.bitPattern))
        }

        @Test("gives each group of rows its own LUT, the last group smaller")
        func smallerLastGroup() throws {
            // Five rows in groups of two: rows 0–1, 2–3 and a last group of row 4 alone.
            let weights: [Float16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
            let tensor = try palettize(
                weights, rows: 5, columns: 2, bits: 2, granularity: .perGroupedChannel(groupSize: 2))
            #expect(tensor.groupRows == 2)
            #expect(tensor.groupCount == 3)
            #expect(tensor.lastGroupRows == 1)
            #expect(Array(tensor.lut(ofGroup: 0)) == [1, 2, 3, 4])
            #expect(Array(tensor.lut(ofGroup: 1)) == [5, 6, 7, 8])
            #expect(Array(tensor.lut(ofGroup: 2)) == [9, 10, 10, 10])
            #expect(tensor.squaredError == 0)
            #expect(tensor.packedIndices == [0xE4, 0xE4, 0x04])
        }

        @Test("records the group layout of every granularity")
        func layouts() throws {
            let weights = [Float16](repeating: 1, count: 12 * 3)
            let perTensor = try palettize(weights, rows: 12, columns: 3, bits: 4)
            #expect([perTensor.groupRows, perTensor.groupCount, perTensor.lastGroupRows] == [12, 1, 12])
            let even = try palettize(
                weights, rows: 12, columns: 3, bits: 4, granularity: .perGroupedChannel(groupSize: 4))
            #expect([even.groupRows, even.groupCount, even.lastGroupRows] == [4, 3, 4])
            let uneven = try palettize(
                weights, rows: 12, columns: 3, bits: 4, granularity: .perGroupedChannel(groupSize: 5))
            #expect([uneven.groupRows, uneven.groupCount, uneven.lastGroupRows] == [5, 3, 2])
            let wide = try palettize(
                weights, rows: 12, columns: 3, bits: 4, granularity: .perGroupedChannel(groupSize: 32))
            #expect([wide.groupRows, wide.groupCount, wide.lastGroupRows] == [32, 1, 12])
            #expect(wide.lut.count == 16)
        }

        @Test("round trip: every weight maps to its nearest LUT entry and the error adds up")
        func roundTrip() throws {
            let rows = 24
            let columns = 96
            let weights = HeavyTailedWeights.make(rows: rows, columns: columns, seed: 1)
            for bits in PaletteSpec.supportedBits {
                for granularity in [PaletteGranularity.perTensor, .perGroupedChannel(groupSize: 5)] {
                    let tensor = try palettize(
                        weights, rows: rows, columns: columns, bits: bits, granularity: granularity)
                    let restored = tensor.dequantized()
                    var squaredError = 0.0
                    var signalPower = 0.0
                    for row in 0..<rows {
                        let lut = tensor.lut(ofGroup: row / tensor.groupRows).map { Double(Float($0)) }
                        #expect(lut == lut.sorted())
                        for column in 0..<columns {
                            let weight = Double(Float(weights[row * columns + column]))
                            let nearest = lut.map { abs($0 - weight) }.min()!
                            let restoredWeight = Double(restored[row * columns + column])
                            #expect(abs(restoredWeight - weight) == nearest)
                            squaredError += (restoredWeight - weight) * (restoredWeight - weight)
                            signalPower += weight * weight
                        }
                    }
                    #expect(abs(squaredError - tensor.squaredError) <= 1e-9 * signalPower)
                    #expect(abs(signalPower - tensor.signalPower) <= 1e-12 * signalPower)
                    // Each extra bit should buy roughly 6 dB; ask for a conservative 4.5 dB per bit.
                    #expect(tensor.sqnrDecibels >= 4.5 * Double(bits), "bits \(bits), \(granularity)")
                }
            }
        }

        @Test("counting without marks, then marking, gives the histogram of counting with marks")
        func countOnlyMatchesAccumulate() throws {
            // Every kind of pattern: both zeros, negatives, subnormals, a run of one value, and
            // patterns at both ends of occupancy words.
            let weights = HeavyTailedWeights.make(rows: 1, columns: 5000, seed: 21).map(\.bitPattern)
            let source =
                weights + [0x0000, 0x8000, 0x8000, 0x0001, 0x803F, 0x0040, 0x7BFF, 0xFBFF]
                + [UInt16](repeating: 0x3C00, count: 300)
            func histogram(_ workspace: PaletteWorkspace) -> [[Double]] {
                let histogram = workspace.extractHistogram()
                let entries = 0...histogram.count
                return [
                    (0..<histogram.count).map { histogram.values[$0] }, entries.map { histogram.prefixCount[$0] },
                    entries.map { histogram.prefixSum[$0] }, entries.map { histogram.prefixSquares[$0] },
                ]
            }
            let marked = PaletteWorkspace()
            let unmarked = PaletteWorkspace()
            let other = PaletteWorkspace()
            source.withUnsafeBufferPointer { buffer in
                guard let base = buffer.baseAddress else { return }
                marked.accumulate(base, count: buffer.count)
                // Split between two workspaces, as workers count a large group.
                unmarked.countOnly(base, count: 3001)
                other.countOnly(base + 3001, count: buffer.count - 3001)
            }
            unmarked.markOccupied()
            other.markOccupied()
            unmarked.absorb(other)
            let expected = histogram(marked)
            #expect(expected[0].count > 1000)
            // Compared whole, reported briefly: the histograms hold thousands of entries.
            let identical = histogram(unmarked) == expected
            #expect(identical)
            // Both are cleared for the next group.
            for workspace in [marked, unmarked, other] { #expect(workspace.extractHistogram().count == 0) }
        }

        @Test("gives identical bytes whatever the worker count")
        func deterministic() throws {
            // 2 groups of 40,000 weights each: large enough to be split across workers.
            let rows = 80
            let columns = 1000
            let weights = HeavyTailedWeights.make(rows: rows, columns: columns, seed: 2)
            for bits in [3, 4] {
                for granularity in [
                    PaletteGranularity.perTensor, .perGroupedChannel(groupSize: 40), .perGroupedChannel(groupSize: 3),
                ] {
                    let reference = try palettize(
                        weights, rows: rows, columns: columns, bits: bits, granularity: granularity, workerCount: 1)
                    for workers in [2, 3, 5] {
                        let again = try palettize(
                            weights, rows: rows, columns: columns, bits: bits, granularity: granularity,
                            workerCount: workers)
                        #expect(again.lut.map(\.bitPattern) == reference.lut.map(\.bitPattern))
                        #expect(again.packedIndices == reference.packedIndices)
                        #expect(again.squaredError.bitPattern == reference.squaredError.bitPattern)
                        #expect(again.signalPower.bitPattern == reference.signalPower.bitPattern)
                    }
                }
            }
        }

        @Test("grouped channels beat one LUT per tensor on heavy-tailed weights")
        func groupedBeatsPerTensor() throws {
            let weights = HeavyTailedWeights.make(rows: 64, columns: 128, seed: 3)
            let perTensor = try palettize(weights, rows: 64, columns: 128, bits: 4)
            let grouped = try palettize(
                weights, rows: 64, columns: 128, bits: 4, granularity: .perGroupedChannel(groupSize: 8))
            #expect(grouped.squaredError < perTensor.squaredError)
        }

        @Test(
            "is no worse than Lloyd's k-means from k-means++ seeds",
            arguments: [
                (bits: 4, groupRows: 32, seed: UInt64(10)),
                (bits: 4, groupRows: 8, seed: 11),
                (bits: 4, groupRows: 5, seed: 12),
                (bits: 2, groupRows: 32, seed: 13),
                (bits: 3, groupRows: 8, seed: 14),
                (bits: 6, groupRows: 32, seed: 15),
                (bits: 4, groupRows: 32, seed: 16),
            ])
        func beatsReferenceKMeans(_ setting: (bits: Int, groupRows: Int, seed: UInt64)) throws {
            let rows = 32
            let columns = 128
            let weights = HeavyTailedWeights.make(rows: rows, columns: columns, seed: setting.seed, outlierRate: 0.001)
            let granularity: PaletteGranularity =
                setting.groupRows == rows ? .perTensor : .perGroupedChannel(groupSize: setting.groupRows)
            let tensor = try palettize(
                weights, rows: rows, columns: columns, bits: setting.bits, granularity: granularity,
                clustering: .heuristic)
            let reference = ReferenceKMeans.tensorError(
                weights, rows: rows, columns: columns, groupRows: setting.groupRows, bits: setting.bits,
                seed: setting.seed)
            #expect(tensor.squaredError <= reference, "ours \(tensor.squaredError), reference \(reference)")
        }

        @Test("refuses bad specs, shapes and weights with exact messages")
        func errors() throws {
            let weights: [Float16] = [1, 2, 3, 4, 5, 6]
            #expect(throws: CompressionError.unsupportedBits(5, tensor: "w")) {
                try palettize(weights, rows: 2, columns: 3, bits: 5)
            }
            #expect(throws: CompressionError.invalidGroupSize(0, tensor: "w")) {
                try palettize(weights, rows: 2, columns: 3, bits: 4, granularity: .perGroupedChannel(groupSize: 0))
            }
            #expect(throws: CompressionError.emptyTensor(rows: 0, columns: 3, tensor: "w")) {
                try palettize([], rows: 0, columns: 3, bits: 4)
            }
            #expect(throws: CompressionError.invalidShape(rows: -1, columns: 3, tensor: "w")) {
                try palettize([], rows: -1, columns: 3, bits: 4)
            }
            #expect(throws: CompressionError.weightCountMismatch(expected: 8, actual: 6, tensor: "w")) {
                try palettize(weights, rows: 2, columns: 4, bits: 4)
            }
            for bad in [Float16.nan, .infinity, -.infinity] {
                #expect(throws: CompressionError.nonFiniteWeight(row: 1, column: 2, tensor: "w")) {
                    try palettize([1, 2, 3, 4, 5, bad], rows: 2, columns: 3, bits: 4)
                }
                let large = [Float16](repeating: 0.5, count: 70_999) + [bad]
                #expect(throws: CompressionError.nonFiniteWeight(row: 70, column: 999, tensor: "w")) {
                    try palettize(large, rows: 71, columns: 1000, bits: 4, workerCount: 3)
                }
            }

            let messages: [(CompressionError, String)] = [
                (
                    .unsupportedBits(5, tensor: "w"),
                    "tensor 'w': unsupported palette size of 5 bits (expected one of: 2, 3, 4, 6, 8)"
                ),
                (
                    .invalidGroupSize(0, tensor: "w"),
                    "tensor 'w': invalid group size 0 (expected at least 1 row per group)"
                ),
                (.emptyTensor(rows: 0, columns: 3, tensor: "w"), "tensor 'w': empty tensor of shape 0 × 3"),
                (.invalidShape(rows: -1, columns: 3, tensor: "w"), "tensor 'w': invalid shape -1 × 3"),
                (
                    .weightCountMismatch(expected: 8, actual: 6, tensor: "w"),
                    "tensor 'w': expected 8 weights but the buffer holds 6"
                ),
                (.nonFiniteWeight(row: 1, column: 2, tensor: "w"), "tensor 'w': non-finite weight at row 1, column 2"),
                (.nonFiniteWeight(row: 1, column: 2, tensor: nil), "non-finite weight at row 1, column 2"),
                (
                    .lutSizeMismatch(expected: 16, actual: 15, tensor: "w"),
                    "tensor 'w': lut holds 15 entries but 16 are needed"
                ),
                (
                    .outputSizeMismatch(expected: 6, actual: 5, tensor: nil),
                    "output buffer holds 5 values but 6 are needed"
                ),
            ]
            for (error, message) in messages { #expect(error.description == message) }
        }

        @Test("checks the sizes of a tensor built from parts and of the dequantisation buffer")
        func partsAndOutput() throws {
            let layout = try PaletteGroupLayout(rows: 2, columns: 3, granularity: .perTensor, tensor: "w")
            #expect(throws: CompressionError.lutSizeMismatch(expected: 16, actual: 15, tensor: "w")) {
                try PalettizedTensor(
                    layout: layout, bits: 4, lut: [Float16](repeating: 0, count: 15), packedIndices: [0, 0, 0],
                    squaredError: 0, signalPower: 0, tensor: "w")
            }
            #expect(throws: CompressionError.packedSizeMismatch(expectedBytes: 3, actualBytes: 2)) {
                try PalettizedTensor(
                    layout: layout, bits: 4, lut: [Float16](repeating: 0, count: 16), packedIndices: [0, 0],
                    squaredError: 0, signalPower: 0)
            }
            let tensor = try palettize([1, 2, 3, 4, 5, 6], rows: 2, columns: 3, bits: 4)
            var short = [Float](repeating: 0, count: 5)
            #expect(throws: CompressionError.outputSizeMismatch(expected: 6, actual: 5, tensor: nil)) {
                try short.withUnsafeMutableBufferPointer { try Palettizer.dequantize(tensor, into: $0) }
            }
        }
    }
}
