import Testing

@testable import ExporterKit

@Suite("tensor decoder: row blocks")
struct TensorDecoderTests {
    /// A 5 × 7 tensor in 3-bit palettes of 2 rows (the last group of one row), with three
    /// outliers: 21 bits per row, so most rows start inside a byte.
    private struct Stored {
        let tensor: Manifest.Tensor
        let file: [UInt8]
        let expected: [Float]
    }

    private func stored() throws -> Stored {
        let (rows, columns, bits, groupRows) = (5, 7, 3, 2)
        let indices = (0..<(rows * columns)).map { UInt8(($0 * 5 + 1) % 8) }
        let lut = (0..<3).flatMap { group in (0..<8).map { Float16(Float(group * 10 + $0) + 0.5) } }
        let outliers: [(position: UInt32, value: Float16)] = [(4, 100.5), (15, -7.25), (34, 3)]
        var expected = indices.enumerated().map { element, index in
            Float(lut[(element / columns / groupRows) * 8 + Int(index)])
        }
        for outlier in outliers { expected[Int(outlier.position)] = Float(outlier.value) }

        var file: [UInt8] = []
        var parts: [Manifest.Part] = []
        func append(_ kind: String, _ dtype: String, _ bytes: [UInt8]) {
            file += [UInt8](repeating: 0, count: (64 - file.count % 64) % 64)
            parts.append(
                Manifest.Part(kind: kind, dtype: dtype, file: "weights.bin", offset: file.count, bytes: bytes.count))
            file += bytes
        }
        func littleEndian<T: FixedWidthInteger>(_ values: [T]) -> [UInt8] {
            values.flatMap { value in (0..<(T.bitWidth / 8)).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
        }
        append("lut", "float16", littleEndian(lut.map(\.bitPattern)))
        append("indices", "uint3", try indices.withUnsafeBufferPointer { try BitPacking.pack($0, bits: bits) })
        append("outlier_indices", "uint32", littleEndian(outliers.map(\.position)))
        append("outlier_values", "float16", littleEndian(outliers.map(\.value.bitPattern)))

        var scheme = CompressionScheme.palettize(bits: bits, groupSize: groupRows)
        scheme.outlierFraction = 0.1
        let tensor = Manifest.Tensor(
            name: "t", shape: [rows, columns], role: "mlp", layer: 0, compression: scheme, lastGroupRows: 1,
            rule: "default", storedBytes: parts.map(\.bytes).reduce(0, +), parts: parts, sqnrDB: nil)
        return Stored(tensor: tensor, file: file, expected: expected)
    }

    @Test("any row blocks decode to the whole tensor: indices starting mid-byte, groups and outliers across blocks")
    func rowBlocks() throws {
        let stored = try stored()
        let read = { (part: Manifest.Part) in Array(stored.file[part.offset..<(part.offset + part.bytes)]) }
        #expect(try TensorDecoder.decode(stored.tensor, precision: "float16", read: read) == stored.expected)

        let decoder = try TensorDecoder(stored.tensor, precision: "float16", read: read)
        #expect(Set(decoder.smallParts.keys) == ["lut", "outlier_indices", "outlier_values"])
        #expect(decoder.streamedPart.kind == "indices")
        // Row 1 is bits 21..<42: bytes 2..<6.
        #expect(decoder.streamedBytes(rows: 1..<2) == 2..<6)
        let indices = read(decoder.streamedPart)
        for elementLimit in [1, 7, 10, 14, 21, 35] {
            var values: [Float] = []
            let blocks = decoder.rowBlocks(elementLimit: elementLimit)
            #expect(blocks.first?.lowerBound == 0 && blocks.last?.upperBound == 5)
            for rows in blocks {
                var block = [Float](repeating: .nan, count: rows.count * 7)
                let bytes = Array(indices[decoder.streamedBytes(rows: rows)])
                block.withUnsafeMutableBufferPointer { output in
                    bytes.withUnsafeBytes { decoder.decode(rows: rows, from: $0, into: output) }
                }
                values += block
            }
            #expect(values == stored.expected, "blocks of \(elementLimit) elements")
        }
    }

    @Test("outliers out of order are refused when the decoder is made")
    func outliersChecked() throws {
        let stored = try stored()
        let positions = try #require(stored.tensor.parts.first { $0.kind == "outlier_indices" })
        var file = stored.file
        file[positions.offset] = 20  // 20, 15, 34
        let read = { (part: Manifest.Part) in Array(file[part.offset..<(part.offset + part.bytes)]) }
        #expect(throws: BundleError.invalidTensor(tensor: "t", reason: "outlier indices are not strictly ascending")) {
            try TensorDecoder(stored.tensor, precision: "float16", read: read)
        }
    }

    @Test("a repeated outlier index, and one equal to the element count, are refused")
    func outlierEdges() throws {
        let stored = try stored()
        let positions = try #require(stored.tensor.parts.first { $0.kind == "outlier_indices" })
        var repeated = stored.file
        repeated[positions.offset] = 15  // 15, 15, 34
        #expect(throws: BundleError.invalidTensor(tensor: "t", reason: "outlier indices are not strictly ascending")) {
            try TensorDecoder(stored.tensor, precision: "float16") {
                Array(repeated[$0.offset..<($0.offset + $0.bytes)])
            }
        }
        var past = stored.file
        past[positions.offset + 8] = 35  // 5 × 7 elements: 35 is one past the last
        #expect(throws: BundleError.invalidTensor(tensor: "t", reason: "outlier index 35 is outside the 35 elements")) {
            try TensorDecoder(stored.tensor, precision: "float16") { Array(past[$0.offset..<($0.offset + $0.bytes)]) }
        }
    }
}
