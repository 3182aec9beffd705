import Foundation
import TestSupport
import Testing

@testable import ExporterKit

/// The fixtures written by `Fixtures/make_fixtures.py` with the reference `safetensors` library.
let checkpointFixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")

@Suite("Safetensors file: reading a reference-written file")
struct CheckpointReferenceFileTests {
    let file: SafetensorsFile

    init() throws {
        file = try SafetensorsFile(url: checkpointFixtures.appendingPathComponent("mixed.safetensors"))
    }

    @Test("lists tensors sorted, with metadata, shapes and byte ranges")
    func catalogue() throws {
        #expect(
            file.tensorNames == ["model.bf16", "model.empty", "model.f16", "model.f32", "model.i32", "model.scalar"])
        #expect(file.metadata == ["format": "pt", "source": "make_fixtures.py"])
        let bf16 = try file.tensor(named: "model.bf16")
        #expect(bf16.dtype == .bf16)
        #expect(bf16.shape == [2, 4])
        #expect(bf16.elementCount == 8)
        #expect(bf16.byteRange == (file.dataStart + 40)..<(file.dataStart + 56))
        #expect(try file.tensor(named: "model.scalar").shape == [])
        #expect(try file.tensor(named: "model.scalar").elementCount == 1)
        #expect(try file.tensor(named: "model.empty").elementCount == 0)
        #expect(file.byteCount == file.dataStart + 66)
    }

    @Test("reads BF16 value for value as float and float16")
    func bf16() throws {
        let expected: [Float] = [1.0, -2.5, 0.15625, 3.140625, 65280.0, -0.0, 0x1p-20, -448.0]
        var floats = [Float](repeating: .nan, count: 8)
        try floats.withUnsafeMutableBufferPointer { try file.readFloat("model.bf16", into: $0) }
        #expect(floats.map(\.bitPattern) == expected.map(\.bitPattern))
        var halves = [Float16](repeating: .nan, count: 8)
        _ = try halves.withUnsafeMutableBufferPointer { try file.readFloat16("model.bf16", into: $0) }
        #expect(halves.map(\.bitPattern) == expected.map { Float16($0).bitPattern })
    }

    @Test("reads F16 value for value")
    func f16() throws {
        let expected: [Float] = [0.5, -1.25, 0x1p-24, 65504, 0.0999755859375]
        var floats = [Float](repeating: .nan, count: 5)
        try floats.withUnsafeMutableBufferPointer { try file.readFloat("model.f16", into: $0) }
        #expect(floats == expected)
        var halves = [Float16](repeating: .nan, count: 5)
        _ = try halves.withUnsafeMutableBufferPointer { try file.readFloat16("model.f16", into: $0) }
        #expect(halves == expected.map { Float16($0) })
    }

    @Test("reads F32 exactly, and refuses its out-of-range values as float16 unless clamping")
    func f32() throws {
        let expected: [Float] = [1.5, -3.25, 1e-8, 0.1, 70000, -65519]
        var floats = [Float](repeating: .nan, count: 6)
        try floats.withUnsafeMutableBufferPointer { try file.readFloat("model.f32", into: $0) }
        #expect(floats == expected)

        var halves = [Float16](repeating: .nan, count: 6)
        #expect {
            try halves.withUnsafeMutableBufferPointer { try file.readFloat16("model.f32", into: $0) }
        } throws: { error in
            (error as? CheckpointError)?.description
                == "'\(file.url.path)': tensor 'model.f32': 2 values exceed the float16 range of ±65504 "
                + "(largest magnitude 70000); pass --allow-clamp to clamp them"
        }
        let report = try halves.withUnsafeMutableBufferPointer {
            try file.readFloat16("model.f32", into: $0, outOfRange: .clamp)
        }
        #expect(report.clampedCount == 2)
        #expect(halves == [1.5, -3.25, 0, Float16(Float(0.1)), 65504, -65504])
    }

    @Test("reads a scalar, an empty tensor, an element range and raw bytes")
    func shapes() throws {
        var scalar: [Float] = [0]
        try scalar.withUnsafeMutableBufferPointer { try file.readFloat("model.scalar", into: $0) }
        #expect(scalar == [42])
        var nothing: [Float16] = []
        _ = try nothing.withUnsafeMutableBufferPointer { try file.readFloat16("model.empty", into: $0) }
        var middle = [Float](repeating: 0, count: 3)
        try middle.withUnsafeMutableBufferPointer { try file.readFloat("model.bf16", elements: 2..<5, into: $0) }
        #expect(middle == [0.15625, 3.140625, 65280])
        var raw = [UInt8](repeating: 0, count: 12)
        try raw.withUnsafeMutableBytes { try file.readRawBytes(of: "model.i32", into: $0) }
        #expect(raw == [1, 0, 0, 0, 0xFE, 0xFF, 0xFF, 0xFF, 3, 0, 0, 0])
        var tail = [UInt8](repeating: 0, count: 4)
        try tail.withUnsafeMutableBytes { try file.readRawBytes(of: "model.i32", byteOffset: 8, into: $0) }
        #expect(tail == [3, 0, 0, 0])
    }

    @Test("refuses to read an integer tensor as floating point, naming file, tensor and dtype")
    func unsupportedDType() throws {
        var floats = [Float](repeating: 0, count: 3)
        #expect {
            try floats.withUnsafeMutableBufferPointer { try file.readFloat("model.i32", into: $0) }
        } throws: { error in
            (error as? CheckpointError)?.description
                == "'\(file.url.path)': tensor 'model.i32' has unsupported dtype I32 (expected BF16, F16 or F32)"
        }
    }

    @Test("refuses bad requests: unknown tensor, range past the end, wrong buffer size")
    func badRequests() throws {
        var floats = [Float](repeating: 0, count: 4)
        let path = file.url.path
        #expect(throws: CheckpointError.tensorNotFound(path: path, tensor: "nope")) {
            try floats.withUnsafeMutableBufferPointer { try file.readFloat("nope", into: $0) }
        }
        #expect(
            throws: CheckpointError.elementRangeOutOfBounds(tensor: "model.bf16", requested: 6..<10, elementCount: 8)
        ) {
            try floats.withUnsafeMutableBufferPointer { try file.readFloat("model.bf16", elements: 6..<10, into: $0) }
        }
        #expect(throws: CheckpointError.destinationSizeMismatch(tensor: "model.bf16", expected: 8, actual: 4)) {
            try floats.withUnsafeMutableBufferPointer { try file.readFloat("model.bf16", into: $0) }
        }
        var raw = [UInt8](repeating: 0, count: 8)
        #expect(throws: CheckpointError.byteRangeOutOfBounds(tensor: "model.i32", offset: 8, count: 8, byteCount: 12)) {
            try raw.withUnsafeMutableBytes { try file.readRawBytes(of: "model.i32", byteOffset: 8, into: $0) }
        }
        #expect(
            CheckpointError.elementRangeOutOfBounds(tensor: "t", requested: 6..<10, elementCount: 8).description
                == "tensor 't': elements 6..<10 are outside its 8 elements")
        #expect(
            CheckpointError.byteRangeOutOfBounds(tensor: "t", offset: 8, count: 8, byteCount: 12).description
                == "tensor 't': 8 bytes at offset 8 are outside its 12 bytes")
        #expect(
            throws: CheckpointError.byteRangeOutOfBounds(tensor: "model.i32", offset: .max, count: 8, byteCount: 12)
        ) {
            try raw.withUnsafeMutableBytes { try file.readRawBytes(of: "model.i32", byteOffset: .max, into: $0) }
        }
        #expect(
            CheckpointError.destinationSizeMismatch(tensor: "t", expected: 8, actual: 4).description
                == "tensor 't': destination holds 4 elements, expected 8")
    }
}

@Suite("Safetensors file: malformed files")
struct CheckpointMalformedFileTests {
    /// Writes `bytes`, opens them, and returns the error's message (nil when it opened).
    func openingError(_ bytes: [UInt8]) throws -> (path: String, message: String?) {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = try SafetensorsFixture.write(bytes, named: "bad.safetensors", in: directory)
        do {
            _ = try SafetensorsFile(url: url)
            return (url.path, nil)
        } catch let error as CheckpointError {
            return (url.path, error.description)
        }
    }

    func expectError(header: String, data: [UInt8] = [], _ expected: String) throws {
        let (path, message) = try openingError(SafetensorsFixture.bytes(header: header, data: data))
        #expect(message == "'\(path)'\(expected)")
    }

    let eight = [UInt8](repeating: 0, count: 8)

    @Test("a file shorter than the length prefix")
    func tooShort() throws {
        let (path, message) = try openingError([1, 2, 3])
        #expect(message == "'\(path)' is 3 bytes, too short for a safetensors file")
    }

    @Test("a header length past the end of the file, even UInt64.max")
    func headerPastEnd() throws {
        var (path, message) = try openingError(SafetensorsFixture.bytes(header: "{}", declaredHeaderLength: 1000))
        #expect(message == "'\(path)': header length 1000 exceeds the 2 bytes after it")
        (path, message) = try openingError(SafetensorsFixture.bytes(header: "{}", declaredHeaderLength: .max))
        #expect(message == "'\(path)': header length 18446744073709551615 exceeds the 2 bytes after it")
    }

    @Test("an absurd header length in a file large enough to hold it, refused before allocating")
    func headerTooLarge() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = try SafetensorsFixture.write(
            SafetensorsFixture.bytes(header: "", declaredHeaderLength: 100_000_001), named: "huge.safetensors",
            in: directory)
        // A sparse file: no disk space, but its size passes the length-versus-size check.
        let handle = try FileHandle(forWritingTo: url)
        try handle.truncate(atOffset: 100_000_100)
        try handle.close()
        #expect(throws: CheckpointError.headerTooLarge(path: url.path, headerLength: 100_000_001, limit: 100_000_000)) {
            _ = try SafetensorsFile(url: url)
        }
        #expect(
            CheckpointError.headerTooLarge(path: "f", headerLength: 100_000_001, limit: 100_000_000).description
                == "'f': header length 100000001 exceeds the limit of 100000000 bytes")
    }

    @Test("a missing file")
    func missingFile() throws {
        let path = "/nonexistent-\(UUID().uuidString)/model.safetensors"
        #expect(throws: CheckpointError.cannotOpen(path: path, reason: "no such file or directory")) {
            _ = try SafetensorsFile(url: URL(fileURLWithPath: path))
        }
        #expect(
            CheckpointError.cannotOpen(path: "p", reason: "no such file or directory").description
                == "cannot open 'p': no such file or directory")
    }

    @Test("invalid JSON, duplicate names, a header that is not an object")
    func invalidJSON() throws {
        try expectError(header: #"{"a":"#, ": header is not valid JSON: unexpected end of data at byte 5")
        let entry = #"{"dtype":"U8","shape":[0],"data_offsets":[0,0]}"#
        try expectError(
            header: #"{"a":\#(entry),"a":\#(entry)}"#, #": header is not valid JSON: duplicate key "a" at byte 53"#)
        try expectError(header: "[]", ": invalid header: expected a JSON object, found an array")
    }

    @Test("malformed metadata")
    func metadata() throws {
        try expectError(
            header: #"{"__metadata__":[]}"#, ": invalid header: __metadata__ must be an object, found an array")
        try expectError(
            header: #"{"__metadata__":{"format":"pt","step":3}}"#,
            ": invalid header: __metadata__ value 'step' must be a string, found a number")
    }

    @Test("an unknown dtype, a missing or wrongly typed field, an unexpected key")
    func entryFields() throws {
        try expectError(
            header: #"{"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,1]}}"#, data: [0],
            ": tensor 'w' has unknown dtype 'Q4_K'")
        try expectError(
            header: #"{"w":{"shape":[2],"data_offsets":[0,8]}}"#, data: eight, ": tensor 'w': missing 'dtype'")
        try expectError(
            header: #"{"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}"#, data: eight,
            ": tensor 'w': 'dtype' must be a string, found a number")
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":"2","data_offsets":[0,8]}}"#, data: eight,
            ": tensor 'w': 'shape' must be an array of integers, found a string")
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}}"#, data: eight,
            ": tensor 'w': 'shape' must be an array of integers")
        // Whole numbers written as decimals are not integers to safetensors either.
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}"#, data: eight,
            ": tensor 'w': 'shape' must be an array of integers")
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8e0]}}"#, data: eight,
            ": tensor 'w': 'data_offsets' must be two non-negative integers")
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0.0,8]}}"#, data: eight,
            ": tensor 'w': 'data_offsets' must be two non-negative integers")
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"foo":1}}"#, data: eight,
            ": tensor 'w': unexpected key 'foo'")
        try expectError(header: #"{"w":[]}"#, ": tensor 'w': expected an object, found an array")
    }

    @Test("negative dimensions and overflowing shapes")
    func shapes() throws {
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":[3,-2],"data_offsets":[0,8]}}"#, data: eight,
            ": tensor 'w': negative dimension -2 in shape [3, -2]")
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#, data: eight,
            ": tensor 'w': element count of shape [4294967296, 4294967296] overflows")
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]}}"#, data: eight,
            ": tensor 'w': 4611686018427387904 elements of F32 do not fill whole bytes or overflow")
        try expectError(
            header: #"{"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#, data: [0, 0],
            ": tensor 'w': 3 elements of F4 do not fill whole bytes or overflow")
    }

    @Test("bad data offsets: not integers, reversed, out of bounds, disagreeing with the shape")
    func offsets() throws {
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0.5,8]}}"#, data: eight,
            ": tensor 'w': 'data_offsets' must be two non-negative integers")
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8,16]}}"#, data: eight,
            ": tensor 'w': 'data_offsets' must be two non-negative integers")
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}}"#, data: eight,
            ": tensor 'w': 'data_offsets' must be two non-negative integers")
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}"#, data: eight,
            ": tensor 'w': 'data_offsets' begin 8 is after end 4")
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#, data: eight,
            ": tensor 'w': 'data_offsets' end 16 is past the 8-byte data section")
        try expectError(
            header: #"{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#, data: eight,
            ": tensor 'w': shape [3] of F32 needs 12 bytes but 'data_offsets' span 8")
    }

    @Test("off by one byte: a header one byte longer than the file, data one byte past the end, an overlap of one byte")
    func offByOne() throws {
        let (path, message) = try openingError(SafetensorsFixture.bytes(header: "{}", declaredHeaderLength: 3))
        #expect(message == "'\(path)': header length 3 exceeds the 2 bytes after it")
        try expectError(
            header: #"{"w":{"dtype":"U8","shape":[9],"data_offsets":[0,9]}}"#, data: eight,
            ": tensor 'w': 'data_offsets' end 9 is past the 8-byte data section")
        try expectError(
            header:
                #"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[3,7]}}"#,
            data: [UInt8](repeating: 0, count: 7), ": tensors 'a' and 'b' have overlapping data ranges")
        try expectError(
            header: #"{"a":{"dtype":"U8","shape":[7],"data_offsets":[0,7]}}"#, data: eight,
            ": data bytes 7..<8 belong to no tensor")
    }

    @Test("overlapping ranges, holes and trailing bytes")
    func coverage() throws {
        let twelve = [UInt8](repeating: 0, count: 12)
        try expectError(
            header:
                #"{"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            data: twelve, ": tensors 'a' and 'b' have overlapping data ranges")
        try expectError(
            header:
                #"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#,
            data: twelve, ": data bytes 4..<8 belong to no tensor")
        try expectError(
            header: #"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#, data: [0, 0, 0, 0, 9, 9],
            ": data bytes 4..<6 belong to no tensor")
    }

    @Test("a file truncated after opening fails the read, not silently")
    func truncatedAfterOpening() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = try SafetensorsFixture.writeFile(
            named: "w.safetensors", in: directory, tensors: [.f32("w", [4], [1, 2, 3, 4])])
        let file = try SafetensorsFile(url: url)
        let handle = try FileHandle(forWritingTo: url)
        try handle.truncate(atOffset: UInt64(file.dataStart + 6))
        try handle.close()
        var floats = [Float](repeating: 0, count: 4)
        #expect(
            throws: CheckpointError.readFailed(
                path: url.path, reason: "file ended at byte \(file.dataStart + 6), expected \(file.dataStart + 16)")
        ) {
            try floats.withUnsafeMutableBufferPointer { try file.readFloat("w", into: $0) }
        }
    }

    @Test("each dtype's element size is the format's: sub-byte ones packed, F6 in 6 bits")
    func dtypeSizes() throws {
        let bits = Dictionary(uniqueKeysWithValues: TensorDType.allCases.map { ($0.rawValue, $0.bitsPerElement) })
        #expect(
            bits == [
                "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
                "F8_E8M0": 8,
                "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64,
                "I64": 64, "U64": 64,
            ])
        // Four F6 elements fill 3 bytes exactly; as 8-bit elements they would need 4.
        #expect(TensorDType.f6E2M3.byteCount(elementCount: 4) == 3)
        #expect(TensorDType.f6E3M2.byteCount(elementCount: 2) == nil)
        let (_, message) = try openingError(
            SafetensorsFixture.bytes(
                header: #"{"t":{"dtype":"F6_E3M2","shape":[2,4],"data_offsets":[0,6]}}"#,
                data: [UInt8](repeating: 0, count: 6)))
        #expect(message == nil)
    }

    @Test("every dtype of the format parses")
    func everyDType() throws {
        for dtype in TensorDType.allCases {
            let bytes = dtype.byteCount(elementCount: 8) ?? 0
            let header = #"{"t":{"dtype":"\#(dtype.rawValue)","shape":[2,4],"data_offsets":[0,\#(bytes)]}}"#
            let (_, message) = try openingError(
                SafetensorsFixture.bytes(header: header, data: [UInt8](repeating: 0, count: bytes)))
            #expect(message == nil, "\(dtype)")
        }
    }
}
