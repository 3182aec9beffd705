/// Turns a tensor's stored parts back into float32 values, checking every format rule on the
/// way. Made from the record and the small parts (LUT, scales, outliers), which it reads and
/// checks at once; the large part (indices or values, `streamedPart`) is then decoded a range
/// of rows at a time, so a reader need never hold a whole tensor.
struct TensorDecoder {
    /// Output channels (the first dimension; 1 for a vector).
    let rows: Int
    /// Elements per row.
    let columns: Int
    /// The part decoded by row ranges: `indices` for a palette, `values` otherwise.
    let streamedPart: Manifest.Part
    /// The stored bytes of the other parts, by kind.
    let smallParts: [String: [UInt8]]
    private let layout: Layout

    private enum Layout {
        case keep(ComputePrecision)
        case palette(Palette)
        case linear(scales: [Float], perChannel: Bool)
    }

    private struct Palette {
        let bits: Int
        let groupRows: Int
        let blockColumns: Int
        /// Every LUT entry as Float, `1 << bits` per group and block.
        let lut: [Float]
        /// Outliers' element positions, ascending, and their exact values.
        let outlierPositions: [Int]
        let outlierValues: [Float]
    }

    /// Checks `tensor`'s record against its shape and scheme, and reads (with `read`) and
    /// checks its small parts.
    /// - Throws: `BundleError.invalidTensor` naming the broken rule; `read`'s errors.
    init(_ tensor: Manifest.Tensor, precision: String, read: (Manifest.Part) throws -> [UInt8]) throws {
        func invalid(_ reason: String) -> BundleError { .invalidTensor(tensor: tensor.name, reason: reason) }
        guard !tensor.shape.isEmpty, tensor.shape.allSatisfy({ $0 > 0 }) else {
            throw invalid("invalid shape \(tensor.shape)")
        }
        var (elements, overflow) = (1, false)
        for dimension in tensor.shape where !overflow {
            (elements, overflow) = elements.multipliedReportingOverflow(by: dimension)
        }
        guard !overflow, elements < 1 << 40 else { throw invalid("shape \(tensor.shape) is too large") }
        let rows = tensor.shape.count >= 2 ? tensor.shape[0] : 1
        let columns = elements / rows
        let scheme = tensor.compression
        let kinds = tensor.parts.map(\.kind)
        for part in tensor.parts where part.offset % ExportPlan.blobAlignment != 0 {
            throw invalid("\(part.kind) at offset \(part.offset) is not aligned to \(ExportPlan.blobAlignment) bytes")
        }
        func part(_ kind: String, bytes expected: Int) throws -> Manifest.Part {
            guard let found = tensor.parts.first(where: { $0.kind == kind }) else { throw invalid("no \(kind) part") }
            guard found.bytes == expected else {
                throw invalid("\(kind) holds \(found.bytes) bytes, its shape and scheme need \(expected)")
            }
            return found
        }
        var smallParts: [String: [UInt8]] = [:]
        func small(_ kind: String, bytes expected: Int) throws -> [UInt8] {
            let bytes = try read(try part(kind, bytes: expected))
            smallParts[kind] = bytes
            return bytes
        }
        switch scheme.mode {
        case .keep:
            guard kinds == ["values"] else { throw invalid("parts \(kinds), expected [values]") }
            guard let stored = ComputePrecision(rawValue: precision) else {
                throw invalid("unknown precision '\(precision)'")
            }
            streamedPart = try part("values", bytes: elements * stored.bytesPerElement)
            layout = .keep(stored)
        case .palettize:
            let outlierCount = scheme.outlierCount(elements: elements)
            let expectedKinds = ["lut", "indices"] + (outlierCount > 0 ? ["outlier_indices", "outlier_values"] : [])
            guard kinds == expectedKinds else {
                throw invalid("parts \(kinds), expected [\(expectedKinds.joined(separator: ", "))]")
            }
            guard let bits = scheme.bits, CompressionScheme.paletteBits.contains(bits) else {
                throw invalid("palette of \(scheme.bits ?? 0) bits")
            }
            let groupRows =
                scheme.granularity == .perGroupedChannel || scheme.granularity == .perBlock
                ? (scheme.groupSize ?? 0) : rows
            guard groupRows > 0 else { throw invalid("group size \(groupRows)") }
            let blockColumns = scheme.granularity == .perBlock ? (scheme.blockSize ?? 0) : columns
            guard blockColumns > 0 else { throw invalid("block size \(blockColumns)") }
            // Divided without adding first: a record may give any size.
            let groups = rows.dividedRoundingUp(by: groupRows)
            let blocks = columns.dividedRoundingUp(by: blockColumns)
            // Every LUT entry as Float once (a table lookup: Linux x86-64 builds convert float16
            // in software).
            let lut = try small("lut", bytes: groups * blocks * (1 << bits) * 2).withUnsafeBytes(
                Float16Table.floats(littleEndian:))
            streamedPart = try part("indices", bytes: (elements * bits + 7) / 8)
            var positions: [Int] = []
            var exact: [Float] = []
            if outlierCount > 0 {
                positions = try small("outlier_indices", bytes: outlierCount * 4).withUnsafeBytes {
                    $0.bindMemory(to: UInt32.self).map { Int(UInt32(littleEndian: $0)) }
                }
                let halves = try small("outlier_values", bytes: outlierCount * 2).withUnsafeBytes {
                    $0.bindMemory(to: UInt16.self).map { Float16(bitPattern: UInt16(littleEndian: $0)) }
                }
                var previous: Int?
                for (position, value) in zip(positions, halves) {
                    guard position < elements else {
                        throw invalid("outlier index \(position) is outside the \(elements) elements")
                    }
                    if let previous, position <= previous {
                        throw invalid("outlier indices are not strictly ascending")
                    }
                    guard value.isFinite else { throw invalid("outlier value at element \(position) is not finite") }
                    previous = position
                }
                exact = halves.map(Float.init)
            }
            layout = .palette(
                Palette(
                    bits: bits, groupRows: groupRows, blockColumns: blockColumns, lut: lut, outlierPositions: positions,
                    outlierValues: exact))
        case .linear:
            guard kinds == ["scales", "values"] else { throw invalid("parts \(kinds), expected [scales, values]") }
            let perChannel = scheme.granularity == .perChannel
            let scales = try small("scales", bytes: (perChannel ? rows : 1) * 4).withUnsafeBytes {
                $0.bindMemory(to: UInt32.self).map { Float(bitPattern: UInt32(littleEndian: $0)) }
            }
            streamedPart = try part("values", bytes: elements)
            layout = .linear(scales: scales, perChannel: perChannel)
        }
        self.rows = rows
        self.columns = columns
        self.smallParts = smallParts
    }

    /// The tensor's element count.
    var elements: Int { rows * columns }

    /// Bits `streamedPart` stores per element.
    private var streamedBits: Int {
        switch layout {
        case .keep(let precision): return precision.bytesPerElement * 8
        case .palette(let palette): return palette.bits
        case .linear: return 8
        }
    }

    /// The bytes of `streamedPart` (offsets within it) that hold `rows`: for packed indices,
    /// from the byte holding the first row's first bit to the byte holding the last row's last.
    func streamedBytes(rows range: Range<Int>) -> Range<Int> {
        let bits = streamedBits
        return (range.lowerBound * columns * bits / 8)..<((range.upperBound * columns * bits + 7) / 8)
    }

    /// Consecutive row ranges covering the tensor, each of at most `elementLimit` elements
    /// (or one row when a row holds more).
    func rowBlocks(elementLimit: Int) -> [Range<Int>] {
        let step = max(1, elementLimit / columns)
        return stride(from: 0, to: rows, by: step).map { $0..<min(rows, $0 + step) }
    }

    /// Decodes `range` of rows into `output` (`range.count * columns` elements) from `bytes`,
    /// the bytes `streamedBytes(rows: range)` of `streamedPart`.
    func decode(
        rows range: Range<Int>, from bytes: UnsafeRawBufferPointer, into output: UnsafeMutableBufferPointer<Float>
    ) {
        let firstElement = range.lowerBound * columns
        let count = range.count * columns
        precondition(output.count >= count && bytes.count == streamedBytes(rows: range).count, "decode buffer sizes")
        switch layout {
        case .keep(let precision):
            switch precision {
            // A table lookup: Linux x86-64 builds convert float16 in software.
            case .float16:
                Float16Table.floats(littleEndian: bytes, into: output)
            case .float32:
                for (index, bits) in bytes.bindMemory(to: UInt32.self).enumerated() {
                    output[index] = Float(bitPattern: UInt32(littleEndian: bits))
                }
            case .bfloat16:
                for (index, bits) in bytes.bindMemory(to: UInt16.self).enumerated() {
                    output[index] = PrecisionConversion.float(bfloat16Bits: UInt16(littleEndian: bits))
                }
            }
        case .palette(let palette):
            let entries = 1 << palette.bits
            let blocks = columns.dividedRoundingUp(by: palette.blockColumns)
            palette.lut.withUnsafeBufferPointer { lut in
                var reader = BitStreamReader(
                    bytes: bytes.bindMemory(to: UInt8.self), bits: palette.bits,
                    bitOffset: firstElement * palette.bits % 8)
                var element = 0
                for row in range {
                    let rowBase = (row / palette.groupRows) * blocks
                    for block in 0..<blocks {
                        let count = min(columns, (block + 1) * palette.blockColumns) - block * palette.blockColumns
                        reader.lookUp(
                            count, in: lut.baseAddress! + (rowBase + block) * entries,
                            into: output.baseAddress! + element)
                        element += count
                    }
                }
            }
            let positions = palette.outlierPositions
            var outlier = positions.partitioningIndex { $0 >= firstElement }
            while outlier < positions.count, positions[outlier] < firstElement + count {
                output[positions[outlier] - firstElement] = palette.outlierValues[outlier]
                outlier += 1
            }
        case .linear(let scales, let perChannel):
            let values = bytes.bindMemory(to: Int8.self)
            for row in 0..<range.count {
                let scale = scales[perChannel ? range.lowerBound + row : 0]
                for column in 0..<columns {
                    output[row * columns + column] = Float(values[row * columns + column]) * scale
                }
            }
        }
    }

    /// The tensor (or its rows `rows`) dequantised to float32, row-major, its parts read with
    /// `read`: of the indices or values, only the bytes of those rows.
    /// - Throws: `BundleError.invalidTensor` naming the broken rule or rows outside the tensor;
    ///   `read`'s errors.
    static func decode(
        _ tensor: Manifest.Tensor, precision: String, rows: Range<Int>? = nil, read: (Manifest.Part) throws -> [UInt8]
    ) throws -> [Float] {
        let decoder = try TensorDecoder(tensor, precision: precision, read: read)
        let rows = rows ?? 0..<decoder.rows
        guard rows.lowerBound >= 0, rows.upperBound <= decoder.rows else {
            throw BundleError.invalidTensor(
                tensor: tensor.name,
                reason: "rows \(rows.lowerBound)..<\(rows.upperBound) are outside its \(decoder.rows)")
        }
        let bytes = decoder.streamedBytes(rows: rows)
        var part = decoder.streamedPart
        (part.offset, part.bytes) = (part.offset + bytes.lowerBound, bytes.count)
        let stored = try read(part)
        guard stored.count == bytes.count else {
            throw BundleError.invalidTensor(
                tensor: tensor.name, reason: "\(part.kind) read \(stored.count) bytes of \(bytes.count)")
        }
        let count = rows.count * decoder.columns
        return [Float](unsafeUninitializedCapacity: count) { output, initialized in
            stored.withUnsafeBytes { decoder.decode(rows: rows, from: $0, into: output) }
            initialized = count
        }
    }
}

extension Array {
    /// The first index whose element satisfies `belongs`, for an array where every element
    /// that does comes after every element that does not (binary search).
    func partitioningIndex(where belongs: (Element) -> Bool) -> Int {
        var (low, high) = (0, count)
        while low < high {
            let middle = (low + high) / 2
            if belongs(self[middle]) { high = middle } else { low = middle + 1 }
        }
        return low
    }
}
