/// What a precision conversion met, added up over the chunks of one tensor.
public struct ConversionStatistics: Equatable, Sendable {
    /// NaN or infinite source values.
    public var nonFiniteCount = 0
    /// Finite source values beyond ±65504 (only counted when converting to float16).
    public var outOfRangeCount = 0
    /// The largest magnitude among the out-of-range values, 0 when there are none.
    public var largestOutOfRangeMagnitude: Float = 0

    /// No values met yet.
    public init() {}

    /// Adds the counts of another chunk.
    public mutating func merge(_ other: ConversionStatistics) {
        nonFiniteCount += other.nonFiniteCount
        outOfRangeCount += other.outOfRangeCount
        largestOutOfRangeMagnitude = max(largestOutOfRangeMagnitude, other.largestOutOfRangeMagnitude)
    }
}

/// Conversions from checkpoint dtypes (BF16, F16, F32) to the compute precisions
/// float16 and float32, rounding to nearest even, counting what cannot be represented.
///
/// The functions never fail: they convert and count, and the caller decides (the
/// checkpoint reader turns counts into `CheckpointError`s once a whole tensor is read).
/// Sources are host-order values; the reader has already applied the file's little-endian order.
/// When the buffers differ in length, the shorter one's count is converted.
///
/// The common cases avoid Swift's `Float16(Float)`, which is a library call per element on
/// x86_64 without F16C: a branch-free bit remapping handles every value in float16's normal
/// range (vectorised by the compiler), and a scalar pass fixes only the rare blocks that hold
/// subnormals, out-of-range or non-finite values.
public enum PrecisionConversion {
    /// The largest finite float16.
    public static let float16Maximum: Float = 65504

    /// Elements per block of the fast path; a block with any irregular value is revisited.
    private static let blockLength = 64

    /// The float32 value of a bfloat16 bit pattern (exact: bfloat16 is float32's upper half).
    @inlinable
    public static func float(bfloat16Bits bits: UInt16) -> Float {
        Float(bitPattern: UInt32(bits) << 16)
    }

    /// The bfloat16 bit pattern nearest to `value` (ties to even); NaN stays a quiet NaN.
    @inlinable
    public static func bfloat16Bits(_ value: Float) -> UInt16 {
        let bits = value.bitPattern
        if value.isNaN { return UInt16(truncatingIfNeeded: bits >> 16) | 0x0040 }
        let roundingBias = 0x7FFF + ((bits >> 16) & 1)
        return UInt16(truncatingIfNeeded: (bits &+ roundingBias) >> 16)
    }

    // MARK: To float16

    /// Converts bfloat16 bit patterns to float16.
    ///
    /// Values beyond ±65504 become ±65504 when `clampingOutOfRange`, ±infinity otherwise;
    /// either way they are counted, as are NaN and infinities (copied through).
    public static func toFloat16(
        bfloat16Bits source: UnsafeBufferPointer<UInt16>,
        into destination: UnsafeMutableBufferPointer<Float16>,
        clampingOutOfRange: Bool
    ) -> ConversionStatistics {
        var statistics = ConversionStatistics()
        let count = min(source.count, destination.count)
        guard count > 0, let input = source.baseAddress, let output = destination.baseAddress else {
            return statistics
        }
        output.withMemoryRebound(to: UInt16.self, capacity: count) { output in
            // bfloat16 exponents 113...142 are float16's normal range: re-bias the exponent and
            // widen the 7-bit mantissa to 10 bits, exactly.
            @inline(__always) func isRegular(_ magnitude: UInt16) -> Bool {
                magnitude &- 0x3880 < 0x0F00 || magnitude == 0
            }
            var blockStart = 0
            while blockStart < count {
                let blockEnd = min(blockStart + blockLength, count)
                var irregular = false
                for index in blockStart..<blockEnd {
                    let bits = input[index]
                    let magnitude = bits & 0x7FFF
                    let sign = bits & 0x8000
                    let regular = magnitude &- 0x3880 < 0x0F00
                    output[index] = regular ? sign | ((magnitude &- 0x3800) &<< 3) : sign
                    irregular = irregular || (!regular && magnitude != 0)
                }
                if irregular {
                    for index in blockStart..<blockEnd where !isRegular(input[index] & 0x7FFF) {
                        output[index] = exactFloat16Bits(
                            float(bfloat16Bits: input[index]), clamping: clampingOutOfRange, &statistics)
                    }
                }
                blockStart = blockEnd
            }
        }
        return statistics
    }

    /// Copies float16 bit patterns, counting NaN and infinities.
    public static func toFloat16(
        float16Bits source: UnsafeBufferPointer<UInt16>,
        into destination: UnsafeMutableBufferPointer<Float16>
    ) -> ConversionStatistics {
        var statistics = ConversionStatistics()
        let count = min(source.count, destination.count)
        guard count > 0, let input = source.baseAddress, let output = destination.baseAddress else {
            return statistics
        }
        var nonFinite = 0
        output.withMemoryRebound(to: UInt16.self, capacity: count) { output in
            for index in 0..<count {
                let bits = input[index]
                output[index] = bits
                nonFinite &+= bits & 0x7C00 == 0x7C00 ? 1 : 0
            }
        }
        statistics.nonFiniteCount = nonFinite
        return statistics
    }

    /// Converts float32 values to float16, rounding to nearest even.
    ///
    /// Values beyond ±65504 become ±65504 when `clampingOutOfRange`, ±infinity otherwise;
    /// either way they are counted, as are NaN and infinities.
    public static func toFloat16(
        float32 source: UnsafeBufferPointer<Float>,
        into destination: UnsafeMutableBufferPointer<Float16>,
        clampingOutOfRange: Bool
    ) -> ConversionStatistics {
        var statistics = ConversionStatistics()
        let count = min(source.count, destination.count)
        guard count > 0, let input = source.baseAddress, let output = destination.baseAddress else {
            return statistics
        }
        // Magnitudes from 2^-14 up to 65504 round into float16's normal range; the rounding
        // carry may bump the exponent, which is still correct rounding.
        @inline(__always) func isRegular(_ magnitude: UInt32) -> Bool {
            magnitude &- 0x3880_0000 <= 0x477F_E000 - 0x3880_0000 || magnitude == 0
        }
        output.withMemoryRebound(to: UInt16.self, capacity: count) { output in
            var blockStart = 0
            while blockStart < count {
                let blockEnd = min(blockStart + blockLength, count)
                var irregular = false
                for index in blockStart..<blockEnd {
                    let bits = input[index].bitPattern
                    let magnitude = bits & 0x7FFF_FFFF
                    let sign = UInt16(truncatingIfNeeded: bits >> 16) & 0x8000
                    let rounded = magnitude &+ 0x0FFF &+ ((magnitude >> 13) & 1)
                    let regular = magnitude &- 0x3880_0000 <= 0x477F_E000 - 0x3880_0000
                    let converted = UInt16(truncatingIfNeeded: (rounded &- 0x3800_0000) >> 13)
                    output[index] = regular ? sign | converted : sign
                    irregular = irregular || (!regular && magnitude != 0)
                }
                if irregular {
                    for index in blockStart..<blockEnd where !isRegular(input[index].bitPattern & 0x7FFF_FFFF) {
                        output[index] = exactFloat16Bits(input[index], clamping: clampingOutOfRange, &statistics)
                    }
                }
                blockStart = blockEnd
            }
        }
        return statistics
    }

    /// The slow, exact path for one value: subnormals, out-of-range values, NaN and infinities.
    private static func exactFloat16Bits(
        _ value: Float, clamping: Bool, _ statistics: inout ConversionStatistics
    ) -> UInt16 {
        guard value.isFinite else {
            statistics.nonFiniteCount += 1
            return Float16(value).bitPattern
        }
        let magnitude = value.magnitude
        guard magnitude > float16Maximum else { return Float16(value).bitPattern }
        statistics.outOfRangeCount += 1
        statistics.largestOutOfRangeMagnitude = max(statistics.largestOutOfRangeMagnitude, magnitude)
        let limit: Float16 = clamping ? Float16(float16Maximum) : .infinity
        return (value < 0 ? -limit : limit).bitPattern
    }

    // MARK: To float32

    /// Widens bfloat16 bit patterns to float32 (exact), counting NaN and infinities.
    public static func toFloat(
        bfloat16Bits source: UnsafeBufferPointer<UInt16>,
        into destination: UnsafeMutableBufferPointer<Float>
    ) -> ConversionStatistics {
        var statistics = ConversionStatistics()
        let count = min(source.count, destination.count)
        guard count > 0, let input = source.baseAddress, let output = destination.baseAddress else {
            return statistics
        }
        var nonFinite = 0
        for index in 0..<count {
            let bits = input[index]
            output[index] = Float(bitPattern: UInt32(bits) << 16)
            nonFinite &+= bits & 0x7F80 == 0x7F80 ? 1 : 0
        }
        statistics.nonFiniteCount = nonFinite
        return statistics
    }

    /// Widens float16 bit patterns to float32 (exact), counting NaN and infinities.
    public static func toFloat(
        float16Bits source: UnsafeBufferPointer<UInt16>,
        into destination: UnsafeMutableBufferPointer<Float>
    ) -> ConversionStatistics {
        var statistics = ConversionStatistics()
        let count = min(source.count, destination.count)
        guard count > 0, let input = source.baseAddress, let output = destination.baseAddress else {
            return statistics
        }
        // Normal float16 values (exponent 1...30) widen by re-biasing the exponent; zero,
        // subnormals, NaN and infinities take the exact conversion.
        @inline(__always) func isRegular(_ magnitude: UInt16) -> Bool {
            (magnitude >> 10) &- 1 < 30 || magnitude == 0
        }
        var blockStart = 0
        while blockStart < count {
            let blockEnd = min(blockStart + blockLength, count)
            var irregular = false
            for index in blockStart..<blockEnd {
                let bits = input[index]
                let magnitude = bits & 0x7FFF
                let sign = UInt32(bits & 0x8000) << 16
                let regular = (magnitude >> 10) &- 1 < 30
                let widened = (UInt32(magnitude) &+ (112 << 10)) << 13
                output[index] = Float(bitPattern: regular ? sign | widened : sign)
                irregular = irregular || (!regular && magnitude != 0)
            }
            if irregular {
                for index in blockStart..<blockEnd where !isRegular(input[index] & 0x7FFF) {
                    let value = Float(Float16(bitPattern: input[index]))
                    if !value.isFinite { statistics.nonFiniteCount += 1 }
                    output[index] = value
                }
            }
            blockStart = blockEnd
        }
        return statistics
    }

    /// Copies float32 values, counting NaN and infinities.
    public static func toFloat(
        float32 source: UnsafeBufferPointer<Float>,
        into destination: UnsafeMutableBufferPointer<Float>
    ) -> ConversionStatistics {
        var statistics = ConversionStatistics()
        let count = min(source.count, destination.count)
        guard count > 0, let input = source.baseAddress, let output = destination.baseAddress else {
            return statistics
        }
        var nonFinite = 0
        for index in 0..<count {
            let value = input[index]
            output[index] = value
            nonFinite &+= value.bitPattern & 0x7F80_0000 == 0x7F80_0000 ? 1 : 0
        }
        statistics.nonFiniteCount = nonFinite
        return statistics
    }
}
