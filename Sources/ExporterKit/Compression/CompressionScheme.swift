/// How one tensor is stored: kept in the compute precision, palettised, or linearly quantised.
public struct CompressionScheme: Equatable, Hashable, Codable, Sendable {
    /// The kind of compression.
    public enum Mode: String, Codable, Sendable, CaseIterable {
        /// Stored as is, in the compute precision.
        case keep
        /// A lookup table of 2^bits float16 values plus packed bits-wide indices.
        case palettize
        /// Symmetric linear quantisation to signed 8-bit integers with float32 scales.
        case linear
    }

    /// Which weights share one lookup table or one scale.
    public enum Granularity: String, Codable, Sendable, CaseIterable {
        /// One for the whole tensor.
        case perTensor = "per_tensor"
        /// One per `group_size` consecutive output channels (palettisation).
        case perGroupedChannel = "per_grouped_channel"
        /// One per output channel (linear quantisation).
        case perChannel = "per_channel"
        /// One LUT per tile of `group_size` output channels × `block_size` input columns
        /// (palettisation): follows weights whose scale changes along the input axis.
        case perBlock = "per_block"
    }

    /// What to do when `group_size` does not divide a tensor's output channels.
    public enum UnevenGroupPolicy: String, Codable, Sendable, CaseIterable {
        /// The last group holds the remaining channels; recorded per tensor in the manifest.
        case smallerLastGroup = "smaller_last_group"
        /// Stop with an error naming the tensor, its channels and the group size.
        case refuse
    }

    /// How palettisation searches for each LUT (docs/FORMAT.md, compression configs).
    public enum Search: String, Codable, Sendable, CaseIterable {
        /// Exact k-means where it is cheap, else a heuristic within about 1% of the optimum.
        case standard
        /// Exact k-means where it is cheap, else a longer heuristic search (within about 0.5%),
        /// at about a quarter more time per group.
        case thorough
        /// Exact k-means everywhere: the least squared error possible, at 10–20 times the
        /// palettiser's time per group.
        case exact
    }

    /// The bit widths palettisation supports.
    public static let paletteBits: Set<Int> = [2, 3, 4, 6, 8]

    /// The kind of compression.
    public var mode: Mode
    /// Bits per index (palettize) or per value (linear: always 8); nil for keep.
    public var bits: Int?
    /// Granularity; nil for keep.
    public var granularity: Granularity?
    /// Output channels per group, for `perGroupedChannel`.
    public var groupSize: Int?
    /// What to do with an uneven last group.
    public var unevenGroups: UnevenGroupPolicy
    /// Input columns per LUT tile, for `perBlock` (the last block may be narrower).
    public var blockSize: Int?
    /// Fraction of a palettised tensor's weights kept exactly as sparse float16 outliers
    /// (`⌊elements × fraction⌋` of them, the largest); nil or 0 for none.
    public var outlierFraction: Double?
    /// How palettisation searches (palettize only); nil means ``Search/standard``.
    public var search: Search?

    /// A scheme; use the static constructors for the common ones.
    public init(
        mode: Mode, bits: Int? = nil, granularity: Granularity? = nil, groupSize: Int? = nil,
        unevenGroups: UnevenGroupPolicy = .smallerLastGroup
    ) {
        self.mode = mode
        self.bits = bits
        self.granularity = granularity
        self.groupSize = groupSize
        self.unevenGroups = unevenGroups
    }

    /// Kept in the compute precision.
    public static let keep = CompressionScheme(mode: .keep)
    /// Int8 per tensor: the iOS token embedding.
    public static let int8PerTensor = CompressionScheme(mode: .linear, bits: 8, granularity: .perTensor)

    /// A palettisation scheme.
    public static func palettize(bits: Int, groupSize: Int?) -> CompressionScheme {
        CompressionScheme(
            mode: .palettize, bits: bits, granularity: groupSize == nil ? .perTensor : .perGroupedChannel,
            groupSize: groupSize)
    }

    enum CodingKeys: String, CodingKey {
        case mode, bits, granularity
        case groupSize = "group_size"
        case unevenGroups = "uneven_groups"
        case blockSize = "block_size"
        case outlierFraction = "outlier_fraction"
        case search
    }

    /// Number of lookup tables or scales for a tensor of `rows` output channels
    /// (for `perBlock`, the row groups; ``lutCount(rows:columns:)`` counts the tiles).
    public func groupCount(rows: Int) -> Int {
        switch granularity {
        case .perGroupedChannel, .perBlock: return rows.dividedRoundingUp(by: max(groupSize ?? 1, 1))
        case .perChannel: return rows
        case .perTensor, nil: return 1
        }
    }

    /// Column blocks of a `columns`-wide tensor: `⌈columns / block_size⌉` for `perBlock`, else 1.
    public func blockCount(columns: Int) -> Int {
        guard granularity == .perBlock else { return 1 }
        return columns.dividedRoundingUp(by: max(blockSize ?? columns, 1))
    }

    /// Lookup tables (or scales) stored for a `rows × columns` tensor.
    public func lutCount(rows: Int, columns: Int) -> Int { groupCount(rows: rows) * blockCount(columns: columns) }

    /// Weights kept exactly as sparse outliers in a tensor of `elements` weights.
    public func outlierCount(elements: Int) -> Int {
        guard mode == .palettize, let outlierFraction, outlierFraction > 0 else { return 0 }
        // In Double first: a fraction read from a hand-edited manifest may be huge.
        let count = (Double(elements) * outlierFraction).rounded(.down)
        return count >= Double(elements) ? elements : Int(count)
    }

    /// Rows in the last group when the group size does not divide `rows` (nil when it does).
    public func lastGroupRows(rows: Int) -> Int? {
        guard granularity == .perGroupedChannel || granularity == .perBlock, let groupSize, groupSize > 0,
            rows % groupSize != 0
        else { return nil }
        return rows % groupSize
    }

    /// Bytes this scheme stores for `tensor`, excluding alignment padding
    /// (indices or values, plus lookup tables or scales).
    public func storedBytes(for tensor: TensorSpec, precision: ComputePrecision) -> Int {
        let elements = tensor.elementCount
        let (rows, columns) = tensor.matrixShape
        switch mode {
        case .keep:
            return elements * precision.bytesPerElement
        case .palettize:
            let bits = bits ?? 4
            return (elements * bits + 7) / 8 + lutCount(rows: rows, columns: columns) * (1 << bits) * 2
                + outlierCount(elements: elements) * 6
        case .linear:
            return elements + groupCount(rows: rows) * 4
        }
    }

    /// A short label such as `4-bit LUT g8`, `int8/tensor` or `fp16`.
    public func label(precision: ComputePrecision) -> String {
        switch mode {
        case .keep: return precision.shortName
        case .palettize:
            let bits = bits ?? 4
            let outliers = (outlierFraction ?? 0) > 0 ? " +outliers" : ""
            if granularity == .perBlock, let groupSize, let blockSize {
                return "\(bits)-bit LUT \(groupSize)x\(blockSize)" + outliers
            }
            if granularity == .perGroupedChannel, let groupSize { return "\(bits)-bit LUT g\(groupSize)" + outliers }
            return "\(bits)-bit LUT/tensor" + outliers
        case .linear:
            return granularity == .perChannel ? "int8/channel" : "int8/tensor"
        }
    }
}

/// The precision weights are computed in on device (and the KV cache is stored in).
public enum ComputePrecision: String, Codable, Sendable, CaseIterable {
    /// IEEE half precision: the presets' choice, and the Neural Engine's.
    case float16
    /// bfloat16: float32's range at half the bytes, less precision than float16.
    case bfloat16
    /// Single precision: twice the KV cache.
    case float32

    /// Bytes of one element.
    public var bytesPerElement: Int { self == .float32 ? 4 : 2 }

    /// `fp16`, `bf16` or `fp32`.
    public var shortName: String {
        switch self {
        case .float16: return "fp16"
        case .bfloat16: return "bf16"
        case .float32: return "fp32"
        }
    }
}
