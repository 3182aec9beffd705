import TestSupport
import Testing

@testable import ExporterKit

extension CompressionTests {
    @Suite("Bit packing")
    struct BitPackingTests {
        private func pack(_ indices: [UInt8], bits: Int) throws -> [UInt8] {
            try indices.withUnsafeBufferPointer { try BitPacking.pack($0, bits: bits) }
        }

        private func unpack(_ bytes: [UInt8], bits: Int, count: Int) throws -> [UInt8] {
            try bytes.withUnsafeBufferPointer { try BitPacking.unpack($0, bits: bits, count: count) }
        }

        @Test("packs 4-bit indices low nibble first")
        func fourBits() throws {
            #expect(try pack([1, 2, 3, 4, 5, 6], bits: 4) == [0x21, 0x43, 0x65])
            #expect(try pack([1, 2, 3], bits: 4) == [0x21, 0x03])
        }

        @Test("packs 2-, 3-, 6- and 8-bit indices as one little-endian bit stream")
        func otherWidths() throws {
            #expect(try pack([0, 1, 2, 3], bits: 2) == [0xE4])
            #expect(try pack([1, 2, 3, 4, 5, 6, 7, 0], bits: 3) == [0xD1, 0x58, 0x1F])
            #expect(try pack([5, 1, 7], bits: 3) == [0xCD, 0x01])
            #expect(try pack([63, 0, 1], bits: 6) == [0x3F, 0x10, 0x00])
            #expect(try pack([0, 255, 17], bits: 8) == [0x00, 0xFF, 0x11])
        }

        @Test("packed size is ceil(count × bits / 8)")
        func packedSize() {
            #expect(BitPacking.packedByteCount(count: 3, bits: 3) == 2)
            #expect(BitPacking.packedByteCount(count: 8, bits: 3) == 3)
            #expect(BitPacking.packedByteCount(count: 5, bits: 6) == 4)
            #expect(BitPacking.packedByteCount(count: 0, bits: 4) == 0)
        }

        @Test("unpacks what it packs, at every supported width and length")
        func roundTrip() throws {
            var generator = SplitMix64(seed: 7)
            for bits in PaletteSpec.supportedBits {
                for count in [0, 1, 2, 3, 7, 8, 9, 63, 64, 65, 1000] {
                    let indices = (0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next() % UInt64(1 << bits))
                    }
                    let packed = try pack(indices, bits: bits)
                    #expect(packed.count == BitPacking.packedByteCount(count: count, bits: bits))
                    #expect(try unpack(packed, bits: bits, count: count) == indices)
                }
            }
        }

        @Test("ranges written separately and merged give the same stream")
        func rangesMerge() throws {
            var generator = SplitMix64(seed: 11)
            for bits in PaletteSpec.supportedBits {
                let count = 101
                let indices = (0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next() % UInt64(1 << bits)) }
                let whole = try pack(indices, bits: bits)
                for cuts in [[0, 101], [0, 1, 2, 3, 101], [0, 5, 6, 50, 77, 101], [0, 33, 34, 35, 36, 101]] {
                    var stream = [UInt8](repeating: 0, count: whole.count)
                    var edges: [PackedEdges] = []
                    stream.withUnsafeMutableBufferPointer { output in
                        for (start, end) in zip(cuts, cuts.dropFirst()) {
                            edges.append(
                                BitStreamWriter.write(
                                    count: end - start, firstElement: start, bits: bits, into: output.baseAddress!
                                ) {
                                    indices[start + $0]
                                })
                        }
                        for edge in edges { edge.merge(into: output.baseAddress!) }
                    }
                    #expect(stream == whole, "bits \(bits), cuts \(cuts)")
                }
            }
        }

        @Test("a range stores only the bytes wholly inside it, and no byte past them")
        func rangeStoresOnlyItsBytes() {
            let bits = 4
            for (start, count) in [(0, 1), (0, 2), (0, 5), (0, 6), (0, 7), (0, 8), (1, 2), (1, 7), (3, 9), (5, 16)] {
                var stream = [UInt8](repeating: 0xAA, count: 16)
                let edges = stream.withUnsafeMutableBufferPointer { output in
                    BitStreamWriter.write(count: count, firstElement: start, bits: bits, into: output.baseAddress!) {
                        _ in 0x5
                    }
                }
                // Bytes wholly inside the range hold two indices; partial ones are left to the edges.
                let firstWhole = (start * bits + 7) / 8
                let endWhole = (start + count) * bits / 8
                for byte in 0..<16 {
                    let expected: UInt8 = byte >= firstWhole && byte < endWhole ? 0x55 : 0xAA
                    #expect(stream[byte] == expected, "start \(start), count \(count), byte \(byte)")
                }
                #expect(edges.headIndex == (start % 2 == 1 ? start / 2 : -1))
                #expect(edges.tailIndex == ((start + count) % 2 == 1 ? (start + count) / 2 : -1))
            }
        }

        @Test("refuses indices that do not fit, unsupported widths and short streams")
        func errors() {
            #expect(throws: CompressionError.indexOutOfRange(index: 16, bits: 4)) { try pack([1, 16], bits: 4) }
            #expect(throws: CompressionError.unsupportedBits(5, tensor: nil)) { try pack([1], bits: 5) }
            #expect(throws: CompressionError.packedSizeMismatch(expectedBytes: 3, actualBytes: 2)) {
                try unpack([0, 0], bits: 3, count: 8)
            }
            #expect(
                CompressionError.indexOutOfRange(index: 16, bits: 4).description
                    == "palette index 16 does not fit in 4 bits")
            #expect(
                CompressionError.unsupportedBits(5, tensor: nil).description
                    == "unsupported palette size of 5 bits (expected one of: 2, 3, 4, 6, 8)")
            #expect(
                CompressionError.packedSizeMismatch(expectedBytes: 3, actualBytes: 2).description
                    == "packed indices hold 2 bytes but 3 are needed")
        }
    }
}
