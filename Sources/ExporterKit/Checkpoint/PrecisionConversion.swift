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
/// Every finite in-range value avoids Swift's `Float16(Float)`, a library call per element on
/// x86_64 without F16C: branch-free lanes (vectorised by the compiler) remap the exponent of
/// normal values and let the FPU round subnormals; a scalar pass, only over the rare blocks that
/// need it, handles out-of-range and non-finite values. Results are bit-identical to
/// `Float16(Float)` (checked exhaustively for bfloat16 and float16 sources by the tests).
public enum PrecisionConversion {
    /// The largest finite float16.
    public static let float16Maximum: Float = 65504

    /// Elements per block of the float32 and float16 fast paths; a block with any out-of-range
    /// or non-finite value is revisited one element at a time.
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
        let rounded = UInt16(truncatingIfNeeded: (bits &+ 0x7FFF &+ ((bits >> 16) & 1)) >> 16)
        // A select, not a branch, so that loops over many values vectorise.
        return value.isNaN ? UInt16(truncatingIfNeeded: bits >> 16) | 0x0040 : rounded
    }

    /// The frame every conversion shares: the common length of the two buffers, their base
    /// addresses, and the statistics the body fills; nothing is done for an empty buffer.
    @inline(__always)
    private static func convert<Source, Target>(
        _ source: UnsafeBufferPointer<Source>, into destination: UnsafeMutableBufferPointer<Target>,
        _ body: (
            _ input: UnsafePointer<Source>, _ output: UnsafeMutablePointer<Target>, _ count: Int,
            _ statistics: inout ConversionStatistics
        ) -> Void
    ) -> ConversionStatistics {
        var statistics = ConversionStatistics()
        let count = min(source.count, destination.count)
        guard count > 0, let input = source.baseAddress, let output = destination.baseAddress else {
            return statistics
        }
        body(input, output, count, &statistics)
        return statistics
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
        convert(source, into: destination) { input, output, count, statistics in
            output.withMemoryRebound(to: UInt16.self, capacity: count) { output in
                var blockStart = 0
                while blockStart < count {
                    let blockEnd = min(blockStart + bfloat16BlockLength, count)
                    // First pass, 16-bit lanes (eight per SSE register): exponents 113...142 are
                    // float16's normal range, converted exactly by re-biasing the exponent and
                    // widening the mantissa; zero keeps its sign. Masks are all ones or zero, from
                    // arithmetic shifts, so the loop vectorises without branches.
                    var unusual: Int16 = 0
                    for index in blockStart..<blockEnd {
                        let bits = input[index]
                        let magnitude = Int16(bitPattern: bits & 0x7FFF)
                        let offset = magnitude &- 0x3880
                        let normal = ~(offset >> 15) & ((offset &- 0x0F00) >> 15)
                        let nonZero = (0 &- magnitude) >> 15
                        output[index] = (bits & 0x8000) | UInt16(bitPattern: ((magnitude &- 0x3800) &<< 3) & normal)
                        unusual |= nonZero & ~normal
                    }
                    // Subnormal results (common: about 1 weight in 200) need rounding: redo the block
                    // in 32-bit lanes, and the few out-of-range or non-finite values one by one.
                    if unusual != 0 {
                        bfloat16ToFloat16Wide(
                            input, output, blockStart..<blockEnd, clamping: clampingOutOfRange, &statistics)
                    }
                    blockStart = blockEnd
                }
            }
        }
    }

    /// Elements per block of the bfloat16 fast pass: short enough that a subnormal sends few
    /// neighbours through the slower pass, long enough to amortise the block's overhead.
    private static let bfloat16BlockLength = 32

    /// The second pass of `toFloat16(bfloat16Bits:…)` over one block: every magnitude below
    /// 65,536 in 32-bit lanes (subnormals rounded by the FPU), the rest exactly, one by one.
    @inline(__always)
    private static func bfloat16ToFloat16Wide(
        _ input: UnsafePointer<UInt16>, _ output: UnsafeMutablePointer<UInt16>, _ block: Range<Int>,
        clamping: Bool, _ statistics: inout ConversionStatistics
    ) {
        var irregular: Int32 = 0
        for index in block {
            let bits = input[index]
            let magnitude = Int32(bits & 0x7FFF)
            let offset = magnitude &- 0x3880
            let small = offset >> 31
            let normal = ~small & ((offset &- 0x0F00) >> 31)
            let normalBits = ((magnitude &- 0x3800) &<< 3) & normal
            let subnormalBits = float16SubnormalBits(magnitude &<< 16) & small
            output[index] = (bits & 0x8000) | UInt16(truncatingIfNeeded: normalBits | subnormalBits)
            irregular |= ~(small | normal)
        }
        guard irregular != 0 else { return }
        for index in block where input[index] & 0x7FFF >= 0x4780 {
            output[index] = exactFloat16Bits(float(bfloat16Bits: input[index]), clamping: clamping, &statistics)
        }
    }

    /// Copies float16 bit patterns, counting NaN and infinities.
    public static func toFloat16(
        float16Bits source: UnsafeBufferPointer<UInt16>,
        into destination: UnsafeMutableBufferPointer<Float16>
    ) -> ConversionStatistics {
        convert(source, into: destination) { input, output, count, statistics in
            var nonFinite = 0
            output.withMemoryRebound(to: UInt16.self, capacity: count) { output in
                for index in 0..<count {
                    let bits = input[index]
                    output[index] = bits
                    nonFinite &+= bits & 0x7C00 == 0x7C00 ? 1 : 0
                }
            }
            statistics.nonFiniteCount = nonFinite
        }
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
        convert(source, into: destination) { input, output, count, statistics in
            // Magnitudes up to 65504 convert in the vector pass: from 2^-14 on by rounding the
            // mantissa (a carry into the exponent is still correct rounding), below as subnormals.
            @inline(__always) func isRegular(_ magnitude: UInt32) -> Bool { magnitude <= 0x477F_E000 }
            output.withMemoryRebound(to: UInt16.self, capacity: count) { output in
                var blockStart = 0
                while blockStart < count {
                    let blockEnd = min(blockStart + blockLength, count)
                    var irregular: Int32 = 0
                    for index in blockStart..<blockEnd {
                        let bits = input[index].bitPattern
                        let magnitude = Int32(bitPattern: bits & 0x7FFF_FFFF)
                        let offset = magnitude &- 0x3880_0000
                        let small = offset >> 31
                        let normal = ~small & ((offset &- (0x477F_E000 - 0x3880_0000 + 1)) >> 31)
                        let rounded = magnitude &+ 0x0FFF &+ ((magnitude >> 13) & 1)
                        let normalBits = ((rounded &- 0x3800_0000) >> 13) & normal
                        let subnormalBits = float16SubnormalBits(magnitude) & small
                        let sign = UInt16(truncatingIfNeeded: bits >> 16) & 0x8000
                        output[index] = sign | UInt16(truncatingIfNeeded: normalBits | subnormalBits)
                        irregular |= ~(small | normal)
                    }
                    if irregular != 0 {
                        for index in blockStart..<blockEnd where !isRegular(input[index].bitPattern & 0x7FFF_FFFF) {
                            output[index] = exactFloat16Bits(input[index], clamping: clampingOutOfRange, &statistics)
                        }
                    }
                    blockStart = blockEnd
                }
            }
        }
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

    /// The float16 bits of a float32 magnitude below 2^-14 (given as bits), rounded to nearest
    /// even by the FPU: adding 0.5, whose ulp is float16's smallest subnormal 2^-24, leaves the
    /// subnormal's mantissa in the low bits (the rounding may carry into the smallest normal,
    /// which is the correct result).
    @inline(__always)
    static func float16SubnormalBits(_ magnitudeBits: Int32) -> Int32 {
        let shifted = Float(bitPattern: UInt32(bitPattern: magnitudeBits)) + 0.5
        return Int32(bitPattern: shifted.bitPattern) &- 0x3F00_0000
    }

    // MARK: To float32

    /// Widens bfloat16 bit patterns to float32 (exact), counting NaN and infinities.
    public static func toFloat(
        bfloat16Bits source: UnsafeBufferPointer<UInt16>,
        into destination: UnsafeMutableBufferPointer<Float>
    ) -> ConversionStatistics {
        convert(source, into: destination) { input, output, count, statistics in
            var nonFinite = 0
            for index in 0..<count {
                let bits = input[index]
                output[index] = Float(bitPattern: UInt32(bits) << 16)
                nonFinite &+= bits & 0x7F80 == 0x7F80 ? 1 : 0
            }
            statistics.nonFiniteCount = nonFinite
        }
    }

    /// Widens float16 bit patterns to float32 (exact), counting NaN and infinities.
    public static func toFloat(
        float16Bits source: UnsafeBufferPointer<UInt16>,
        into destination: UnsafeMutableBufferPointer<Float>
    ) -> ConversionStatistics {
        convert(source, into: destination) { input, output, count, statistics in
            // Finite values widen in the vector pass: normals by re-biasing the exponent,
            // subnormals m × 2^-24 as (2^-14 + m × 2^-24) − 2^-14 in float arithmetic (exact).
            // Only infinities and NaN (exponent 31) take the scalar pass, to be counted.
            var blockStart = 0
            while blockStart < count {
                let blockEnd = min(blockStart + blockLength, count)
                var irregular: Int32 = 0
                for index in blockStart..<blockEnd {
                    let bits = input[index]
                    let magnitude = Int32(bits & 0x7FFF)
                    let exponent = magnitude >> 10
                    let subnormal = (exponent &- 1) >> 31
                    let special = ~((exponent &- 31) >> 31)
                    let normalBits = ((magnitude &<< 13) &+ (112 << 23)) & ~subnormal
                    let offsetValue = Float(bitPattern: UInt32(bitPattern: (magnitude &<< 13) &+ (113 << 23)))
                    let subnormalValue = offsetValue - 0x1p-14
                    let subnormalBits = Int32(bitPattern: subnormalValue.bitPattern) & subnormal
                    output[index] = Float(
                        bitPattern: UInt32(bits & 0x8000) << 16 | UInt32(bitPattern: normalBits | subnormalBits))
                    irregular |= special
                }
                if irregular != 0 {
                    for index in blockStart..<blockEnd where input[index] & 0x7C00 == 0x7C00 {
                        statistics.nonFiniteCount += 1
                        output[index] = Float(Float16(bitPattern: input[index]))
                    }
                }
                blockStart = blockEnd
            }
        }
    }

    /// Copies float32 values, counting NaN and infinities.
    public static func toFloat(
        float32 source: UnsafeBufferPointer<Float>,
        into destination: UnsafeMutableBufferPointer<Float>
    ) -> ConversionStatistics {
        convert(source, into: destination) { input, output, count, statistics in
            var nonFinite = 0
            for index in 0..<count {
                let value = input[index]
                output[index] = value
                nonFinite &+= value.bitPattern & 0x7F80_0000 == 0x7F80_0000 ? 1 : 0
            }
            statistics.nonFiniteCount = nonFinite
        }
    }
}
