import Foundation

/// Float16 bit patterns as Float, built once: Linux x86-64 builds have no F16C, so a
/// table lookup is much cheaper than the software conversion.
enum Float16Table {
    /// `floats[Int(bits)]` is `Float(Float16(bitPattern: bits))`.
    static let floats: [Float] = (0...UInt16.max).map { Float(Float16(bitPattern: $0)) }

    /// Whether the bit pattern is NaN or ±infinity (all exponent bits set).
    @inline(__always)
    static func isNonFinite(_ bits: UInt16) -> Bool { bits & 0x7C00 == 0x7C00 }

    /// Little-endian float16 values (as stored in a bundle) as Float, by table.
    static func floats(littleEndian raw: UnsafeRawBufferPointer) -> [Float] {
        [Float](unsafeUninitializedCapacity: raw.count / 2) { output, initialized in
            floats(littleEndian: raw, into: output)
            initialized = raw.count / 2
        }
    }

    /// Writes little-endian float16 values as Float to the start of `output`, by table.
    static func floats(littleEndian raw: UnsafeRawBufferPointer, into output: UnsafeMutableBufferPointer<Float>) {
        floats.withUnsafeBufferPointer { floats in
            for (index, bits) in raw.bindMemory(to: UInt16.self).enumerated() {
                output[index] = floats[Int(UInt16(littleEndian: bits))]
            }
        }
    }

    /// `fromBFloat16[Int(bits)]` is the float16 pattern the checkpoint reader converts the
    /// bfloat16 pattern `bits` to (the same conversion, run once over every pattern). Only
    /// magnitudes below ``bfloat16Unconvertible`` are finite in float16 and used.
    static let fromBFloat16: [UInt16] = {
        let every = (0...UInt16.max).map { $0 }
        var converted = [Float16](repeating: 0, count: every.count)
        every.withUnsafeBufferPointer { source in
            converted.withUnsafeMutableBufferPointer { output in
                _ = PrecisionConversion.toFloat16(bfloat16Bits: source, into: output, clampingOutOfRange: false)
            }
        }
        return converted.map(\.bitPattern)
    }()

    /// The smallest bfloat16 magnitude pattern (sign bit clear) beyond float16's range (65,536).
    static let bfloat16Unconvertible: UInt16 = 0x4780

    /// `histogramValues[Int(bits)]`: the value a float16 pattern counts as in a palette's
    /// histogram, −0 as +0 (the two never take two LUT entries, and a LUT never holds −0).
    static let histogramValues: [Double] = (0...UInt16.max).map { $0 == 0x8000 ? 0 : Double(floats[Int($0)]) }

    /// The same for bfloat16 patterns, through their float16 conversion (``fromBFloat16``).
    static let bfloat16HistogramValues: [Double] = fromBFloat16.map { histogramValues[Int($0)] }
}

/// How the 16-bit patterns a tensor is stored as (and compression counts) become values.
public enum SourcePatterns: Sendable {
    /// Float16 bit patterns.
    case float16
    /// bfloat16 bit patterns, each worth its float16 conversion (``Float16Table/fromBFloat16``).
    case bfloat16

    /// The smallest magnitude pattern that has no finite float16 value.
    var firstUnusable: UInt16 { self == .float16 ? 0x7C00 : Float16Table.bfloat16Unconvertible }
}

/// Per-worker buffers for palettising one group at a time: a 65,536-entry count table
/// indexed by Float16 bit pattern, an occupancy bitmap so that only touched entries are
/// read back and cleared (a small group touches a few thousand of them), the sorted
/// histogram, and the bit-pattern → palette-index table used to encode.
final class PaletteWorkspace {
    static let patternCount = 1 << 16

    /// Weights seen per bit pattern; all zero between groups.
    let counts = UnsafeMutablePointer<UInt32>.allocate(capacity: patternCount)
    /// Bit `p & 63` of word `p >> 6` is set when pattern `p` was seen; all zero between groups.
    let occupancy = UnsafeMutablePointer<UInt64>.allocate(capacity: patternCount / 64)
    /// Distinct bit patterns in ascending value order.
    let patterns = UnsafeMutablePointer<UInt16>.allocate(capacity: patternCount)
    let values = UnsafeMutablePointer<Double>.allocate(capacity: patternCount + 1)
    let prefixCount = UnsafeMutablePointer<Double>.allocate(capacity: patternCount + 1)
    let prefixSum = UnsafeMutablePointer<Double>.allocate(capacity: patternCount + 1)
    let prefixSquares = UnsafeMutablePointer<Double>.allocate(capacity: patternCount + 1)
    /// Palette index of each bit pattern of the current group (only its patterns are valid).
    let indexOfPattern = UnsafeMutablePointer<UInt8>.allocate(capacity: patternCount)
    /// Where each histogram entry's patterns start in `patterns` (patterns of equal value
    /// share an entry), plus the end of the last: `count + 1` entries.
    let entryStart = UnsafeMutablePointer<Int32>.allocate(capacity: patternCount + 1)
    let kMeans = KMeansScratch()

    /// Workspaces kept between tensors: a fresh one costs page faults on 2.5 MB and zeroing
    /// 330 KB, once per worker per tensor.
    private static let pool = WorkspacePool()

    /// A workspace from the pool, or a new one.
    static func borrow() -> PaletteWorkspace { pool.take() ?? PaletteWorkspace() }

    /// Returns a workspace whose counts are all zero (as after ``extractHistogram()`` or ``reset()``).
    static func giveBack(_ workspace: PaletteWorkspace) { pool.put(workspace) }

    init() {
        counts.initialize(repeating: 0, count: Self.patternCount)
        occupancy.initialize(repeating: 0, count: Self.patternCount / 64)
        indexOfPattern.initialize(repeating: 0, count: Self.patternCount)
    }

    deinit {
        counts.deallocate()
        occupancy.deallocate()
        patterns.deallocate()
        values.deallocate()
        prefixCount.deallocate()
        prefixSum.deallocate()
        prefixSquares.deallocate()
        indexOfPattern.deallocate()
        entryStart.deallocate()
    }

    /// Counts `count` weights given as bit patterns.
    @inline(__always)
    func accumulate(_ source: UnsafePointer<UInt16>, count: Int) {
        let counts = self.counts
        let occupancy = self.occupancy
        for element in 0..<count {
            let pattern = Int(source[element])
            counts[pattern] &+= 1
            occupancy[pattern >> 6] |= 1 &<< UInt64(pattern & 63)
        }
    }

    /// Groups of at least this many weights are counted without occupancy marks and marked
    /// afterwards (``countOnly(_:count:)``). The marking pass costs as much as marking about
    /// 16,000 weights one by one: 30 % less time counting a group of 32 rows of 1,536
    /// bfloat16 weights, 10 % more for 8 rows.
    static let countOnlyElements = 1 << 15

    /// Counts a whole group of `count` weights, marks included, the cheaper way for its size.
    func countGroup(_ source: UnsafePointer<UInt16>, count: Int) {
        if count >= Self.countOnlyElements {
            countOnly(source, count: count)
            markOccupied()
        } else {
            accumulate(source, count: count)
        }
    }

    /// Counts `count` weights without marking ``occupancy``; ``markOccupied()`` must follow
    /// before the counts are read. For large groups: the mark is a second store per weight,
    /// and stores, about one per cycle, bound the counting.
    @inline(__always)
    func countOnly(_ source: UnsafePointer<UInt16>, count: Int) {
        let counts = self.counts
        for element in 0..<count { counts[Int(source[element])] &+= 1 }
    }

    /// Sets the ``occupancy`` bit of every pattern counted so far, from one pass over the
    /// counts: about 5 µs on bfloat16 weights, most of the 1,024 words of 64 counts being
    /// empty and skipped after a check the compiler vectorises (27 µs without it).
    func markOccupied() {
        let (counts, occupancy) = (self.counts, self.occupancy)
        for word in 0..<(Self.patternCount / 64) {
            let wordCounts = counts + (word << 6)
            var any: UInt32 = 0
            for bit in 0..<64 { any |= wordCounts[bit] }
            guard any != 0 else { continue }
            var bits: UInt64 = 0
            for bit in 0..<64 where wordCounts[bit] != 0 { bits |= 1 &<< UInt64(bit) }
            occupancy[word] |= bits
        }
    }

    /// Adds another worker's counts to these and clears the other's.
    func absorb(_ other: PaletteWorkspace) {
        for word in 0..<(Self.patternCount / 64) {
            var bitsLeft = other.occupancy[word]
            guard bitsLeft != 0 else { continue }
            occupancy[word] |= bitsLeft
            other.occupancy[word] = 0
            while bitsLeft != 0 {
                let pattern = word << 6 | bitsLeft.trailingZeroBitCount
                counts[pattern] &+= other.counts[pattern]
                other.counts[pattern] = 0
                bitsLeft &= bitsLeft &- 1
            }
        }
    }

    /// Whether any pattern without a finite float16 value was counted (for float16: NaN and
    /// infinities, 0x7C00–0x7FFF and 0xFC00–0xFFFF), checked on the occupancy words without
    /// touching the weights again. The boundaries are multiples of 64, so whole words.
    func sawUnusable(_ source: SourcePatterns) -> Bool {
        let firstWord = Int(source.firstUnusable) >> 6
        for word in firstWord..<512 where occupancy[word] != 0 || occupancy[word + 512] != 0 { return true }
        return false
    }

    /// Forgets everything counted (after an error).
    func reset() {
        counts.update(repeating: 0, count: Self.patternCount)
        occupancy.update(repeating: 0, count: Self.patternCount / 64)
    }

    /// Turns the counts into a ``SortedHistogram`` (ascending values; patterns of equal value,
    /// such as −0 and +0 or bfloat16 values that round to one float16, share an entry, −0
    /// counting as +0) and clears the counts for the next group. Requires no unusable pattern.
    /// With `weights`, each occupied pattern weighs `weights[pattern]` instead of its count
    /// (the tiled palettiser's activation-weighted histogram), and those are cleared instead.
    ///
    /// The sums and squares are accumulated outward from zero (``SortedHistogram``): from the
    /// first non-negative entry up, and from the last negative entry down, so that the sums of
    /// a run of small values are never the difference of sums that hold large ones.
    func extractHistogram(_ source: SourcePatterns = .float16, weights: UnsafeMutablePointer<Double>? = nil)
        -> SortedHistogram
    {
        // Locals, not properties: stores through these pointers could alias `self` as far as
        // the compiler knows, and it would reload every property after each one.
        let (counts, occupancy, patterns, entryStart) = (self.counts, self.occupancy, self.patterns, self.entryStart)
        let (values, prefixCount, prefixSum, prefixSquares) = (
            self.values, self.prefixCount, self.prefixSum, self.prefixSquares
        )
        var distinct = 0
        var seen = 0
        // NaN equals nothing, so the first value always starts an entry.
        var previousValue = Double.nan
        var runningCount = 0.0
        var runningSum = 0.0
        var runningSquares = 0.0
        prefixCount[0] = 0
        prefixSum[0] = 0
        prefixSquares[0] = 0
        let table = source == .float16 ? Float16Table.histogramValues : Float16Table.bfloat16HistogramValues
        table.withUnsafeBufferPointer { valueOf in
            /// `ownSums`: each entry's sums start from zero (the negative walk), instead of
            /// running on from the previous entry's.
            @inline(__always) func emit(_ pattern: Int, ownSums: Bool) {
                let weight: Double
                if let weights {
                    weight = weights[pattern]
                    weights[pattern] = 0
                } else {
                    weight = Double(counts[pattern])
                    counts[pattern] = 0
                }
                let value = valueOf[pattern]
                if value != previousValue {
                    values[distinct] = value
                    entryStart[distinct] = Int32(truncatingIfNeeded: seen)
                    previousValue = value
                    distinct += 1
                    if ownSums {
                        runningSum = 0
                        runningSquares = 0
                    }
                }
                runningCount += weight
                runningSum += weight * value
                runningSquares += weight * value * value
                prefixCount[distinct] = runningCount
                prefixSum[distinct] = runningSum
                prefixSquares[distinct] = runningSquares
                patterns[seen] = UInt16(truncatingIfNeeded: pattern)
                seen += 1
            }
            // Negative values: larger patterns are more negative, so walk patterns downwards.
            // Each entry's own sums first; accumulated below.
            for word in stride(from: 1023, through: 512, by: -1) {
                var bitsLeft = occupancy[word]
                guard bitsLeft != 0 else { continue }
                occupancy[word] = 0
                while bitsLeft != 0 {
                    let bit = 63 - bitsLeft.leadingZeroBitCount
                    emit(word << 6 | bit, ownSums: true)
                    bitsLeft &= ~(1 &<< UInt64(bit))
                }
            }
            // Accumulate the negative entries downward from the first non-negative one (−0
            // counts as +0 and may already have started it), whose prefix is zero.
            let anchor = distinct > 0 && values[distinct - 1] == 0 ? distinct - 1 : distinct
            var sumBelow = 0.0
            var squaresBelow = 0.0
            for entry in stride(from: anchor - 1, through: 0, by: -1) {
                let (entrySum, entrySquares) = (prefixSum[entry + 1], prefixSquares[entry + 1])
                prefixSum[entry + 1] = sumBelow
                prefixSquares[entry + 1] = squaresBelow
                sumBelow -= entrySum
                squaresBelow -= entrySquares
            }
            prefixSum[0] = sumBelow
            prefixSquares[0] = squaresBelow
            // Non-negative values accumulate upward from the anchor's zero (a zero entry
            // started by −0 holds no sum).
            runningSum = 0
            runningSquares = 0
            // Non-negative values: patterns ascend with the value.
            for word in 0..<512 {
                var bitsLeft = occupancy[word]
                guard bitsLeft != 0 else { continue }
                occupancy[word] = 0
                while bitsLeft != 0 {
                    emit(word << 6 | bitsLeft.trailingZeroBitCount, ownSums: false)
                    bitsLeft &= bitsLeft &- 1
                }
            }
        }
        entryStart[distinct] = Int32(truncatingIfNeeded: seen)
        return SortedHistogram(
            count: distinct, values: values, prefixCount: prefixCount, prefixSum: prefixSum,
            prefixSquares: prefixSquares)
    }

    /// Fills `indexOfPattern` for the histogram's patterns with the nearest entry of the
    /// ascending `lut` (ties to the lower index) and returns the squared error of that
    /// assignment and the signal power.
    ///
    /// Each LUT entry takes a run of histogram entries, found by searching for the midpoint
    /// with the next entry; its error comes from the run's prefix sums in O(1)
    /// (Σw(v − c)² = Σwv² − 2cΣwv + c²Σw), so the cost is per LUT entry and per pattern,
    /// with no arithmetic per pattern.
    func assignIndices(
        _ histogram: SortedHistogram, lut: UnsafePointer<Double>, entryCount: Int
    ) -> (squaredError: Double, signalPower: Double) {
        var squaredError = 0.0
        var start = 0
        for index in 0..<entryCount {
            // Values up to the midpoint with the next LUT value (inclusive) take this index.
            let end =
                index == entryCount - 1
                ? histogram.count
                : KMeans1D.firstIndexAbove((lut[index] + lut[index + 1]) * 0.5, in: histogram, low: start, hint: start)
            guard end > start else { continue }
            let centroid = lut[index]
            let weight = histogram.weight(start, end)
            if end - start == 1 {
                // One value: its error directly, zero when the LUT holds it. From the sums, large
                // values beside it left rounding (10⁻¹⁰ beside ±1,000), and a tensor the LUTs
                // reproduce exactly had a finite SQNR.
                let difference = histogram.values[start] - centroid
                squaredError += weight * difference * difference
            } else {
                let sum = histogram.sum(start, end)
                let squares = histogram.prefixSquares[end] - histogram.prefixSquares[start]
                // Rounding can make a near-zero error slightly negative.
                squaredError += max(0, squares - 2 * centroid * sum + centroid * centroid * weight)
            }
            let code = UInt8(truncatingIfNeeded: index)
            for seen in Int(entryStart[start])..<Int(entryStart[end]) { indexOfPattern[Int(patterns[seen])] = code }
            start = end
        }
        return (squaredError, histogram.prefixSquares[histogram.count] - histogram.prefixSquares[0])
    }
}

/// A few idle ``PaletteWorkspace``s, shared by every palettisation in the process.
private final class WorkspacePool: @unchecked Sendable {
    private let lock = NSLock()
    private var idle: [PaletteWorkspace] = []
    /// Enough for every worker of two concurrent palettisations.
    private let limit = 2 * SystemResources.activeCores

    func take() -> PaletteWorkspace? { lock.withLock { idle.popLast() } }

    func put(_ workspace: PaletteWorkspace) {
        lock.withLock { if idle.count < limit { idle.append(workspace) } }
    }
}
