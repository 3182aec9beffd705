import TestSupport
import Testing

@testable import ExporterKit

extension CompressionTests {
    @Suite("palettising stored bfloat16 patterns")
    struct BFloat16PalettizerTests {
        /// Seeded bfloat16 patterns: a heavy-tailed bulk, values that round to float16
        /// subnormals or to ±0, both zeros, and the largest magnitudes float16 can hold.
        private func patterns(count: Int, seed: UInt64) -> [UInt16] {
            var state = seed
            func next() -> UInt64 {
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return state >> 33
            }
            let weights = HeavyTailedWeights.make(rows: 1, columns: count, seed: seed)
            return weights.enumerated().map { index, weight in
                switch next() % 16 {
                // 2^-25…2^-22
                case 0: return UInt16(truncatingIfNeeded: 0x3300 + next() % 0x0200) | (index % 2 == 0 ? 0 : 0x8000)
                case 1: return next() % 2 == 0 ? 0x0000 : 0x8000
                case 2: return UInt16(truncatingIfNeeded: 0x4770 + next() % 0x0010)  // up to 65,280
                default: return PrecisionConversion.bfloat16Bits(Float(weight))
                }
            }
        }

        @Test(
            "gives the bytes of converting first, per tensor and per group, on one worker or three",
            arguments: [PaletteGranularity.perTensor, .perGroupedChannel(groupSize: 4)], [1, 3])
        func sameAsConvertingFirst(granularity: PaletteGranularity, workers: Int) throws {
            // 67,200 weights: a per-tensor palette this large is counted by all workers together.
            let (rows, columns) = (96, 700)
            let bits = patterns(count: rows * columns, seed: 9)
            var converted = [Float16](repeating: 0, count: bits.count)
            bits.withUnsafeBufferPointer { source in
                converted.withUnsafeMutableBufferPointer { output in
                    _ = PrecisionConversion.toFloat16(bfloat16Bits: source, into: output, clampingOutOfRange: false)
                }
            }
            let spec = PaletteSpec(bits: 4, granularity: granularity)
            let expected = try palettize(converted, rows: rows, columns: columns, bits: 4, granularity: granularity)
            let direct = try bits.withUnsafeBufferPointer {
                try Palettizer.palettize(
                    patterns: $0, kind: .bfloat16, rows: rows, columns: columns, spec: spec, workerCount: workers)
            }
            #expect(direct == expected)
            // The LUT never holds −0, though −0 and values rounding to it are present.
            #expect(!(direct?.lut.contains { $0.bitPattern == 0x8000 } ?? true))
        }

        @Test(
            "read a few groups at a time by each worker, gives the bytes of palettising in memory, at every index width",
            arguments: [2, 3, 4, 6, 8],
            [(groupSize: 4, readElements: 1), (groupSize: 3, readElements: 200), (groupSize: 5, readElements: 1 << 17)])
        func readsSameAsWhole(bits: Int, reading: (groupSize: Int, readElements: Int)) throws {
            // 101 rows: the last group is smaller for group sizes 3, 4 and 5; 33 columns, odd.
            let (rows, columns) = (101, 33)
            let patterns = patterns(count: rows * columns, seed: 21)
            let spec = PaletteSpec(bits: bits, granularity: .perGroupedChannel(groupSize: reading.groupSize))
            let whole = try patterns.withUnsafeBufferPointer {
                try Palettizer.palettize(
                    patterns: $0, kind: .bfloat16, rows: rows, columns: columns, spec: spec, workerCount: 2)
            }
            let reads = Locked<[Range<Int>]>([])
            let streamed = try Palettizer.palettize(
                streamedRows: rows, columns: columns, kind: .bfloat16, spec: spec, workerCount: 2,
                readElements: reading.readElements
            ) { elements, buffer in
                reads.mutate { $0.append(elements) }
                for (offset, element) in elements.enumerated() { buffer[offset] = patterns[element] }
            }
            #expect(streamed != nil)
            #expect(streamed == whole)
            // Whole groups, as many as the read size holds (at least one), covering the tensor once.
            let groupElements = reading.groupSize * columns
            let batch = Palettizer.streamReadGroups(groupElements: groupElements, readElements: reading.readElements)
            #expect(batch == [1, 2, 794][[4, 3, 5].firstIndex(of: reading.groupSize)!])
            let sorted = reads.value.sorted { $0.lowerBound < $1.lowerBound }
            #expect(sorted.map(\.lowerBound) == Array(stride(from: 0, to: rows * columns, by: batch * groupElements)))
            #expect(sorted.last?.upperBound == rows * columns)
            #expect(zip(sorted, sorted.dropFirst()).allSatisfy { $0.upperBound == $1.lowerBound })
        }

        @Test(
            "read a few groups at a time, passes on the lowest failing read's error and declines unconvertible patterns"
        )
        func readsFailures() throws {
            let patterns = patterns(count: 64 * 16, seed: 5)
            let spec = PaletteSpec(bits: 4, granularity: .perGroupedChannel(groupSize: 2))
            struct ReadFailure: Error, Equatable { let start: Int }
            // Every read but the first fails: whichever worker fails first, the error is the
            // one of the lowest range (elements 64 on: reads of two groups of two rows of 16).
            for _ in 0..<20 {
                #expect(throws: ReadFailure(start: 64)) {
                    _ = try Palettizer.palettize(
                        streamedRows: 64, columns: 16, kind: .bfloat16, spec: spec, workerCount: 2, readElements: 64
                    ) { elements, _ in
                        if elements.lowerBound > 0 { throw ReadFailure(start: elements.lowerBound) }
                    }
                }
            }
            var unconvertible = patterns
            unconvertible[900] = 0x7F80
            let result = try Palettizer.palettize(
                streamedRows: 64, columns: 16, kind: .bfloat16, spec: spec, readElements: 256
            ) { elements, buffer in
                for (offset, element) in elements.enumerated() { buffer[offset] = unconvertible[element] }
            }
            #expect(result == nil)
            // The first batch with either decides: an unconvertible value (elements 128–191)
            // before a failing read (from 448) declines; a failing read before it throws.
            var early = patterns
            early[130] = 0x7F80
            for (values, failingFrom) in [(early, 448), (unconvertible, 64)] {
                for _ in 0..<20 {
                    let read = { (elements: Range<Int>, buffer: UnsafeMutableBufferPointer<UInt16>) throws in
                        if elements.lowerBound >= failingFrom { throw ReadFailure(start: elements.lowerBound) }
                        for (offset, element) in elements.enumerated() { buffer[offset] = values[element] }
                    }
                    if failingFrom > 130 {
                        #expect(
                            try Palettizer.palettize(
                                streamedRows: 64, columns: 16, kind: .bfloat16, spec: spec, workerCount: 2,
                                readElements: 64, read: read) == nil)
                    } else {
                        #expect(throws: ReadFailure(start: failingFrom)) {
                            _ = try Palettizer.palettize(
                                streamedRows: 64, columns: 16, kind: .bfloat16, spec: spec, workerCount: 2,
                                readElements: 64, read: read)
                        }
                    }
                }
            }
        }

        @Test("declines patterns without a finite float16 value", arguments: [UInt16(0x4780), 0xC7A0, 0x7F80, 0x7FC1])
        func declinesUnconvertible(pattern: UInt16) throws {
            var bits = patterns(count: 64, seed: 3)
            bits[17] = pattern
            let result = try bits.withUnsafeBufferPointer {
                try Palettizer.palettize(
                    patterns: $0, kind: .bfloat16, rows: 4, columns: 16,
                    spec: PaletteSpec(bits: 4, granularity: .perGroupedChannel(groupSize: 2)))
            }
            #expect(result == nil)
        }

        @Test("the conversion table is the reader's conversion")
        func tableMatchesReader() {
            for pattern in stride(from: 0, through: 0xFFFF, by: 7) where pattern & 0x7FFF < 0x4780 {
                var output: [Float16] = [0]
                [UInt16(pattern)].withUnsafeBufferPointer { source in
                    output.withUnsafeMutableBufferPointer { converted in
                        _ = PrecisionConversion.toFloat16(
                            bfloat16Bits: source, into: converted, clampingOutOfRange: false)
                    }
                }
                #expect(Float16Table.fromBFloat16[pattern] == output[0].bitPattern)
            }
        }
    }
}

extension CompressionTests {
    @Suite("int8 per tensor, streamed from bfloat16")
    struct StreamedInt8Tests {
        private struct ReadFailure: Error, Equatable {}

        /// The codebook, then the codes as written block by block; `failAt` fails the read of
        /// that element in the first pass, `failWritingAt` in the second.
        private func stream(
            _ bits: [UInt16], rows: Int, columns: Int, workers: Int, blockElements: Int, failAt: Int? = nil,
            failWritingAt: Int? = nil
        ) throws -> Int8QuantizedTensor? {
            func reader(failingAt: Int?) -> (Range<Int>, UnsafeMutableBufferPointer<UInt16>) throws -> Void {
                { elements, buffer in
                    if let failingAt, elements.contains(failingAt) { throw ReadFailure() }
                    for (offset, index) in elements.enumerated() { buffer[offset] = bits[index] }
                }
            }
            guard
                let codebook = try LinearQuantizer.int8PerTensorCodebook(
                    streamedRows: rows, columns: columns, kind: .bfloat16, workers: workers,
                    blockElements: blockElements,
                    read: reader(failingAt: failAt))
            else { return nil }
            var values: [Int8] = []
            var writes = 0
            try LinearQuantizer.writeInt8Codes(
                codebook, streamedRows: rows, columns: columns, blockElements: blockElements,
                read: reader(failingAt: failWritingAt)
            ) { codes in
                writes += 1
                values += codes.bindMemory(to: Int8.self)
            }
            // One write per block of whole rows.
            let rowsPerBlock = max(1, blockElements / columns)
            #expect(writes == (rows + rowsPerBlock - 1) / rowsPerBlock)
            return Int8QuantizedTensor(
                rows: rows, columns: columns, granularity: .perTensor, scales: [codebook.scale], values: values,
                squaredError: codebook.squaredError, signalPower: codebook.signalPower)
        }

        private func converted(_ bits: [UInt16]) -> [Float16] {
            var output = [Float16](repeating: 0, count: bits.count)
            bits.withUnsafeBufferPointer { source in
                output.withUnsafeMutableBufferPointer {
                    _ = PrecisionConversion.toFloat16(bfloat16Bits: source, into: $0, clampingOutOfRange: false)
                }
            }
            return output
        }

        @Test(
            "equals converting first and quantising, whatever the blocks and workers",
            arguments: [(1, 1_000_000), (3, 700), (2, 53)])
        func sameAsConvertingFirst(workers: Int, blockElements: Int) throws {
            let (rows, columns) = (40, 53)
            let weights = HeavyTailedWeights.make(rows: rows, columns: columns, seed: 21)
            var bits = weights.map { PrecisionConversion.bfloat16Bits(Float($0)) }
            // Both zeros, and values that round to float16 subnormals or to zero.
            bits[3] = 0x8000
            bits[4] = 0x0000
            bits[5] = 0x3380
            bits[6] = 0xB300
            let expected = try converted(bits).withUnsafeBufferPointer {
                try LinearQuantizer.quantizeInt8(
                    $0, rows: rows, columns: columns, granularity: .perTensor, workerCount: 2)
            }
            let streamed = try stream(
                bits, rows: rows, columns: columns, workers: workers, blockElements: blockElements)
            #expect(streamed == expected)
        }

        @Test("a value the counting pass did not see, when coding, is an error naming the tensor")
        func changedBetweenReadings() throws {
            let bits = [UInt16](repeating: 0x3F80, count: 64)  // 1.0 everywhere
            let codebook = try #require(
                try LinearQuantizer.int8PerTensorCodebook(
                    streamedRows: 8, columns: 8, kind: .bfloat16, workers: 2, blockElements: 16
                ) {
                    elements, buffer in for (offset, index) in elements.enumerated() { buffer[offset] = bits[index] }
                })
            var written = 0
            #expect(throws: CompressionError.changedWhileRead(tensor: "embed")) {
                try LinearQuantizer.writeInt8Codes(
                    codebook, streamedRows: 8, columns: 8, blockElements: 16, name: "embed"
                ) {
                    elements, buffer in
                    // The second reading finds 2.0 at element 40 (in the third block of 16).
                    for (offset, index) in elements.enumerated() { buffer[offset] = index == 40 ? 0x4000 : bits[index] }
                } write: {
                    written += $0.count
                }
            }
            // The blocks before it were written; the changed one was not.
            #expect(written == 32)
            #expect(
                CompressionError.changedWhileRead(tensor: "embed").description
                    == "tensor 'embed': the checkpoint changed while it was being read (a value its first reading did not hold)"
            )
        }

        @Test("declines values without a finite float16, and passes read errors on from either pass")
        func declinesAndFails() throws {
            var bits = [UInt16](repeating: 0x3F80, count: 64)
            bits[9] = 0x7FC0  // NaN
            #expect(try stream(bits, rows: 8, columns: 8, workers: 2, blockElements: 16) == nil)
            bits[9] = 0xC780  // −65,536
            #expect(try stream(bits, rows: 8, columns: 8, workers: 2, blockElements: 16) == nil)
            bits[9] = 0x3F80
            #expect(throws: ReadFailure()) {
                try stream(bits, rows: 8, columns: 8, workers: 2, blockElements: 16, failAt: 40)
            }
            #expect(throws: ReadFailure()) {
                try stream(bits, rows: 8, columns: 8, workers: 2, blockElements: 16, failWritingAt: 63)
            }
            // Counting: whichever worker fails first, the error is the lowest failing block's.
            struct BlockFailure: Error, Equatable { let start: Int }
            for _ in 0..<20 {
                #expect(throws: BlockFailure(start: 16)) {
                    try LinearQuantizer.int8PerTensorCodebook(
                        streamedRows: 8, columns: 8, kind: .bfloat16, workers: 2, blockElements: 16
                    ) {
                        elements, buffer in
                        if elements.lowerBound > 0 { throw BlockFailure(start: elements.lowerBound) }
                        for (offset, index) in elements.enumerated() { buffer[offset] = bits[index] }
                    }
                }
            }
        }
    }
}
