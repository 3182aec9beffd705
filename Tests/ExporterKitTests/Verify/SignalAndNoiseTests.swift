import Testing

@testable import ExporterKit

@Suite("verify: SQNR against the checkpoint")
struct SignalAndNoiseTests {
    /// The definition: each source value rounded one by one, summed in element order.
    private func reference(_ source: [Float], _ decoded: [Float], _ precision: ComputePrecision) -> (Double, Double) {
        var signal = 0.0
        var noise = 0.0
        for (original, value) in zip(source, decoded) {
            let rounded = Double(ArtifactVerifier.rounded(original, to: precision))
            signal += rounded * rounded
            noise += (rounded - Double(value)) * (rounded - Double(value))
        }
        return (signal, noise)
    }

    @Test("batched float16 rounding, added in blocks, gives the sums of rounding one by one", arguments: [false, true])
    func sameAsOneByOne(withInfinity: Bool) {
        // 150,000 values: ordinary weights, float16 subnormals and values beyond ±65,504.
        var state: UInt32 = 17
        var source = (0..<150_000).map { index -> Float in
            state = state &* 1_664_525 &+ 1_013_904_223
            let unit = Float(state >> 8) / Float(1 << 24) - 0.5
            switch index % 50 {
            case 0: return unit * 1e-6
            case 1: return unit * 200_000
            case 2: return 65_510
            default: return unit * 0.1
            }
        }
        var decoded = source.map { $0 * 0.99 }
        // An infinity in the source (a finite value decoded): rounded to float16, it clamps to −65,504.
        if withInfinity { (source[100_000], decoded[100_000]) = (-.infinity, 0) }
        for precision in ComputePrecision.allCases {
            // Added in two calls split inside a batch, as verify adds a tensor block by block.
            var sums = ArtifactVerifier.SignalAndNoise()
            source.withUnsafeBufferPointer { source in
                decoded.withUnsafeBufferPointer { decoded in
                    for range in [0..<70_001, 70_001..<source.count] {
                        ArtifactVerifier.addSignalAndNoise(
                            UnsafeBufferPointer(rebasing: source[range]), UnsafeBufferPointer(rebasing: decoded[range]),
                            referencePrecision: precision, to: &sums)
                    }
                }
            }
            let expected = reference(source, decoded, precision)
            #expect(sums.signal == expected.0)
            #expect(sums.noise == expected.1)
        }
    }
}
