import Foundation

/// Deterministic, realistic-looking weights for tests and benchmarks, without a download.
///
/// Real LLM weights are not uniform noise: they are heavy-tailed with rare large outliers,
/// which is exactly what palettisation and range checks must cope with. So, per tensor:
/// - matrices (and any tensor not below): a Laplace core with standard deviation
///   `0.8 / sqrt(columns)` (0.02 at 1,600 columns, like a 1.5B model's hidden size), plus, with
///   probability 1e-4 per element, an outlier of magnitude 1 to 10 (density ∝ 1/m², so most
///   are near 1) and random sign;
/// - 1-D tensors whose name ends in `norm.weight`: 1 plus Laplace noise of deviation 0.05;
/// - tensors whose name ends in `bias`: Laplace of deviation 0.01, no outliers.
///
/// Element `i` of tensor `T` is a pure function of (seed, T's name, T's shape, i): a
/// counter-based generator (SplitMix64 finalisers over the seed, an FNV-1a hash of the name
/// and the index) rather than a stream, so any chunking, order or thread count gives the
/// same values. The arithmetic is plain IEEE double (own logarithm, no libm), so the values
/// are the same on every platform too.
public struct SyntheticWeights: Sendable {
    /// The seed every value derives from.
    public let seed: UInt64

    /// Probability of an outlier in a matrix element.
    public static let outlierProbability = 1.0e-4

    /// A generator for `seed`.
    public init(seed: UInt64) {
        self.seed = seed
    }

    /// What one tensor's values look like: fixed per (seed, name, shape).
    struct Profile {
        let key: UInt64
        let center: Double
        /// Laplace scale b (standard deviation / √2).
        let laplaceScale: Double
        /// Outlier threshold on 24 random bits (0: no outliers).
        let outlierThreshold: UInt64

        @inline(__always)
        func value(at index: Int) -> Double {
            let (first, second) = hashes(at: index)
            return isOutlier(second) ? outlier(second) : laplace(first, second)
        }

        /// The two random words behind element `index`: the first drives the Laplace core,
        /// the second the sign, the outlier draw and the outlier's magnitude.
        @inline(__always)
        func hashes(at index: Int) -> (first: UInt64, second: UInt64) {
            let first = SyntheticWeights.mix(key &+ (UInt64(truncatingIfNeeded: index) &+ 1) &* 0x9E37_79B9_7F4A_7C15)
            return (first, SyntheticWeights.mix(first ^ 0xD1B5_4A32_D192_ED03))
        }

        @inline(__always)
        func isOutlier(_ second: UInt64) -> Bool { second >> 40 < outlierThreshold }

        /// Magnitude 1 / (1 - 0.9u) lies in [1, 10) with density ∝ 1/m²; random sign.
        @inline(__always)
        func outlier(_ second: UInt64) -> Double {
            let uniform = Double(Int64(bitPattern: (second >> 8) & 0xFFFFF)) * 0x1p-20
            let magnitude = 1 / (1 - 0.9 * uniform)
            return second & 1 == 1 ? -magnitude : magnitude
        }

        /// Inverse CDF of the Laplace distribution on a uniform in (0, 1); random sign.
        @inline(__always)
        func laplace(_ first: UInt64, _ second: UInt64) -> Double {
            let uniform = (SyntheticWeights.exactDouble(first >> 11) + 0.5) * 0x1p-53
            let magnitude = -laplaceScale * SyntheticWeights.naturalLogarithm(uniform)
            return center + (second & 1 == 1 ? -magnitude : magnitude)
        }

        /// Elements `start ..< start + destination.count` as float32, the same as `value(at:)`
        /// one by one. In passes over the batch (the hashes, then every value as a Laplace
        /// one, then the rare outliers): one element's work is a long chain of dependent
        /// multiplications and a division, and split this way the processor overlaps many
        /// elements' chains instead of two or three (1.4× faster).
        func fill(_ destination: UnsafeMutableBufferPointer<Float>, from start: Int) {
            guard let output = destination.baseAddress else { return }
            let count = destination.count
            withUnsafeTemporaryAllocation(of: UInt64.self, capacity: 3 * count) { words in
                guard let firsts = words.baseAddress else { return }
                let seconds = firsts + count
                let outliers = seconds + count
                var outlierCount = 0
                for offset in 0..<count {
                    let (first, second) = hashes(at: start + offset)
                    firsts[offset] = first
                    seconds[offset] = second
                    if isOutlier(second) {
                        outliers[outlierCount] = UInt64(truncatingIfNeeded: offset)
                        outlierCount += 1
                    }
                }
                for offset in 0..<count { output[offset] = Float(laplace(firsts[offset], seconds[offset])) }
                for slot in 0..<outlierCount {
                    let offset = Int(truncatingIfNeeded: outliers[slot])
                    output[offset] = Float(outlier(seconds[offset]))
                }
            }
        }
    }

    func profile(name: String, shape: [Int]) -> Profile {
        let key = SyntheticWeights.mix(seed ^ SyntheticWeights.mix(SyntheticWeights.fnv1a(name)))
        let threshold = UInt64((SyntheticWeights.outlierProbability * 16_777_216).rounded())
        if name.hasSuffix("norm.weight"), shape.count == 1 {
            return Profile(key: key, center: 1, laplaceScale: 0.05 / 2.0.squareRoot(), outlierThreshold: 0)
        }
        if name.hasSuffix("bias") {
            return Profile(key: key, center: 0, laplaceScale: 0.01 / 2.0.squareRoot(), outlierThreshold: 0)
        }
        let columns = Double(max(shape.last ?? 1, 1))
        let deviation = 0.8 / columns.squareRoot()
        return Profile(key: key, center: 0, laplaceScale: deviation / 2.0.squareRoot(), outlierThreshold: threshold)
    }

    /// Element `index` of tensor `name` of shape `shape`, as float32.
    public func value(name: String, shape: [Int], index: Int) -> Float {
        Float(profile(name: name, shape: shape).value(at: index))
    }

    /// Writes elements `elements` of tensor `name` into `destination` (`elements.count` values;
    /// extra room is left untouched, a shorter buffer gets its count).
    public func generate(
        name: String, shape: [Int], elements: Range<Int>, into destination: UnsafeMutableBufferPointer<Float>
    ) {
        let profile = profile(name: name, shape: shape)
        let count = min(destination.count, elements.count)
        for done in stride(from: 0, to: count, by: Self.batch) {
            let size = min(Self.batch, count - done)
            profile.fill(
                UnsafeMutableBufferPointer(rebasing: destination[done..<(done + size)]),
                from: elements.lowerBound + done)
        }
    }

    /// Elements generated per pass of ``Profile/fill(_:from:)``.
    static let batch = 1024

    /// As `generate(name:shape:elements:into:)`, rounded to float16 (values stay within ±10).
    public func generate(
        name: String, shape: [Int], elements: Range<Int>, into destination: UnsafeMutableBufferPointer<Float16>
    ) {
        // Converted in batches by the reader's conversion (the same rounding to nearest even):
        // Linux x86-64 builds convert one Float16 at a time in software, a third of a
        // synthetic export's time.
        forEachBatch(name: name, shape: shape, elements: elements, count: destination.count) { values, done in
            _ = PrecisionConversion.toFloat16(
                float32: values, into: UnsafeMutableBufferPointer(rebasing: destination[done..<(done + values.count)]),
                clampingOutOfRange: false)
        }
    }

    /// As `generate(name:shape:elements:into:)`, as bfloat16 bit patterns (nearest, ties to even).
    public func generateBFloat16Bits(
        name: String, shape: [Int], elements: Range<Int>, into destination: UnsafeMutableBufferPointer<UInt16>
    ) {
        guard let output = destination.baseAddress else { return }
        forEachBatch(name: name, shape: shape, elements: elements, count: destination.count) { values, done in
            guard let input = values.baseAddress else { return }
            // Plain pointers: the compiler vectorises this loop.
            let batchOutput = output + done
            for offset in 0..<values.count { batchOutput[offset] = PrecisionConversion.bfloat16Bits(input[offset]) }
        }
    }

    /// Generates the first `min(count, elements.count)` of `elements` a batch at a time into
    /// one scratch buffer and hands each to `body` with its offset from the first: the loop of
    /// the forms that convert the float32 values.
    private func forEachBatch(
        name: String, shape: [Int], elements: Range<Int>, count: Int, _ body: (UnsafeBufferPointer<Float>, Int) -> Void
    ) {
        let profile = profile(name: name, shape: shape)
        let total = min(count, elements.count)
        withUnsafeTemporaryAllocation(of: Float.self, capacity: Self.batch) { floats in
            for done in stride(from: 0, to: total, by: Self.batch) {
                let values = UnsafeMutableBufferPointer(rebasing: floats[0..<min(Self.batch, total - done)])
                profile.fill(values, from: elements.lowerBound + done)
                body(UnsafeBufferPointer(values), done)
            }
        }
    }

    // MARK: Hashing and arithmetic

    /// FNV-1a, 64-bit, over the UTF-8 bytes: stable across runs and platforms, unlike `Hasher`.
    static func fnv1a(_ text: String) -> UInt64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01B3
        }
        return hash
    }

    /// The SplitMix64 finaliser: a bijective mix where every input bit affects every output bit.
    @inline(__always)
    static func mix(_ input: UInt64) -> UInt64 {
        var z = input
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// ln(x) for a positive normal x, to about 1e-11 (far finer than float32), from additions,
    /// multiplications and one division: libm's `log` may differ between platforms in the last bit.
    @inline(__always)
    static func naturalLogarithm(_ x: Double) -> Double {
        // x = m · 2^e with m in [1, 2), halved (e one up) above √2, without a branch (it went
        // either way at random and, mispredicted, cost over a quarter of the generator's time)
        // and without 64-bit integer comparisons or conversions, which SSE2 lacks: the
        // compiler would handle such lanes one at a time. Positive doubles order as their bit
        // patterns, so the comparison is a floating-point one; halving m is exact.
        let bits = x.bitPattern
        let unhalved = Double(bitPattern: (bits & 0x000F_FFFF_FFFF_FFFF) | 0x3FF0_0000_0000_0000)
        let halve = unhalved > 1.4142135623730951
        let mantissa = halve ? unhalved * 0.5 : unhalved
        let exponent = exactDouble(bits >> 52) - (halve ? 1022 : 1023)
        // ln(m) = 2 atanh(t), t = (m - 1) / (m + 1), |t| ≤ 0.172: the odd series converges fast.
        let t = (mantissa - 1) / (mantissa + 1)
        let t2 = t * t
        // 2 (1 + t²/3 + … + t¹²/13), the next term under 3e-12 relative; evaluated in Estrin's
        // form (pairs, then pairs of pairs) so the dependency chain is short and consecutive
        // elements overlap in the pipeline.
        let t4 = t2 * t2
        let t8 = t4 * t4
        let low = (2.0 + (2.0 / 3) * t2) + (2.0 / 5 + (2.0 / 7) * t2) * t4
        let high = (2.0 / 9 + (2.0 / 11) * t2) + (2.0 / 13) * t4
        let series = low + high * t8
        return exponent * 0.6931471805599453 + t * series
    }

    /// `Double(value)` for `value < 2^53` (exact), from bit operations and additions: the two
    /// halves below and from 2^52 each become a double exactly, and so does their sum.
    @inline(__always)
    static func exactDouble(_ value: UInt64) -> Double {
        let twoTo52: UInt64 = 0x4330_0000_0000_0000  // 2^52 as a double
        let low = Double(bitPattern: twoTo52 | (value & 0x000F_FFFF_FFFF_FFFF)) - 0x1p52
        return low + Double(bitPattern: (0 &- (value >> 52)) & twoTo52)
    }
}
