/// The palette index stream layout, fixed by the file format.
///
/// Indices of a whole tensor, in row-major element order, form one little-endian bit
/// stream: element `i` occupies stream bits `[i·n, (i+1)·n)`, least significant bit first,
/// and stream bit `j` is bit `j mod 8` of byte `j / 8`. At 4 bits, byte `k` holds element
/// `2k` in its low nibble and `2k+1` in its high nibble; at 3 and 6 bits elements straddle
/// bytes. The last byte is zero-padded; the stream is `ceil(count·n / 8)` bytes.
public enum BitPacking {
    /// Bytes needed for `count` indices of `bits` bits each.
    public static func packedByteCount(count: Int, bits: Int) -> Int {
        (count * bits + 7) / 8
    }

    /// Packs `indices` (each below `1 << bits`) into the stream layout above.
    ///
    /// - Throws: ``CompressionError/indexOutOfRange(index:bits:)`` for an index that does not
    ///   fit, ``CompressionError/unsupportedBits(_:tensor:)`` for `bits` not in
    ///   ``PaletteSpec/supportedBits``.
    public static func pack(_ indices: UnsafeBufferPointer<UInt8>, bits: Int) throws -> [UInt8] {
        guard PaletteSpec.supportedBits.contains(bits) else {
            throw CompressionError.unsupportedBits(bits, tensor: nil)
        }
        let limit = 1 << bits
        if let bad = indices.first(where: { Int($0) >= limit }) {
            throw CompressionError.indexOutOfRange(index: Int(bad), bits: bits)
        }
        var output = [UInt8](repeating: 0, count: packedByteCount(count: indices.count, bits: bits))
        output.withUnsafeMutableBufferPointer { bytes in
            guard let source = indices.baseAddress, let destination = bytes.baseAddress else { return }
            let edges = BitStreamWriter.write(
                count: indices.count, firstElement: 0, bits: bits, into: destination
            ) { source[$0] }
            edges.merge(into: destination)
        }
        return output
    }

    /// Unpacks `count` indices of `bits` bits from the stream layout above.
    ///
    /// - Throws: ``CompressionError/packedSizeMismatch(expectedBytes:actualBytes:)`` when
    ///   `bytes` is shorter than `ceil(count·bits / 8)`, ``CompressionError/unsupportedBits(_:tensor:)``
    ///   for `bits` not in ``PaletteSpec/supportedBits``.
    public static func unpack(_ bytes: UnsafeBufferPointer<UInt8>, bits: Int, count: Int) throws -> [UInt8] {
        guard PaletteSpec.supportedBits.contains(bits) else {
            throw CompressionError.unsupportedBits(bits, tensor: nil)
        }
        let needed = packedByteCount(count: count, bits: bits)
        guard bytes.count >= needed else {
            throw CompressionError.packedSizeMismatch(expectedBytes: needed, actualBytes: bytes.count)
        }
        var indices = [UInt8](repeating: 0, count: count)
        indices.withUnsafeMutableBufferPointer { output in
            var reader = BitStreamReader(bytes: bytes, bits: bits)
            for element in 0..<count { output[element] = reader.next() }
        }
        return indices
    }
}

/// The partial bytes at both ends of a range of elements written by ``BitStreamWriter``.
///
/// Ranges written concurrently can share the byte where one ends and the next begins;
/// each range keeps its share of such a byte aside, and the shares are OR-ed in afterwards
/// (into a zero-initialised stream), so the result is independent of how work was split.
struct PackedEdges: Sendable {
    /// Byte index of the leading partial byte, or -1.
    var headIndex = -1
    /// This range's bits of the leading partial byte.
    var headByte: UInt8 = 0
    /// Byte index of the trailing partial byte, or -1.
    var tailIndex = -1
    /// This range's bits of the trailing partial byte.
    var tailByte: UInt8 = 0

    /// ORs the kept-aside bytes into the stream.
    func merge(into stream: UnsafeMutablePointer<UInt8>) {
        if headIndex >= 0 { stream[headIndex] |= headByte }
        if tailIndex >= 0 { stream[tailIndex] |= tailByte }
    }
}

/// Writes a contiguous range of elements into the index stream.
enum BitStreamWriter {
    /// Writes `count` indices, produced by `index(i)` for `i` in `0..<count`, as elements
    /// `firstElement ..< firstElement + count` of the stream. Bytes wholly inside the range
    /// are stored; the partial bytes at its ends are returned for ``PackedEdges/merge(into:)``.
    @inline(__always)
    static func write(
        count: Int, firstElement: Int, bits: Int, into stream: UnsafeMutablePointer<UInt8>,
        index: (Int) -> UInt8
    ) -> PackedEdges {
        var edges = PackedEdges()
        guard count > 0 else { return edges }
        let startBit = firstElement * bits
        let leadingBits = startBit & 7
        var byteIndex = startBit >> 3
        var accumulator: UInt32 = 0
        var pending = leadingBits
        var element = 0
        if leadingBits != 0 {
            // Fill the shared leading byte first; it goes aside, not into the stream.
            while element < count && pending < 8 {
                accumulator |= UInt32(index(element)) << UInt32(pending)
                pending += bits
                element += 1
            }
            if pending >= 8 {
                edges.headIndex = byteIndex
                edges.headByte = UInt8(truncatingIfNeeded: accumulator)
                accumulator >>= 8
                pending -= 8
                byteIndex += 1
            }
        }
        if bits == 4 && pending == 0 {
            // The common case: two indices per byte, no carry between bytes. Four at a time,
            // stored as one little-endian 16-bit word, with wrapping arithmetic: the checked
            // loop of two per byte spent half its instructions on overflow tests.
            var output = UnsafeMutableRawPointer(stream + byteIndex)
            for _ in 0..<((count &- element) >> 2) {
                let first = index(element) | index(element &+ 1) << 4
                let second = index(element &+ 2) | index(element &+ 3) << 4
                output.storeBytes(of: (UInt16(first) | UInt16(second) << 8).littleEndian, as: UInt16.self)
                output += 2
                element &+= 4
            }
            if count &- element >= 2 {
                output.storeBytes(of: index(element) | index(element &+ 1) << 4, as: UInt8.self)
                output += 1
                element &+= 2
            }
            byteIndex = output - UnsafeMutableRawPointer(stream)
        } else if bits == 8 && pending == 0 {
            for offset in 0..<(count - element) { stream[byteIndex + offset] = index(element + offset) }
            byteIndex += count - element
            element = count
        }
        while element < count {
            accumulator |= UInt32(index(element)) << UInt32(pending)
            pending += bits
            element += 1
            if pending >= 8 {
                stream[byteIndex] = UInt8(truncatingIfNeeded: accumulator)
                accumulator >>= 8
                pending -= 8
                byteIndex += 1
            }
        }
        if pending > 0 {
            edges.tailIndex = byteIndex
            edges.tailByte = UInt8(truncatingIfNeeded: accumulator)
        }
        return edges
    }
}

/// Reads consecutive elements of the index stream.
struct BitStreamReader {
    private let bytes: UnsafeBufferPointer<UInt8>
    private let bits: Int
    private let mask: UInt32
    private var bitPosition: Int

    /// A reader whose first index starts at bit `bitOffset` (0 to 7) of the first byte.
    init(bytes: UnsafeBufferPointer<UInt8>, bits: Int, bitOffset: Int = 0) {
        self.bytes = bytes
        self.bits = bits
        self.mask = (1 << UInt32(bits)) - 1
        self.bitPosition = bitOffset
    }

    /// The next index; the caller guarantees the stream holds it.
    @inline(__always)
    mutating func next() -> UInt8 {
        let byteIndex = bitPosition >> 3
        let shift = UInt32(bitPosition & 7)
        var window = UInt32(bytes[byteIndex])
        if Int(shift) + bits > 8 { window |= UInt32(bytes[byteIndex + 1]) << 8 }
        bitPosition += bits
        return UInt8(truncatingIfNeeded: (window >> shift) & mask)
    }

    /// Writes `table[index]` for the next `count` indices to `output`; the caller guarantees
    /// the stream holds them. Whole bytes of 4- and 8-bit indices are read a byte at a time.
    @inline(__always)
    mutating func lookUp(_ count: Int, in table: UnsafePointer<Float>, into output: UnsafeMutablePointer<Float>) {
        var done = 0
        if bitPosition & 7 == 0, bits == 4 || bits == 8 {
            let first = bitPosition >> 3
            if bits == 4 {
                for pair in 0..<(count / 2) {
                    let byte = Int(bytes[first + pair])
                    output[2 * pair] = table[byte & 15]
                    output[2 * pair + 1] = table[byte >> 4]
                }
                done = count & ~1
            } else {
                for index in 0..<count { output[index] = table[Int(bytes[first + index])] }
                done = count
            }
            bitPosition += done * bits
        }
        for index in done..<count { output[index] = table[Int(next())] }
    }
}
