/// Which weights share one lookup table (LUT).
public enum PaletteGranularity: Equatable, Sendable, Codable {
    /// One LUT for the whole tensor.
    case perTensor
    /// Every `groupSize` consecutive output channels (rows) share one LUT.
    ///
    /// When the row count is not a multiple of `groupSize`, the last group is smaller: it
    /// holds `rows % groupSize` rows ("smaller last group" policy). No tensor is skipped.
    case perGroupedChannel(groupSize: Int)
}

/// How to palettise one tensor: the index width and which rows share a LUT.
public struct PaletteSpec: Equatable, Sendable {
    /// The index widths a palette may use; a LUT then has `1 << bits` entries.
    public static let supportedBits: [Int] = [2, 3, 4, 6, 8]

    /// Bits per index (one of ``supportedBits``).
    public var bits: Int
    /// Which rows share a LUT.
    public var granularity: PaletteGranularity

    /// A palette of `1 << bits` entries shared as `granularity` says.
    public init(bits: Int, granularity: PaletteGranularity) {
        self.bits = bits
        self.granularity = granularity
    }

    /// Entries per LUT.
    public var entryCount: Int { 1 << bits }
}

/// How a tensor's rows are cut into LUT groups.
///
/// Group `g` covers rows `g·groupRows ..< min((g+1)·groupRows, rows)`; its weights are the
/// contiguous row-major elements `g·groupRows·columns ..< …`.
public struct PaletteGroupLayout: Equatable, Sendable {
    /// Output channels of the tensor.
    public var rows: Int
    /// Input channels of the tensor.
    public var columns: Int
    /// Rows per group (the nominal group size; `rows` for a per-tensor palette).
    public var groupRows: Int
    /// Number of groups, `ceil(rows / groupRows)`.
    public var groupCount: Int
    /// Rows of the last group: `groupRows`, or `rows % groupRows` when that is not zero.
    public var lastGroupRows: Int

    /// The layout of a `rows × columns` tensor under `granularity`.
    ///
    /// - Throws: ``CompressionError`` for a negative or empty shape or a group size below 1.
    public init(rows: Int, columns: Int, granularity: PaletteGranularity, tensor: String?) throws {
        guard rows >= 0, columns >= 0 else {
            throw CompressionError.invalidShape(rows: rows, columns: columns, tensor: tensor)
        }
        guard rows > 0, columns > 0 else {
            throw CompressionError.emptyTensor(rows: rows, columns: columns, tensor: tensor)
        }
        let groupRows: Int
        switch granularity {
        case .perTensor:
            groupRows = rows
        case .perGroupedChannel(let groupSize):
            guard groupSize >= 1 else { throw CompressionError.invalidGroupSize(groupSize, tensor: tensor) }
            groupRows = groupSize
        }
        self.rows = rows
        self.columns = columns
        self.groupRows = groupRows
        self.groupCount = (rows + groupRows - 1) / groupRows
        let remainder = rows % groupRows
        self.lastGroupRows = remainder == 0 ? groupRows : remainder
    }

    /// Rows in group `group`.
    public func rowCount(ofGroup group: Int) -> Int {
        group == groupCount - 1 ? lastGroupRows : groupRows
    }
}

/// How LUT values are chosen; every method is deterministic.
public enum PaletteClustering: Equatable, Sendable {
    /// Exact k-means when the group's histogram is small enough for it to be cheap,
    /// otherwise ``heuristic``. The default (`"search": "standard"`).
    case automatic
    /// Exact k-means when cheap, otherwise ``thoroughHeuristic`` (`"search": "thorough"`).
    case thorough
    /// Optimal k-means by dynamic programming, O(k·u·log u) for u distinct values: slow on
    /// large groups (`"search": "exact"`).
    case exact
    /// Greedy divisive initialisation, Lloyd iterations on the histogram and one round of
    /// cluster swaps; the full refinement of ``thoroughHeuristic`` for groups of a million
    /// weights or more.
    case heuristic
    /// ``heuristic`` with the full refinement: windowed polish and up to 8 swap rounds.
    case thoroughHeuristic

    /// The clustering a compression config's `search` asks for (nil: standard).
    public init(search: CompressionScheme.Search?) {
        switch search ?? .standard {
        case .standard: self = .automatic
        case .thorough: self = .thorough
        case .exact: self = .exact
        }
    }
}
