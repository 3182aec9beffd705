#if _endian(big)
    #error("the weights format is little-endian and written from host memory; big-endian hosts are not supported")
#endif

/// Where every part of every tensor sits in a weights file: header, then each tensor's
/// parts in plan order, each at a multiple of the alignment. Known before any weight is
/// read, because every part's size follows from the plan. Specified in `docs/FORMAT.md`.
public struct WeightsFileLayout: Equatable, Sendable {
    /// The file's magic bytes: ASCII `EXWEIGHT`.
    public static let magic: [UInt8] = Array("EXWEIGHT".utf8)
    /// Format version in the header.
    public static let formatVersion: UInt32 = 1

    /// One part of a tensor.
    public struct Part: Equatable, Sendable {
        /// `values`, `lut`, `indices` or `scales`.
        public let kind: String
        /// Element type: `float16`, `bfloat16`, `float32`, `int8`, or `uint<bits>` for packed indices.
        public let dtype: String
        /// Offset in the file (a multiple of the alignment).
        public let offset: Int
        /// Length in bytes (padding excluded).
        public let bytes: Int
    }

    /// Alignment of every part.
    public let alignment: Int
    /// Parts of each tensor, in plan order.
    public let parts: [[Part]]
    /// Total file size.
    public let fileBytes: Int

    /// The layout of `tensors` stored in `precision`.
    public init(tensors: [PlannedTensor], precision: ComputePrecision, alignment: Int = ExportPlan.blobAlignment) {
        self.alignment = alignment
        var offset = ExportPlan.weightsHeaderBytes
        var all: [[Part]] = []
        for tensor in tensors {
            var tensorParts: [Part] = []
            for (kind, dtype, bytes) in WeightsFileLayout.partSizes(tensor, precision: precision) {
                offset = (offset + alignment - 1) / alignment * alignment
                tensorParts.append(Part(kind: kind, dtype: dtype, offset: offset, bytes: bytes))
                offset += bytes
            }
            all.append(tensorParts)
        }
        parts = all
        fileBytes = (offset + alignment - 1) / alignment * alignment
    }

    /// The parts of a tensor, in file order: keep → values; palettize → lut, indices (then
    /// outlier_indices, outlier_values when it keeps outliers); linear → scales, values.
    static func partSizes(_ tensor: PlannedTensor, precision: ComputePrecision) -> [(String, String, Int)] {
        let elements = tensor.spec.elementCount
        let (rows, columns) = tensor.spec.matrixShape
        let scheme = tensor.scheme
        switch scheme.mode {
        case .keep:
            return [("values", precision.rawValue, elements * precision.bytesPerElement)]
        case .palettize:
            let bits = scheme.bits ?? 4
            let outliers = scheme.outlierCount(elements: elements)
            return [
                ("lut", "float16", scheme.lutCount(rows: rows, columns: columns) * (1 << bits) * 2),
                ("indices", "uint\(bits)", (elements * bits + 7) / 8),
            ]
                + (outliers == 0
                    ? [] : [("outlier_indices", "uint32", outliers * 4), ("outlier_values", "float16", outliers * 2)])
        case .linear:
            return [("scales", "float32", scheme.groupCount(rows: rows) * 4), ("values", "int8", elements)]
        }
    }

    /// The 64-byte header: magic, version, alignment, tensor count, file size, zeros.
    public func header(tensorCount: Int) -> [UInt8] {
        var bytes = WeightsFileLayout.magic
        bytes += withUnsafeBytes(of: WeightsFileLayout.formatVersion.littleEndian, Array.init)
        bytes += withUnsafeBytes(of: UInt32(alignment).littleEndian, Array.init)
        bytes += withUnsafeBytes(of: UInt64(tensorCount).littleEndian, Array.init)
        bytes += withUnsafeBytes(of: UInt64(fileBytes).littleEndian, Array.init)
        bytes += [UInt8](repeating: 0, count: ExportPlan.weightsHeaderBytes - bytes.count)
        return bytes
    }
}
