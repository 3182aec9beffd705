/// A palettised weight tensor: per group a LUT of `2^bits` Float16 values, and one
/// `bits`-wide index per weight.
///
/// Layout (fixed by the file format):
/// - `lut` holds `groupCount × 2^bits` entries, group-major: entry `e` of group `g` is
///   `lut[g · 2^bits + e]`. Entries ascend (non-strictly) within a group. A group with
///   fewer distinct values than entries repeats its largest value in the unused entries.
/// - Group `g` covers rows `g·groupRows ..< min((g+1)·groupRows, rows)`; the last group
///   has ``lastGroupRows`` rows (smaller when `rows` is not a multiple of `groupRows`).
/// - `packedIndices` is the index stream described in ``BitPacking``, over the whole
///   tensor in row-major order; each index is the nearest LUT entry of its group (ties go
///   to the lower entry, so a repeated entry is never referenced twice).
public struct PalettizedTensor: Equatable, Sendable {
    /// How rows are grouped.
    public let layout: PaletteGroupLayout
    /// Bits per index.
    public let bits: Int
    /// The LUTs, group-major (see the type's documentation).
    public let lut: [Float16]
    /// The index stream (see ``BitPacking``).
    public let packedIndices: [UInt8]
    /// Σ (w − ŵ)² over all weights, ŵ the LUT value the weight's index selects.
    public let squaredError: Double
    /// Σ w² over all weights.
    public let signalPower: Double

    /// A palettised tensor from its parts, checking that their sizes agree.
    ///
    /// - Throws: ``CompressionError`` when `bits` is unsupported, `lut` does not hold
    ///   `groupCount × 2^bits` entries or `packedIndices` does not hold
    ///   `ceil(rows·columns·bits / 8)` bytes.
    public init(
        layout: PaletteGroupLayout, bits: Int, lut: [Float16], packedIndices: [UInt8],
        squaredError: Double, signalPower: Double, tensor: String? = nil
    ) throws {
        guard PaletteSpec.supportedBits.contains(bits) else {
            throw CompressionError.unsupportedBits(bits, tensor: tensor)
        }
        let lutEntries = layout.groupCount << bits
        guard lut.count == lutEntries else {
            throw CompressionError.lutSizeMismatch(expected: lutEntries, actual: lut.count, tensor: tensor)
        }
        let bytes = BitPacking.packedByteCount(count: layout.rows * layout.columns, bits: bits)
        guard packedIndices.count == bytes else {
            throw CompressionError.packedSizeMismatch(expectedBytes: bytes, actualBytes: packedIndices.count)
        }
        self.init(
            unchecked: layout, bits: bits, lut: lut, packedIndices: packedIndices,
            squaredError: squaredError, signalPower: signalPower)
    }

    init(
        unchecked layout: PaletteGroupLayout, bits: Int, lut: [Float16], packedIndices: [UInt8],
        squaredError: Double, signalPower: Double
    ) {
        self.layout = layout
        self.bits = bits
        self.lut = lut
        self.packedIndices = packedIndices
        self.squaredError = squaredError
        self.signalPower = signalPower
    }

    /// Output channels.
    public var rows: Int { layout.rows }
    /// Input channels.
    public var columns: Int { layout.columns }
    /// Rows per LUT (`rows` for a per-tensor palette).
    public var groupRows: Int { layout.groupRows }
    /// Number of LUTs.
    public var groupCount: Int { layout.groupCount }
    /// Rows of the last group (`groupRows` unless the rows do not divide evenly).
    public var lastGroupRows: Int { layout.lastGroupRows }
    /// Entries per LUT, `2^bits`.
    public var entryCount: Int { 1 << bits }
    /// Weights in the tensor.
    public var weightCount: Int { layout.rows * layout.columns }

    /// Signal-to-quantisation-noise ratio in decibels (see ``SignalToNoise``; infinite when exact).
    public var sqnrDecibels: Double {
        SignalToNoise.decibels(signalPower: signalPower, squaredError: squaredError)
    }

    /// Stored bits per weight: packed indices plus the Float16 LUTs.
    public var bitsPerWeight: Double {
        Double(packedIndices.count * 8 + lut.count * 16) / Double(weightCount)
    }

    /// The LUT entries of group `group`.
    public func lut(ofGroup group: Int) -> ArraySlice<Float16> {
        lut[(group * entryCount)..<((group + 1) * entryCount)]
    }
}
