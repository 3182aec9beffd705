import TestSupport
import Testing

@testable import ExporterKit

@Suite("tensor encoder: kept tensors streamed in float16 blocks")
struct TensorEncoderTests {
    /// Two blocks, the second short: random bfloat16 patterns below float16's limit.
    private func patterns() -> [UInt16] {
        var state: UInt32 = 11
        return (0..<(LinearQuantizer.streamBlockElements + 1_000)).map { _ in
            state = state &* 1_664_525 &+ 1_013_904_223
            return UInt16(truncatingIfNeeded: state >> 8) % 0x4780 | (state & 1 == 0 ? 0 : 0x8000)
        }
    }

    private func blocks(
        _ stored: [UInt16], kind: SourcePatterns, converting: Bool
    ) throws -> (whole: Bool, blocks: Int, values: [UInt16]) {
        var values: [UInt16] = []
        var blocks = 0
        let whole = try TensorEncoder.float16Blocks(
            of: stored.count, kind: kind, converting: converting,
            read: { elements, buffer in
                for (offset, element) in elements.enumerated() { buffer[offset] = stored[element] }
            },
            body: {
                blocks += 1
                values += $0
            })
        return (whole, blocks, values)
    }

    @Test(
        "bfloat16 patterns convert block by block as the reader converts them; a pattern float16 cannot hold stops them"
    )
    func bfloat16Blocks() throws {
        var stored = patterns()
        var expected = [Float16](repeating: 0, count: stored.count)
        stored.withUnsafeBufferPointer { source in
            expected.withUnsafeMutableBufferPointer {
                _ = PrecisionConversion.toFloat16(bfloat16Bits: source, into: $0, clampingOutOfRange: false)
            }
        }
        let converted = try blocks(stored, kind: .bfloat16, converting: true)
        #expect(converted.whole && converted.blocks == 2)
        #expect(converted.values == expected.map(\.bitPattern))
        // Only checked, not converted: the stored patterns.
        #expect(try blocks(stored, kind: .bfloat16, converting: false).values == stored)

        // 65,536 in the second block: the first block is handed on, then it stops.
        stored[stored.count - 1] = 0x4780
        let stopped = try blocks(stored, kind: .bfloat16, converting: true)
        #expect(!stopped.whole && stopped.blocks == 1)
    }

    @Test("float16 patterns pass as stored; infinity or NaN stops them")
    func float16Blocks() throws {
        var stored = patterns().map { $0 & 0xBBFF }
        let passed = try blocks(stored, kind: .float16, converting: true)
        #expect(passed.whole && passed.values == stored)
        stored[5] = 0xFC00
        let stopped = try blocks(stored, kind: .float16, converting: true)
        #expect(!stopped.whole && stopped.blocks == 0)
    }
}

@Suite("tensor prefetcher: sliding windows")
struct TensorWindowTests {
    /// The window a scan from `start` gives: the prefetcher's rule before it slid.
    private func scanned(from start: Int, sizes: [Int], limit: Int, firstAlways: Bool) -> Int {
        var bytes = 0
        var end = start
        while end < sizes.count {
            bytes += sizes[end]
            guard (firstAlways && end == start) || bytes <= limit else { break }
            end += 1
        }
        return end
    }

    @Test("sliding one tensor at a time, or several, gives the window a scan from each start gives")
    func slidesAsScans() {
        var generator = SplitMix64(seed: 7)
        func next(_ bound: Int) -> Int { Int.random(in: 0..<bound, using: &generator) }
        for trial in 0..<40 {
            // Sizes from 0 to past the limit, so that one tensor alone can overflow it.
            let sizes = (0..<(20 + trial)).map { _ in next(5) == 0 ? 0 : next(150) }
            for firstAlways in [true, false] {
                var window = TensorWindow()
                var start = 0
                while start < sizes.count {
                    window.slide(
                        to: start, count: sizes.count, limit: 100, firstAlways: firstAlways, size: { sizes[$0] })
                    #expect(window.start == start)
                    #expect(
                        window.end == scanned(from: start, sizes: sizes, limit: 100, firstAlways: firstAlways),
                        "trial \(trial), start \(start), \(sizes)")
                    start += 1 + (next(3) == 0 ? next(4) : 0)
                }
            }
        }
    }
}
