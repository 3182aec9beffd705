/// A protocol-buffers encoder (proto3 wire format): varints, fixed-width numbers,
/// length-delimited fields and nested messages. Small and general: the Core ML message
/// types (``CoreMLSpec``) are written with it, field by field, in field-number order, so
/// the same message always gives the same bytes.
public struct ProtobufWriter {
    /// Wire types of the protocol-buffers encoding.
    public enum WireType: UInt64 {
        /// Varint: int32, int64, uint32, uint64, bool, enum.
        case varint = 0
        /// 8 bytes little-endian: fixed64, double.
        case fixed64 = 1
        /// A varint length, then that many bytes: strings, bytes, messages, packed repeated fields.
        case lengthDelimited = 2
        /// 4 bytes little-endian: fixed32, float.
        case fixed32 = 5
    }

    /// The bytes written so far.
    public private(set) var bytes: [UInt8] = []

    /// An empty writer.
    public init() {}

    /// Appends a raw varint.
    public mutating func appendVarint(_ value: UInt64) {
        var remaining = value
        while remaining >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: remaining) | 0x80)
            remaining >>= 7
        }
        bytes.append(UInt8(remaining))
    }

    /// Appends a field key: `(field << 3) | wire type`.
    public mutating func appendKey(_ field: Int, _ wireType: WireType) {
        appendVarint(UInt64(field) << 3 | wireType.rawValue)
    }

    /// An unsigned varint field (uint32, uint64).
    public mutating func uint(_ field: Int, _ value: UInt64) {
        appendKey(field, .varint)
        appendVarint(value)
    }

    /// A signed varint field (int32, int64, enum): negative values take ten bytes, as proto3 says.
    public mutating func int(_ field: Int, _ value: Int64) {
        appendKey(field, .varint)
        appendVarint(UInt64(bitPattern: value))
    }

    /// A bool field.
    public mutating func bool(_ field: Int, _ value: Bool) {
        appendKey(field, .varint)
        appendVarint(value ? 1 : 0)
    }

    /// A float field (fixed32).
    public mutating func float(_ field: Int, _ value: Float) {
        appendKey(field, .fixed32)
        appendLittleEndian(UInt64(value.bitPattern), byteCount: 4)
    }

    /// A double field (fixed64).
    public mutating func double(_ field: Int, _ value: Double) {
        appendKey(field, .fixed64)
        appendLittleEndian(value.bitPattern, byteCount: 8)
    }

    /// A string field (UTF-8).
    public mutating func string(_ field: Int, _ value: String) {
        bytes(field, Array(value.utf8))
    }

    /// A bytes field.
    public mutating func bytes(_ field: Int, _ value: [UInt8]) {
        appendKey(field, .lengthDelimited)
        appendVarint(UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    /// A nested message, written by `body` into its own writer, then length-prefixed.
    public mutating func message(_ field: Int, _ body: (inout ProtobufWriter) -> Void) {
        var nested = ProtobufWriter()
        body(&nested)
        bytes(field, nested.bytes)
    }

    /// A nested message value.
    public mutating func message<M: ProtobufMessage>(_ field: Int, _ value: M) {
        message(field) { value.encode(into: &$0) }
    }

    /// A packed repeated varint field of signed values (repeated int32/int64/enum).
    public mutating func packedInts(_ field: Int, _ values: [Int64]) {
        var nested = ProtobufWriter()
        for value in values { nested.appendVarint(UInt64(bitPattern: value)) }
        bytes(field, nested.bytes)
    }

    /// A packed repeated varint field of unsigned values (repeated uint64).
    public mutating func packedUInts(_ field: Int, _ values: [UInt64]) {
        var nested = ProtobufWriter()
        for value in values { nested.appendVarint(value) }
        bytes(field, nested.bytes)
    }

    /// A packed repeated bool field.
    public mutating func packedBools(_ field: Int, _ values: [Bool]) {
        packedUInts(field, values.map { $0 ? 1 : 0 })
    }

    /// A packed repeated float field.
    public mutating func packedFloats(_ field: Int, _ values: [Float]) {
        var nested = ProtobufWriter()
        for value in values { nested.appendLittleEndian(UInt64(value.bitPattern), byteCount: 4) }
        bytes(field, nested.bytes)
    }

    /// A map field: one entry message per pair (`key` field 1, value field 2), in the
    /// order given (callers sort the keys so the bytes do not depend on hashing).
    public mutating func map<V>(
        _ field: Int, _ entries: [(key: String, value: V)], value: (inout ProtobufWriter, V) -> Void
    ) {
        for entry in entries {
            message(field) { writer in
                writer.string(1, entry.key)
                value(&writer, entry.value)
            }
        }
    }

    private mutating func appendLittleEndian(_ value: UInt64, byteCount: Int) {
        for index in 0..<byteCount { bytes.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(index)))) }
    }
}

/// A message that encodes itself with a ``ProtobufWriter``.
public protocol ProtobufMessage {
    /// Writes the message's fields (not a length prefix) into `writer`.
    func encode(into writer: inout ProtobufWriter)
}

extension ProtobufMessage {
    /// The message's bytes.
    public var serialized: [UInt8] {
        var writer = ProtobufWriter()
        encode(into: &writer)
        return writer.bytes
    }
}
