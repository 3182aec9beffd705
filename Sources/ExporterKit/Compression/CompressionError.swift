/// Why a tensor could not be compressed (palettised or linearly quantised), or a packed
/// index stream could not be read.
///
/// `tensor` carries the tensor's name when the caller gave one; messages then start with
/// `tensor '<name>': `. Messages are short, lowercase and without a trailing period: the
/// printer adds `error: `.
public enum CompressionError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The palette size is not one of ``PaletteSpec/supportedBits``.
    case unsupportedBits(Int, tensor: String?)
    /// A grouped-channel palette with fewer than one row per group.
    case invalidGroupSize(Int, tensor: String?)
    /// A shape with a negative dimension.
    case invalidShape(rows: Int, columns: Int, tensor: String?)
    /// A shape with no weights at all (zero rows or zero columns).
    case emptyTensor(rows: Int, columns: Int, tensor: String?)
    /// The buffer does not hold `rows × columns` weights.
    case weightCountMismatch(expected: Int, actual: Int, tensor: String?)
    /// The first NaN or infinite weight in row-major order.
    case nonFiniteWeight(row: Int, column: Int, tensor: String?)
    /// A palette index that does not fit in the stream's bit width.
    case indexOutOfRange(index: Int, bits: Int)
    /// A packed index stream shorter than its element count needs.
    case packedSizeMismatch(expectedBytes: Int, actualBytes: Int)
    /// A LUT array whose size differs from `groupCount × 2^bits`.
    case lutSizeMismatch(expected: Int, actual: Int, tensor: String?)
    /// An output buffer whose size differs from the tensor's weight count.
    case outputSizeMismatch(expected: Int, actual: Int, tensor: String?)
    /// A tensor read twice (counted, then coded) held a value the first reading did not.
    case changedWhileRead(tensor: String?)

    /// The message printed after `error: `.
    public var description: String {
        switch self {
        case .unsupportedBits(let bits, let tensor):
            let choices = PaletteSpec.supportedBits.map(String.init).joined(separator: ", ")
            return Self.prefix(tensor) + "unsupported palette size of \(bits) bits (expected one of: \(choices))"
        case .invalidGroupSize(let size, let tensor):
            return Self.prefix(tensor) + "invalid group size \(size) (expected at least 1 row per group)"
        case .invalidShape(let rows, let columns, let tensor):
            return Self.prefix(tensor) + "invalid shape \(rows) × \(columns)"
        case .emptyTensor(let rows, let columns, let tensor):
            return Self.prefix(tensor) + "empty tensor of shape \(rows) × \(columns)"
        case .weightCountMismatch(let expected, let actual, let tensor):
            return Self.prefix(tensor) + "expected \(expected) weights but the buffer holds \(actual)"
        case .nonFiniteWeight(let row, let column, let tensor):
            return Self.prefix(tensor) + "non-finite weight at row \(row), column \(column)"
        case .indexOutOfRange(let index, let bits):
            return "palette index \(index) does not fit in \(bits) bits"
        case .packedSizeMismatch(let expectedBytes, let actualBytes):
            return "packed indices hold \(actualBytes) bytes but \(expectedBytes) are needed"
        case .lutSizeMismatch(let expected, let actual, let tensor):
            return Self.prefix(tensor) + "lut holds \(actual) entries but \(expected) are needed"
        case .outputSizeMismatch(let expected, let actual, let tensor):
            return Self.prefix(tensor) + "output buffer holds \(actual) values but \(expected) are needed"
        case .changedWhileRead(let tensor):
            return Self.prefix(tensor)
                + "the checkpoint changed while it was being read (a value its first reading did not hold)"
        }
    }

    private static func prefix(_ tensor: String?) -> String {
        tensor.map { "tensor '\($0)': " } ?? ""
    }
}

extension CompressionError: ExporterError {
    /// Compression fails on weights or specs the tool cannot use: bad input.
    public var exitStatus: ExitStatus { .badInput }
}
