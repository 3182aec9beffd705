/// An element type of a safetensors tensor, spelled as in the file header (`"BF16"`, `"F32"`, …).
///
/// Every dtype the format defines is known so that a header naming one parses; only
/// `bf16`, `f16` and `f32` can be read as floating-point weights.
public enum TensorDType: String, CaseIterable, Sendable {
    /// Boolean, one byte per element.
    case bool = "BOOL"
    /// 4-bit float (E2M1), two elements per byte.
    case f4 = "F4"
    /// 6-bit float with 2 exponent and 3 mantissa bits.
    case f6E2M3 = "F6_E2M3"
    /// 6-bit float with 3 exponent and 2 mantissa bits.
    case f6E3M2 = "F6_E3M2"
    /// Unsigned 8-bit integer.
    case u8 = "U8"
    /// Signed 8-bit integer.
    case i8 = "I8"
    /// 8-bit float with 5 exponent and 2 mantissa bits.
    case f8E5M2 = "F8_E5M2"
    /// 8-bit float with 4 exponent and 3 mantissa bits.
    case f8E4M3 = "F8_E4M3"
    /// 8-bit exponent-only scale (microscaling formats).
    case f8E8M0 = "F8_E8M0"
    /// Signed 16-bit integer.
    case i16 = "I16"
    /// Unsigned 16-bit integer.
    case u16 = "U16"
    /// IEEE 754 half precision.
    case f16 = "F16"
    /// bfloat16: the upper half of an IEEE 754 single.
    case bf16 = "BF16"
    /// Signed 32-bit integer.
    case i32 = "I32"
    /// Unsigned 32-bit integer.
    case u32 = "U32"
    /// IEEE 754 single precision.
    case f32 = "F32"
    /// Complex number of two singles.
    case c64 = "C64"
    /// IEEE 754 double precision.
    case f64 = "F64"
    /// Signed 64-bit integer.
    case i64 = "I64"
    /// Unsigned 64-bit integer.
    case u64 = "U64"

    /// Bits per element; sub-byte dtypes pack elements without padding.
    public var bitsPerElement: Int {
        switch self {
        case .f4: return 4
        case .f6E2M3, .f6E3M2: return 6
        case .bool, .u8, .i8, .f8E5M2, .f8E4M3, .f8E8M0: return 8
        case .i16, .u16, .f16, .bf16: return 16
        case .i32, .u32, .f32: return 32
        case .c64, .f64, .i64, .u64: return 64
        }
    }

    /// Whether tensors of this dtype can be read as `Float16` or `Float` weights.
    public var isReadableAsFloat: Bool {
        switch self {
        case .bf16, .f16, .f32: return true
        default: return false
        }
    }

    /// A config's `torch_dtype` spellings of the dtypes a checkpoint may store weights in.
    private static let byTorchDType: KeyValuePairs<String, TensorDType> = [
        "bfloat16": .bf16, "float16": .f16, "float32": .f32,
    ]

    /// The `torch_dtype` values ``init(torchDType:)`` knows, as a config spells them.
    public static var torchDTypeNames: [String] { byTorchDType.map(\.key) }

    /// The dtype a config's `torch_dtype` names (`bfloat16`, `float16`, `float32`); nil for
    /// any other or none.
    public init?(torchDType: String?) {
        guard let found = Self.byTorchDType.first(where: { $0.key == torchDType }) else { return nil }
        self = found.value
    }

    /// The 16-bit patterns compression reads a tensor of this dtype as
    /// (``WeightSource/storedPatterns(_:)``): bfloat16 and float16 as stored, float32
    /// converted to float16 as it is read; nil for any other dtype.
    public var compressionPatterns: SourcePatterns? {
        switch self {
        case .bf16: return .bfloat16
        case .f16, .f32: return .float16
        default: return nil
        }
    }

    /// Whether values of this dtype can lie beyond float16's range (bfloat16, float32).
    public var mayExceedFloat16: Bool { self == .bf16 || self == .f32 }

    /// The number of bytes `elementCount` elements occupy, or nil when it overflows `Int`
    /// or sub-byte elements do not fill whole bytes.
    public func byteCount(elementCount: Int) -> Int? {
        let (bits, overflow) = elementCount.multipliedReportingOverflow(by: bitsPerElement)
        guard !overflow, bits % 8 == 0 else { return nil }
        return bits / 8
    }
}

extension TensorDType: CustomStringConvertible {
    /// The header spelling, e.g. `BF16`.
    public var description: String { rawValue }
}
