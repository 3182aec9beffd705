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
                case 0: return UInt16(truncatingIfNeeded: 0x3300 + next() % 0x0200) | (index % 2 == 0 ? 0 : 0x8000)  // 2^-25…2^-22
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
                try Palettizer.palettize(bfloat16Bits: $0, rows: rows, columns: columns, spec: spec, workerCount: workers)
            }
            #expect(direct == expected)
            // The LUT never holds −0, though −0 and values rounding to it are present.
            #expect(!(direct?.lut.contains { $0.bitPattern == 0x8000 } ?? true))
        }

        @Test("declines patterns without a finite float16 value", arguments: [UInt16(0x4780), 0xC7A0, 0x7F80, 0x7FC1])
        func declinesUnconvertible(pattern: UInt16) throws {
            var bits = patterns(count: 64, seed: 3)
            bits[17] = pattern
            let result = try bits.withUnsafeBufferPointer {
                try Palettizer.palettize(
                    bfloat16Bits: $0, rows: 4, columns: 16, spec: PaletteSpec(bits: 4, granularity: .perGroupedChannel(groupSize: 2)))
            }
            #expect(result == nil)
        }

        @Test("the conversion table is the reader's conversion")
        func tableMatchesReader() {
            for pattern in stride(from: 0, through: 0xFFFF, by: 7) where pattern & 0x7FFF < 0x4780 {
                var output: [Float16] = [0]
                [UInt16(pattern)].withUnsafeBufferPointer { source in
                    output.withUnsafeMutableBufferPointer { converted in
                        _ = PrecisionConversion.toFloat16(bfloat16Bits: source, into: converted, clampingOutOfRange: false)
                    }
                }
                #expect(Float16Table.fromBFloat16[pattern] == output[0].bitPattern)
            }
        }
    }
}
