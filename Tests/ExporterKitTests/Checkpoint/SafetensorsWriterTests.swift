import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("Checkpoint: safetensors writer")
struct CheckpointSafetensorsWriterTests {
    @Test("writes a sorted, padded, deterministic header and the data in order")
    func exactBytes() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = try SafetensorsFixture.writeFile(
            named: "model.safetensors", in: directory,
            tensors: [.f32("b", [1], [2]), .bf16("a", [2], [1, -1]), .f32("e", [0], [])],
            metadata: ["format": "pt", "by": "\"test\"\n"])
        let bytes = [UInt8](try Data(contentsOf: url))
        let header =
            #"{"__metadata__":{"by":"\"test\"\n","format":"pt"},"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"#
            + #""b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}}"#
        var expectedHeader = Array(header.utf8)
        while (8 + expectedHeader.count) % 8 != 0 { expectedHeader.append(0x20) }
        let data: [UInt8] = [0x80, 0x3F, 0x80, 0xBF, 0x00, 0x00, 0x00, 0x40]
        #expect(bytes == SafetensorsFixture.bytes(header: String(decoding: expectedHeader, as: UTF8.self), data: data))

        let file = try SafetensorsFile(url: url)
        #expect(file.metadata == ["format": "pt", "by": "\"test\"\n"])
        #expect(try allValues(CheckpointWeights(directory: directory)) == ["a": [1, -1], "b": [2], "e": []])
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["model.safetensors"])
    }

    @Test("refuses out-of-order, excess, early finish, late and post-finish writes")
    func stateMachine() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("w.safetensors")
        let path = url.path
        let writer = try SafetensorsWriter(
            url: url, tensors: [.init(name: "b", dtype: .f32, shape: [1]), .init(name: "a", dtype: .bf16, shape: [2])])
        #expect(writer.nextTensorName == "a")
        let six = [UInt8](repeating: 1, count: 6)
        #expect(throws: CheckpointError.writeOutOfOrder(path: path, expected: "a", received: "b")) {
            try six.withUnsafeBytes { try writer.write("b", bytes: UnsafeRawBufferPointer(rebasing: $0[0..<4])) }
        }
        #expect(throws: CheckpointError.tooMuchData(path: path, tensor: "a", expected: 4, received: 6)) {
            try six.withUnsafeBytes { try writer.write("a", bytes: $0) }
        }
        try six.withUnsafeBytes { try writer.write("a", bytes: UnsafeRawBufferPointer(rebasing: $0[0..<2])) }
        #expect(throws: CheckpointError.incompleteTensor(path: path, tensor: "a", written: 2, expected: 4)) {
            try writer.finish()
        }
        #expect(!FileManager.default.fileExists(atPath: path))
        try six.withUnsafeBytes { try writer.write("a", bytes: UnsafeRawBufferPointer(rebasing: $0[0..<2])) }
        #expect(writer.nextTensorName == "b")
        try six.withUnsafeBytes { try writer.write("b", bytes: UnsafeRawBufferPointer(rebasing: $0[0..<4])) }
        #expect(writer.nextTensorName == nil)
        #expect(throws: CheckpointError.writeOutOfOrder(path: path, expected: nil, received: "c")) {
            try six.withUnsafeBytes { try writer.write("c", bytes: $0) }
        }
        try writer.finish()
        #expect(throws: CheckpointError.writerClosed(path: path)) { try writer.finish() }
        #expect(throws: CheckpointError.writerClosed(path: path)) {
            try six.withUnsafeBytes { try writer.write("a", bytes: $0) }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["w.safetensors"])

        #expect(
            CheckpointError.writeOutOfOrder(path: "p", expected: "a", received: "b").description
                == "'p': expected data for tensor 'a', got 'b'")
        #expect(
            CheckpointError.writeOutOfOrder(path: "p", expected: nil, received: "c").description
                == "'p': got data for tensor 'c' after every tensor was written")
        #expect(
            CheckpointError.tooMuchData(path: "p", tensor: "a", expected: 4, received: 6).description
                == "'p': tensor 'a' takes 4 bytes, got 6")
        #expect(
            CheckpointError.incompleteTensor(path: "p", tensor: "a", written: 2, expected: 4).description
                == "'p': tensor 'a' has 2 of its 4 bytes")
        #expect(CheckpointError.writerClosed(path: "p").description == "'p': the writer is already finished")
    }

    @Test("an abandoned or dropped writer leaves nothing behind")
    func abandon() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("w.safetensors")
        let writer = try SafetensorsWriter(url: url, tensors: [.init(name: "a", dtype: .u8, shape: [3])])
        writer.abandon()
        #expect(throws: CheckpointError.writerClosed(path: url.path)) { try writer.finish() }
        do {
            _ = try SafetensorsWriter(url: url, tensors: [.init(name: "a", dtype: .u8, shape: [3])])
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    @Test("refuses bad declarations")
    func declarations() throws {
        let url = URL(fileURLWithPath: "/tmp/never-written.safetensors")
        func expect(_ tensors: [SafetensorsWriter.TensorDeclaration], _ tensor: String, _ reason: String) {
            #expect(throws: CheckpointError.invalidTensorEntry(path: url.path, tensor: tensor, reason: reason)) {
                _ = try SafetensorsWriter(url: url, tensors: tensors)
            }
        }
        expect(
            [.init(name: "a", dtype: .f32, shape: [1]), .init(name: "a", dtype: .f16, shape: [1])], "a",
            "declared twice")
        expect(
            [.init(name: "__metadata__", dtype: .f32, shape: [1])], "__metadata__", "the name is reserved for metadata")
        expect([.init(name: "n", dtype: .f32, shape: [2, -1])], "n", "negative dimension -1 in shape [2, -1]")
        expect(
            [.init(name: "o", dtype: .f32, shape: [1 << 40, 1 << 40])], "o",
            "element count of shape [1099511627776, 1099511627776] overflows")
        expect([.init(name: "f", dtype: .f4, shape: [3])], "f", "3 elements of F4 do not fill whole bytes or overflow")
    }
}
