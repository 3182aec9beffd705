import Foundation

/// What a sentencepiece `tokenizer.model` says of its vocabulary, read from its protobuf
/// (`ModelProto`: field 1 repeats the pieces, each a `SentencePiece` whose field 1 is its text)
/// without a protobuf library: how many pieces, whose ids are their positions, and which
/// reasoning markers are among them.
struct SentencePieceModel {
    /// The pieces the model holds: its highest id is one less.
    private(set) var count = 0
    /// The ``TokenizerFiles/reasoningMarkers`` that are pieces.
    private(set) var markers: Set<String> = []

    /// Reads `data`; what is malformed ends the reading, keeping what came before it.
    init(_ data: Data) {
        let wanted = Set(TokenizerFiles.reasoningMarkers.map { Array($0.utf8) })
        data.withUnsafeBytes { bytes in
            var reader = ProtobufReader(bytes: bytes[...])
            while let (field, value) = reader.next() {
                guard field == 1, case .bytes(let piece) = value else { continue }
                count += 1
                var inner = ProtobufReader(bytes: piece)
                while let (pieceField, pieceValue) = inner.next() {
                    guard pieceField == 1, case .bytes(let text) = pieceValue else { continue }
                    if wanted.contains(Array(text)) { markers.insert(String(decoding: text, as: UTF8.self)) }
                    break
                }
            }
        }
    }
}

/// The fields of a protobuf message, one after the other: each field's number and its value,
/// a length-delimited one's bytes; nil at the end or at anything malformed.
private struct ProtobufReader {
    enum Value {
        case number
        case bytes(Slice<UnsafeRawBufferPointer>)
    }

    var bytes: Slice<UnsafeRawBufferPointer>

    mutating func next() -> (field: UInt64, value: Value)? {
        guard let tag = varint(), tag >> 3 > 0 else { return nil }
        switch tag & 7 {
        case 0: return varint().map { _ in (tag >> 3, .number) }
        case 1, 5:
            let width = tag & 7 == 1 ? 8 : 4
            guard bytes.count >= width else { return nil }
            bytes = bytes.dropFirst(width)
            return (tag >> 3, .number)
        case 2:
            guard let length = varint(), length <= UInt64(bytes.count) else { return nil }
            let value = bytes.prefix(Int(length))
            bytes = bytes.dropFirst(Int(length))
            return (tag >> 3, .bytes(value))
        default:
            return nil
        }
    }

    private mutating func varint() -> UInt64? {
        var value: UInt64 = 0
        for shift in stride(from: 0, to: 64, by: 7) {
            guard let byte = bytes.first else { return nil }
            bytes = bytes.dropFirst()
            value |= UInt64(byte & 0x7F) << UInt64(shift)
            if byte < 0x80 { return value }
        }
        return nil
    }
}
