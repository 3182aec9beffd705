import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("Checkpoint: precision conversion")
struct CheckpointPrecisionConversionTests {
    @Test("bfloat16 rounding: known answers, ties to even")
    func bfloat16Rounding() {
        #expect(PrecisionConversion.bfloat16Bits(1.0) == 0x3F80)
        #expect(PrecisionConversion.bfloat16Bits(-2.0) == 0xC000)
        #expect(PrecisionConversion.bfloat16Bits(1 + 0x1p-8) == 0x3F80)  // tie, down to even
        #expect(PrecisionConversion.bfloat16Bits(1 + 3 * 0x1p-8) == 0x3F82)  // tie, up to even
        #expect(PrecisionConversion.bfloat16Bits(1 + 0x1p-8 + 0x1p-20) == 0x3F81)
        #expect(PrecisionConversion.bfloat16Bits(.infinity) == 0x7F80)
        #expect(PrecisionConversion.float(bfloat16Bits: PrecisionConversion.bfloat16Bits(.nan)).isNaN)
        #expect(PrecisionConversion.float(bfloat16Bits: 0x4049) == 3.140625)
    }

    @Test("bfloat16 round trip stays within half a bfloat16 ulp")
    func bfloat16RoundTrip() {
        var state: UInt64 = 42
        for _ in 0..<10_000 {
            state = SyntheticWeights.mix(state)
            let value = Float(bitPattern: UInt32(truncatingIfNeeded: state) & 0x7F7F_FFFF)  // finite positives
            guard value.isNormal else { continue }
            let back = PrecisionConversion.float(bfloat16Bits: PrecisionConversion.bfloat16Bits(value))
            #expect(abs(back - value) <= value.ulp * 32768)  // 2^15: half of a bfloat16 ulp
        }
    }

    @Test(
        "every bfloat16 pattern converts to float16 exactly as Float16(Float) does, in order and shuffled",
        arguments: [false, true])
    func bfloat16ToFloat16Exhaustive(shuffled: Bool) {
        var patterns = (0...UInt16.max).map { $0 }
        if shuffled {
            // Mixed blocks: normals next to subnormals, out-of-range values and NaN.
            var state: UInt64 = 3
            for index in patterns.indices.reversed() where index > 0 {
                state = SyntheticWeights.mix(state &+ 1)
                patterns.swapAt(index, Int(state % UInt64(index + 1)))
            }
        }
        var refused = [Float16](repeating: 0, count: patterns.count)
        var clamped = [Float16](repeating: 0, count: patterns.count)
        let refusedStatistics = patterns.withUnsafeBufferPointer { source in
            refused.withUnsafeMutableBufferPointer {
                PrecisionConversion.toFloat16(bfloat16Bits: source, into: $0, clampingOutOfRange: false)
            }
        }
        let clampedStatistics = patterns.withUnsafeBufferPointer { source in
            clamped.withUnsafeMutableBufferPointer {
                PrecisionConversion.toFloat16(bfloat16Bits: source, into: $0, clampingOutOfRange: true)
            }
        }
        var outOfRange = 0
        var nonFinite = 0
        var mismatches = 0
        for (index, bits) in patterns.enumerated() {
            let value = PrecisionConversion.float(bfloat16Bits: bits)
            if value.isNaN {
                nonFinite += 1
                if !refused[index].isNaN { mismatches += 1 }
            } else if value.isInfinite {
                nonFinite += 1
                if refused[index] != Float16(value) { mismatches += 1 }
            } else if value.magnitude > 65504 {
                outOfRange += 1
                if refused[index] != (value < 0 ? -Float16.infinity : .infinity) { mismatches += 1 }
                if clamped[index] != (value < 0 ? -65504 : 65504) { mismatches += 1 }
            } else if refused[index].bitPattern != Float16(value).bitPattern
                || clamped[index].bitPattern != Float16(value).bitPattern
            {
                mismatches += 1
            }
        }
        #expect(mismatches == 0)
        #expect(refusedStatistics.nonFiniteCount == nonFinite)
        #expect(refusedStatistics.outOfRangeCount == outOfRange)
        #expect(refusedStatistics.largestOutOfRangeMagnitude == PrecisionConversion.float(bfloat16Bits: 0x7F7F))
        #expect(clampedStatistics == refusedStatistics)
    }

    @Test("float32 to float16 matches Float16(Float) on edges and random patterns")
    func float32ToFloat16() {
        var values: [Float] = [
            0, -0, 1, -1, 65504, 65505, 65519.99, 65520, -65520, 0x1p-14, 0x1p-14 - 0x1p-30, 0x1p-24, 0x1p-25,
            0x1p-25 + 0x1p-40, 1.5 * 0x1p-24, 2049, 2051, .leastNonzeroMagnitude, 1e-8, 0.1, .infinity, -.infinity,
            .nan,
        ]
        var state: UInt64 = 7
        for _ in 0..<200_000 {
            state = SyntheticWeights.mix(state)
            values.append(Float(bitPattern: UInt32(truncatingIfNeeded: state >> 7)))
        }
        var converted = [Float16](repeating: 0, count: values.count)
        let statistics = values.withUnsafeBufferPointer { source in
            converted.withUnsafeMutableBufferPointer {
                PrecisionConversion.toFloat16(float32: source, into: $0, clampingOutOfRange: false)
            }
        }
        var mismatches: [Float] = []
        var outOfRange = 0
        var nonFinite = 0
        for (value, half) in zip(values, converted) {
            if !value.isFinite {
                nonFinite += 1
                if value.isNaN ? !half.isNaN : half != Float16(value) { mismatches.append(value) }
            } else if value.magnitude > 65504 {
                outOfRange += 1
                if half != (value < 0 ? -Float16.infinity : .infinity) { mismatches.append(value) }
            } else if half.bitPattern != Float16(value).bitPattern {
                mismatches.append(value)
            }
        }
        #expect(mismatches.isEmpty)
        #expect(statistics.outOfRangeCount == outOfRange)
        #expect(statistics.nonFiniteCount == nonFinite)
    }

    @Test("every float16 pattern widens to float32 exactly")
    func float16ToFloat32Exhaustive() {
        let patterns = (0...UInt16.max).map { $0 }
        var widened = [Float](repeating: 0, count: patterns.count)
        let statistics = patterns.withUnsafeBufferPointer { source in
            widened.withUnsafeMutableBufferPointer { PrecisionConversion.toFloat(float16Bits: source, into: $0) }
        }
        var mismatches = 0
        for (bits, value) in zip(patterns, widened) {
            let reference = Float(Float16(bitPattern: bits))
            if reference.isNaN ? !value.isNaN : reference.bitPattern != value.bitPattern { mismatches += 1 }
        }
        #expect(mismatches == 0)
        #expect(statistics.nonFiniteCount == 2 * 1024)  // ±infinity and 2 × 1023 NaN patterns
    }

    /// A one-tensor BF16 file of `values` named `name`.
    func bf16File(_ name: String, _ values: [Float]) throws -> (URL, SafetensorsFile) {
        let directory = try Fixtures.temporaryDirectory()
        let url = try SafetensorsFixture.writeFile(
            named: "model.safetensors", in: directory, tensors: [.bf16(name, [values.count], values)])
        return (directory, try SafetensorsFile(url: url))
    }

    @Test("BF16 beyond the float16 range: an error naming tensor, count and largest magnitude, or clamped")
    func rangeErrorAndClamp() throws {
        let name = "model.layers.3.mlp.down_proj.weight"
        var values = [Float](repeating: 0.01, count: 300)
        for index in 0..<12 { values[index * 20] = index.isMultiple(of: 2) ? 70_000 + Float(index) * 5000 : -66_000 }
        let (directory, file) = try bf16File(name, values)
        defer { try? FileManager.default.removeItem(at: directory) }
        var halves = [Float16](repeating: 0, count: values.count)
        #expect {
            try halves.withUnsafeMutableBufferPointer { try file.readFloat16(name, into: $0) }
        } throws: { error in
            (error as? CheckpointError)?.description
                == "'\(file.url.path)': tensor 'model.layers.3.mlp.down_proj.weight': 12 values exceed the float16 "
                + "range of ±65504 (largest magnitude 119808); pass --allow-clamp to clamp them"
        }
        let report = try halves.withUnsafeMutableBufferPointer {
            try file.readFloat16(name, into: $0, outOfRange: .clamp)
        }
        #expect(report.clampedCount == 12)
        for index in 0..<12 { #expect(halves[index * 20] == (index.isMultiple(of: 2) ? 65504 : -65504)) }
        #expect(halves[1] == Float16(PrecisionConversion.float(bfloat16Bits: PrecisionConversion.bfloat16Bits(0.01))))
        // Read as float32 there is no range problem.
        var floats = [Float](repeating: 0, count: values.count)
        try floats.withUnsafeMutableBufferPointer { try file.readFloat(name, into: $0) }
        #expect(floats[0] == 70_144)
        #expect(
            CheckpointError.float16RangeExceeded(path: "m.safetensors", tensor: "t", count: 1, largestMagnitude: 65536)
                .description
                == "'m.safetensors': tensor 't': 1 value exceeds the float16 range of ±65504 (largest magnitude 65536); "
                + "pass --allow-clamp to clamp them")
        // Exact enough to see each exceeds 65504, where `6.6e+04` printed all three alike.
        for (magnitude, text) in [
            (Float(65519), "65519"), (65520, "65520"), (65504.004, "65504.004"), (1e6, "1000000"),
            (.greatestFiniteMagnitude, "3.4028235e+38"),
        ] {
            #expect(CheckpointError.exactMagnitude(magnitude) == text)
        }
    }

    @Test("counts cover the whole tensor even when it spans many read chunks")
    func countsAcrossChunks() throws {
        let count = SafetensorsFile.readChunkBytes  // two chunks of BF16
        var values = [Float](repeating: -0.5, count: count)
        values[3] = 1e6
        values[count - 2] = -3e5
        let (directory, file) = try bf16File("w", values)
        defer { try? FileManager.default.removeItem(at: directory) }
        var halves = [Float16](repeating: 0, count: count)
        #expect(
            throws: CheckpointError.float16RangeExceeded(
                path: file.url.path, tensor: "w", count: 2,
                largestMagnitude: PrecisionConversion.float(bfloat16Bits: PrecisionConversion.bfloat16Bits(1e6)))
        ) { try halves.withUnsafeMutableBufferPointer { try file.readFloat16("w", into: $0) } }
    }

    @Test("NaN or infinity is always an error naming the tensor and the count, whatever the precision")
    func nonFinite() throws {
        let values: [Float] = [1, .nan, 2, .infinity, -.infinity, 70_000]
        let (directory, file) = try bf16File("model.norm.weight", values)
        defer { try? FileManager.default.removeItem(at: directory) }
        var halves = [Float16](repeating: 0, count: values.count)
        let expected = CheckpointError.nonFiniteValues(path: file.url.path, tensor: "model.norm.weight", count: 3)
        #expect(expected.description == "'\(file.url.path)': tensor 'model.norm.weight': 3 values are NaN or infinite")
        #expect(throws: expected) {
            try halves.withUnsafeMutableBufferPointer { try file.readFloat16("model.norm.weight", into: $0) }
        }
        #expect(throws: expected) {
            try halves.withUnsafeMutableBufferPointer {
                try file.readFloat16("model.norm.weight", into: $0, outOfRange: .clamp)
            }
        }
        var floats = [Float](repeating: 0, count: values.count)
        #expect(throws: expected) {
            try floats.withUnsafeMutableBufferPointer { try file.readFloat("model.norm.weight", into: $0) }
        }

        let other = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: other) }
        let url = try SafetensorsFixture.writeFile(
            named: "m.safetensors", in: other,
            tensors: [.f16("h", [3], [1, .nan, .infinity]), .f32("s", [3], [-.infinity, 0, 1])])
        let mixed = try SafetensorsFile(url: url)
        var three = [Float16](repeating: 0, count: 3)
        #expect(throws: CheckpointError.nonFiniteValues(path: url.path, tensor: "h", count: 2)) {
            try three.withUnsafeMutableBufferPointer { try mixed.readFloat16("h", into: $0) }
        }
        var threeFloats = [Float](repeating: 0, count: 3)
        #expect(throws: CheckpointError.nonFiniteValues(path: url.path, tensor: "s", count: 1)) {
            try threeFloats.withUnsafeMutableBufferPointer { try mixed.readFloat("s", into: $0) }
        }
        #expect(
            CheckpointError.nonFiniteValues(path: "m.safetensors", tensor: "t", count: 1).description
                == "'m.safetensors': tensor 't': 1 value is NaN or infinite")
    }
}
