import Testing

@testable import ExporterKit

@Suite("protobuf encoder")
struct ProtobufWriterTests {
    @Test("varints, signed and unsigned, as the wire format specifies")
    func varints() {
        var writer = ProtobufWriter()
        writer.uint(1, 150)
        #expect(writer.bytes == [0x08, 0x96, 0x01])
        writer = ProtobufWriter()
        writer.int(2, -1)
        #expect(writer.bytes == [0x10] + [UInt8](repeating: 0xFF, count: 9) + [0x01])
        writer = ProtobufWriter()
        writer.uint(502, 0)
        #expect(writer.bytes == [0xB0, 0x1F, 0x00])  // (502 << 3) | 0 = 4016
        // 127 is the largest one-byte varint, 128 the smallest two-byte one.
        writer = ProtobufWriter()
        writer.uint(1, 127)
        #expect(writer.bytes == [0x08, 0x7F])
        writer = ProtobufWriter()
        writer.uint(1, 128)
        #expect(writer.bytes == [0x08, 0x80, 0x01])
        writer = ProtobufWriter()
        writer.bool(3, true)
        #expect(writer.bytes == [0x18, 0x01])
    }

    @Test("length-delimited fields, nested messages and packed values")
    func lengthDelimited() {
        var writer = ProtobufWriter()
        writer.string(2, "testing")
        #expect(writer.bytes == [0x12, 0x07] + Array("testing".utf8))
        writer = ProtobufWriter()
        writer.message(3) { $0.uint(1, 150) }
        #expect(writer.bytes == [0x1A, 0x03, 0x08, 0x96, 0x01])
        writer = ProtobufWriter()
        writer.packedInts(4, [3, 270, 86942])
        #expect(writer.bytes == [0x22, 0x06, 0x03, 0x8E, 0x02, 0x9E, 0xA7, 0x05])
        writer = ProtobufWriter()
        writer.packedFloats(1, [1])
        #expect(writer.bytes == [0x0A, 0x04, 0x00, 0x00, 0x80, 0x3F])
        writer = ProtobufWriter()
        writer.map(2, [(key: "a", value: 1)]) { $0.uint(2, UInt64($1)) }
        #expect(writer.bytes == [0x12, 0x05, 0x0A, 0x01, 0x61, 0x10, 0x01])
    }

    @Test("Core ML messages use the schema's field numbers")
    func coreMLMessages() {
        let type = CoreMLSpec.TensorType(.float16, [.fixed(2), .unknown])
        // dataType = 10, rank = 2, dimensions: constant { size: 2 }, unknown {}.
        #expect(
            type.serialized == [0x08, 0x0A, 0x10, 0x02, 0x1A, 0x04, 0x0A, 0x02, 0x08, 0x02, 0x1A, 0x02, 0x12, 0x00])
        let value = CoreMLSpec.Value(
            type: .tensor(CoreMLSpec.TensorType(.uint4, fixed: [])),
            contents: .blob(file: "@model_path/weights/weight.bin", offset: 64))
        let encoded = value.serialized
        // type { tensorType { dataType: UINT4 (35), rank: 0 } }
        #expect(Array(encoded.prefix(8)) == [0x12, 0x06, 0x0A, 0x04, 0x08, 0x23, 0x10, 0x00])
        #expect(encoded[8] == 0x2A)  // blobFileValue is field 5
        #expect(Array(encoded.suffix(2)) == [0x10, 0x40])  // offset: 64
    }
}
