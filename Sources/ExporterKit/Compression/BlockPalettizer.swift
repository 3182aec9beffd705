import Foundation

/// A tensor palettised per tile, with its exact sparse outliers (docs/FORMAT.md, `per_block`
/// and `outlier_fraction`).
public struct BlockPalette: Sendable {
    /// Bits per index.
    public let bits: Int
    /// Output channels.
    public let rows: Int
    /// Input columns.
    public let columns: Int
    /// Rows per tile (the last row group may be shorter).
    public let groupRows: Int
    /// Columns per tile (the last column block may be narrower).
    public let blockColumns: Int
    /// `2^bits` float16 entries per tile, ascending; tile `(g, b)` is number `g × blocks + b`.
    public let lut: [Float16]
    /// Every weight's index, packed as docs/FORMAT.md says (outliers included).
    public let packedIndices: [UInt8]
    /// Row-major element numbers of the outliers, strictly ascending.
    public let outlierIndices: [UInt32]
    /// The outliers' exact float16 values, in the order of `outlierIndices`.
    public let outlierValues: [Float16]
    /// `Σ (w − ŵ)²` over the tensor (float16 source).
    public let squaredError: Double
    /// `Σ w²` over the tensor.
    public let signalPower: Double

    /// Column blocks per row group.
    public var blockCount: Int { (columns + blockColumns - 1) / blockColumns }

    /// SQNR in dB against the float16 source.
    public var sqnrDecibels: Double { SignalToNoise.decibels(signalPower: signalPower, squaredError: squaredError) }

    /// The weights the palette and outliers give back, row-major.
    public func dequantized() -> [Float] {
        let entries = 1 << bits
        let blocks = blockCount
        var values = [Float](repeating: 0, count: rows * columns)
        let indices = packedIndices.withUnsafeBufferPointer {
            (try? BitPacking.unpack($0, bits: bits, count: rows * columns)) ?? []
        }
        guard indices.count == rows * columns else { return values }
        for row in 0..<rows {
            for column in 0..<columns {
                let element = row * columns + column
                let tile = (row / groupRows) * blocks + column / blockColumns
                values[element] = Float(lut[tile * entries + Int(indices[element])])
            }
        }
        for (index, value) in zip(outlierIndices, outlierValues) { values[Int(index)] = Float(value) }
        return values
    }
}

/// Palettises a tensor with one LUT per tile of `groupRows` output channels × `blockColumns`
/// input columns, after setting aside its largest weights as exact sparse outliers, optionally
/// weighting each weight by the energy of the activations it multiplies (importance-weighted
/// one-dimensional k-means: the error that matters is `Σ_c E[x_c²] · (w − ŵ)²`).
///
/// Deterministic: row groups are independent, error totals are summed in group order, ties
/// in outlier selection go to the lower element, ties in assignment to the lower index.
public enum BlockPalettizer {
    /// Palettises a `rows × columns` row-major float16 tensor.
    ///
    /// - Parameters:
    ///   - importance: one non-negative weight per input column (activation energy), or nil
    ///     for plain k-means.
    ///   - outlierCount: how many of the largest weights to keep exactly.
    ///   - clustering: how LUT values are chosen.
    /// - Throws: ``CompressionError`` for an unsupported bit width, a tile size below 1, an
    ///   empty shape, a buffer or importance vector of the wrong size, a NaN/infinite weight,
    ///   or a tensor too large for 32-bit outlier indices.
    public static func palettize(
        _ weights: UnsafeBufferPointer<Float16>, rows: Int, columns: Int, bits: Int, groupRows: Int, blockColumns: Int,
        outlierCount: Int = 0, importance: [Float]? = nil, name: String? = nil,
        workerCount: Int = Palettizer.defaultWorkerCount, clustering: PaletteClustering = .automatic
    ) throws -> BlockPalette {
        guard PaletteSpec.supportedBits.contains(bits) else {
            throw CompressionError.unsupportedBits(bits, tensor: name)
        }
        guard groupRows >= 1 else { throw CompressionError.invalidGroupSize(groupRows, tensor: name) }
        guard blockColumns >= 1 else { throw CompressionError.invalidGroupSize(blockColumns, tensor: name) }
        guard rows >= 0, columns >= 0 else {
            throw CompressionError.invalidShape(rows: rows, columns: columns, tensor: name)
        }
        guard rows > 0, columns > 0 else {
            throw CompressionError.emptyTensor(rows: rows, columns: columns, tensor: name)
        }
        let (elements, overflow) = rows.multipliedReportingOverflow(by: columns)
        guard !overflow, elements <= Int(UInt32.max) else {
            throw CompressionError.invalidShape(rows: rows, columns: columns, tensor: name)
        }
        guard weights.count == elements else {
            throw CompressionError.weightCountMismatch(expected: elements, actual: weights.count, tensor: name)
        }
        if let importance, importance.count != columns {
            throw CompressionError.weightCountMismatch(expected: columns, actual: importance.count, tensor: name)
        }
        if let bad = weights.firstIndex(where: { !$0.isFinite }) {
            throw CompressionError.nonFiniteWeight(row: bad / columns, column: bad % columns, tensor: name)
        }
        let columnWeights = normalisedImportance(importance, columns: columns)
        let outliers = selectOutliers(
            weights, columns: columns, count: min(max(outlierCount, 0), elements), importance: columnWeights)
        var isOutlier = [Bool](repeating: false, count: elements)
        for index in outliers { isOutlier[Int(index)] = true }

        let entries = 1 << bits
        let groups = (rows + groupRows - 1) / groupRows
        let blocks = (columns + blockColumns - 1) / blockColumns
        var lut = [Float16](repeating: 0, count: groups * blocks * entries)
        var indices = [UInt8](repeating: 0, count: elements)
        var errors = [Double](repeating: 0, count: groups)
        var signals = [Double](repeating: 0, count: groups)
        let workers = max(1, min(workerCount, groups))
        lut.withUnsafeMutableBufferPointer { lutBuffer in
            indices.withUnsafeMutableBufferPointer { indexBuffer in
                errors.withUnsafeMutableBufferPointer { errorBuffer in
                    signals.withUnsafeMutableBufferPointer { signalBuffer in
                        isOutlier.withUnsafeBufferPointer { outlierBuffer in
                            columnWeights.withUnsafeBufferPointer { importanceBuffer in
                                let output = TileOutputs(
                                    lut: lutBuffer, indices: indexBuffer, errors: errorBuffer, signals: signalBuffer)
                                DispatchQueue.concurrentPerform(iterations: workers) { worker in
                                    let workspace = TileWorkspace()
                                    for group in stride(from: worker, to: groups, by: workers) {
                                        let firstRow = group * groupRows
                                        let lastRow = min(rows, firstRow + groupRows)
                                        var error = 0.0
                                        var signal = 0.0
                                        for block in 0..<blocks {
                                            let firstColumn = block * blockColumns
                                            let lastColumn = min(columns, firstColumn + blockColumns)
                                            let tile = TileBounds(
                                                rows: firstRow..<lastRow, columns: firstColumn..<lastColumn,
                                                width: columns)
                                            let lutStart = (group * blocks + block) * entries
                                            let (tileError, tileSignal) = workspace.palettize(
                                                tile, weights: weights, isOutlier: outlierBuffer,
                                                importance: importanceBuffer,
                                                entries: entries, lut: output.lut.baseAddress.map { $0 + lutStart },
                                                indices: output.indices, clustering: clustering)
                                            error += tileError
                                            signal += tileSignal
                                        }
                                        output.errors[group] = error
                                        output.signals[group] = signal
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        let packed = try indices.withUnsafeBufferPointer { try BitPacking.pack($0, bits: bits) }
        return BlockPalette(
            bits: bits, rows: rows, columns: columns, groupRows: groupRows, blockColumns: blockColumns, lut: lut,
            packedIndices: packed, outlierIndices: outliers, outlierValues: outliers.map { weights[Int($0)] },
            squaredError: errors.reduce(0, +), signalPower: signals.reduce(0, +))
    }

    /// Per-column weights scaled to mean 1, with a floor of 10⁻⁴ so that no column is ignored;
    /// all ones without importance.
    static func normalisedImportance(_ importance: [Float]?, columns: Int) -> [Double] {
        guard let importance else { return [Double](repeating: 1, count: columns) }
        let clean = importance.map { $0.isFinite && $0 > 0 ? Double($0) : 0 }
        let mean = clean.reduce(0, +) / Double(max(columns, 1))
        guard mean > 0 else { return [Double](repeating: 1, count: columns) }
        return clean.map { max($0 / mean, 1e-4) }
    }

    /// The `count` weights of largest `|w| · √importance(column)`, as ascending element numbers
    /// (ties: the lower element first). The `count`-th largest score comes from a min-heap of
    /// the largest seen so far, which almost every weight only compares with its least (a
    /// sort of every score took most of an export's time); no score is stored.
    static func selectOutliers(
        _ weights: UnsafeBufferPointer<Float16>, columns: Int, count: Int, importance: [Double]
    ) -> [UInt32] {
        let count = min(count, weights.count)
        guard count > 0, columns > 0 else { return [] }
        let roots = importance.map { $0.squareRoot() }
        return Float16Table.floats.withUnsafeBufferPointer { floats in
            roots.withUnsafeBufferPointer { roots in
                /// Calls `body` with every element number and score, in element order.
                @inline(__always) func scores(_ body: (Int, Double) -> Void) {
                    for first in stride(from: 0, to: weights.count, by: columns) {
                        for column in 0..<min(columns, weights.count - first) {
                            body(
                                first + column,
                                Double(abs(floats[Int(weights[first + column].bitPattern)])) * roots[column])
                        }
                    }
                }
                var heap = MinHeap(capacity: count)
                scores { _, score in heap.offer(score) }
                let threshold = heap.least
                // Those above the threshold, and those at it (of which the first ones fill the count).
                var above: [UInt32] = []
                var tied: [UInt32] = []
                above.reserveCapacity(count)
                scores { element, score in
                    if score > threshold {
                        above.append(UInt32(element))
                    } else if score == threshold, tied.count < count {
                        tied.append(UInt32(element))
                    }
                }
                let ties = tied.prefix(count - above.count)
                // Both ascending: merged in element order.
                var chosen: [UInt32] = []
                chosen.reserveCapacity(count)
                var (nextAbove, nextTie) = (above.startIndex, ties.startIndex)
                while nextAbove < above.endIndex || nextTie < ties.endIndex {
                    if nextTie == ties.endIndex || (nextAbove < above.endIndex && above[nextAbove] < ties[nextTie]) {
                        chosen.append(above[nextAbove])
                        nextAbove += 1
                    } else {
                        chosen.append(ties[nextTie])
                        nextTie += 1
                    }
                }
                return chosen
            }
        }
    }
}

/// The `capacity` largest values offered, as a binary min-heap: `least` is the smallest of them.
private struct MinHeap {
    private var values: [Double] = []
    private let capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
        values.reserveCapacity(capacity)
    }

    /// The smallest value kept (the `capacity`-th largest offered, once that many were).
    var least: Double { values.first ?? 0 }

    @inline(__always)
    mutating func offer(_ value: Double) {
        if values.count < capacity {
            values.append(value)
            var child = values.count - 1
            while child > 0, values[(child - 1) / 2] > values[child] {
                values.swapAt(child, (child - 1) / 2)
                child = (child - 1) / 2
            }
        } else if value > values[0] {
            values[0] = value
            var parent = 0
            while true {
                var smallest = parent
                let (left, right) = (2 * parent + 1, 2 * parent + 2)
                if left < capacity, values[left] < values[smallest] { smallest = left }
                if right < capacity, values[right] < values[smallest] { smallest = right }
                guard smallest != parent else { break }
                values.swapAt(parent, smallest)
                parent = smallest
            }
        }
    }
}

/// A tile's rows and columns inside a tensor of `width` columns.
private struct TileBounds {
    let rows: Range<Int>
    let columns: Range<Int>
    let width: Int
}

/// Where workers write; each row group's slots are written by one worker.
private struct TileOutputs: @unchecked Sendable {
    let lut: UnsafeMutableBufferPointer<Float16>
    let indices: UnsafeMutableBufferPointer<UInt8>
    let errors: UnsafeMutableBufferPointer<Double>
    let signals: UnsafeMutableBufferPointer<Double>
}

/// One worker's buffers: a palette workspace (occupancy, histogram, k-means scratch, index of
/// each pattern) and the tile's summed importance per float16 pattern.
private final class TileWorkspace {
    let histogram = PaletteWorkspace.borrow()
    /// Importance summed per bit pattern over the tile's non-outlier weights; all zero between tiles.
    let patternWeights = UnsafeMutablePointer<Double>.allocate(capacity: PaletteWorkspace.patternCount)

    init() { patternWeights.initialize(repeating: 0, count: PaletteWorkspace.patternCount) }

    deinit {
        patternWeights.deallocate()
        PaletteWorkspace.giveBack(histogram)
    }

    /// Clusters the tile's non-outlier weights on their importance-weighted histogram, writes
    /// its LUT and every index of the tile; returns its squared error (outliers excluded) and
    /// signal power. Each weight is counted once, by bit pattern (no sort), and each distinct
    /// pattern gets its nearest entry once; outliers, absent from the histogram, search the LUT.
    func palettize(
        _ tile: TileBounds, weights: UnsafeBufferPointer<Float16>, isOutlier: UnsafeBufferPointer<Bool>,
        importance: UnsafeBufferPointer<Double>, entries: Int, lut: UnsafeMutablePointer<Float16>?,
        indices: UnsafeMutableBufferPointer<UInt8>, clustering: PaletteClustering
    ) -> (error: Double, signal: Double) {
        guard let lut else { return (0, 0) }
        let (occupancy, patternWeights) = (histogram.occupancy, self.patternWeights)
        let patterns = UnsafeRawBufferPointer(weights).bindMemory(to: UInt16.self)
        var kept = 0
        for row in tile.rows {
            for column in tile.columns {
                let element = row * tile.width + column
                guard !isOutlier[element] else { continue }
                let pattern = Int(patterns[element])
                patternWeights[pattern] += importance[column]
                occupancy[pattern >> 6] |= 1 &<< UInt64(pattern & 63)
                kept += 1
            }
        }
        let scratch = histogram.kMeans
        let table = scratch.lutValues
        if kept > 0 {
            let sorted = histogram.extractHistogram(.float16, weights: patternWeights)
            let clusters = KMeans1D.solve(
                sorted, clusterLimit: entries, elementCount: kept, scratch: scratch, method: clustering)
            for entry in 0..<entries {
                let value = Palettizer.lutEntry(scratch.centroids[min(entry, clusters - 1)])
                lut[entry] = value
                table[entry] = Double(Float(value))
            }
            _ = histogram.assignIndices(sorted, lut: table, entryCount: entries)
        } else {
            for entry in 0..<entries {
                lut[entry] = 0
                table[entry] = 0
            }
        }
        var error = 0.0
        var signal = 0.0
        let indexOfPattern = histogram.indexOfPattern
        Float16Table.histogramValues.withUnsafeBufferPointer { valueOf in
            for row in tile.rows {
                for column in tile.columns {
                    let element = row * tile.width + column
                    let pattern = Int(patterns[element])
                    let value = valueOf[pattern]
                    let outlier = isOutlier[element]
                    let index =
                        outlier || kept == 0
                        ? Self.nearest(value, in: table, entries: entries) : Int(indexOfPattern[pattern])
                    indices[element] = UInt8(truncatingIfNeeded: index)
                    signal += value * value
                    if !outlier { error += (value - table[index]) * (value - table[index]) }
                }
            }
        }
        return (error, signal)
    }

    /// The entry of `table` nearest `value` (ties to the lower index).
    static func nearest(_ value: Double, in table: UnsafeMutablePointer<Double>, entries: Int) -> Int {
        var best = 0
        var bestDistance = abs(value - table[0])
        for entry in 1..<entries where abs(value - table[entry]) < bestDistance {
            best = entry
            bestDistance = abs(value - table[entry])
        }
        return best
    }
}
