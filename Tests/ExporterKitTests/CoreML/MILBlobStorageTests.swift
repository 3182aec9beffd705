import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("Core ML blob storage")
struct MILBlobStorageTests {
    @Test("header, metadata records and data at the offsets the storage format gives")
    func layout() throws {
        var layout = MILBlobStorage.Layout()
        let first = layout.append(
            MILBlobStorage.Blob(dataType: .uint4, elementCount: 48, source: .bytes([UInt8](repeating: 0xAB, count: 24)))
        )
        let second = layout.append(
            MILBlobStorage.Blob(dataType: .float16, elementCount: 32, source: .bytes([UInt8](repeating: 1, count: 64))))
        let third = layout.append(MILBlobStorage.Blob(dataType: .uint3, elementCount: 5, source: .bytes([7, 0])))
        let offsets: [Int] = [first, second, third]
        #expect(offsets == [64, 192, 320])
        #expect(layout.fileBytes == 320 + 64 + 2)
        let url = try Fixtures.temporaryDirectory().appendingPathComponent("weight.bin")
        let file = try OutputFile(url: url)
        try MILBlobStorage.write(layout, to: file)
        try file.finish()
        let bytes = [UInt8](try Data(contentsOf: url))
        #expect(bytes.count == layout.fileBytes)
        #expect(Array(bytes[0..<8]) == [3, 0, 0, 0, 2, 0, 0, 0])
        #expect(bytes[8..<64].allSatisfy { $0 == 0 })
        // sentinel, uint4 = 11, 24 bytes, data at 128, no padding bits
        #expect(
            Array(bytes[64..<96]) == [
                0xEF, 0xBE, 0xAD, 0xDE, 11, 0, 0, 0, 24, 0, 0, 0, 0, 0, 0, 0, 128, 0, 0, 0, 0, 0, 0, 0,
            ] + [UInt8](repeating: 0, count: 8))
        #expect(bytes[128..<152].allSatisfy { $0 == 0xAB } && bytes[152..<192].allSatisfy { $0 == 0 })
        #expect(Array(bytes[320..<328]) == [0xEF, 0xBE, 0xAD, 0xDE, 12, 0, 0, 0])
        #expect(bytes[344] == 1)  // 5 × 3 = 15 bits: 1 unused bit
        let read = try MILBlobFile(url: url)
        #expect(read.entries.map(\.metadataOffset) == [64, 192, 320])
        #expect(read.entries.map(\.dataType) == [.uint4, .float16, .uint3])
        #expect(try read.data(atMetadataOffset: 320).bytes == [7, 0])
    }

    /// A blob storage file of one int8 blob of 100 bytes: its path and bytes.
    private func oneBlobFile() throws -> (URL, Data) {
        var layout = MILBlobStorage.Layout()
        _ = layout.append(
            MILBlobStorage.Blob(dataType: .int8, elementCount: 100, source: .bytes([UInt8](repeating: 3, count: 100))))
        let url = try Fixtures.temporaryDirectory().appendingPathComponent("weight.bin")
        let file = try OutputFile(url: url)
        try MILBlobStorage.write(layout, to: file)
        try file.finish()
        return (url, try Data(contentsOf: url))
    }

    @Test("a broken sentinel, a truncated file and an unknown version are refused")
    func refusals() throws {
        let (url, good) = try oneBlobFile()
        for (label, edit) in [
            ("sentinel", { (data: inout Data) in data[64] = 0 }),
            ("truncated", { (data: inout Data) in data.removeLast(10) }),
            ("version", { (data: inout Data) in data[4] = 3 }),
            ("trailing", { (data: inout Data) in data.append(0) }),
        ] {
            var bad = good
            edit(&bad)
            try bad.write(to: url)
            #expect(throws: CoreMLError.self, "\(label)") { try MILBlobFile(url: url) }
        }
    }

    @Test(
        "a metadata record with an unknown type, padding bits on a whole-byte type or data away from it is refused, named"
    )
    func recordRefusals() throws {
        let (url, good) = try oneBlobFile()
        // The record at 64: type at 68, data offset at 80, padding bits at 88.
        for (edit, reason) in [
            ({ (data: inout Data) in data[68] = 5 }, "blob 0 at 64: unknown data type 5"),
            ({ (data: inout Data) in data[88] = 3 }, "blob 0 at 64: 3 padding bits"),
            ({ (data: inout Data) in data[80] = 64 }, "blob 0 at 64: data offset 64 does not follow its metadata"),
        ] {
            var bad = good
            edit(&bad)
            try bad.write(to: url)
            #expect(throws: CoreMLError.invalidPackage(path: url.path, reason: reason)) { try MILBlobFile(url: url) }
        }
        // Sub-byte data may leave high bits of its last byte unused, fewer than 8.
        var layoutOfBits = MILBlobStorage.Layout()
        _ = layoutOfBits.append(MILBlobStorage.Blob(dataType: .uint3, elementCount: 5, source: .bytes([7, 0])))
        let bits = try OutputFile(url: url)
        try MILBlobStorage.write(layoutOfBits, to: bits)
        try bits.finish()
        #expect(try MILBlobFile(url: url).entries.map(\.paddingBits) == [1])
        var eight = try Data(contentsOf: url)
        eight[88] = 8
        try eight.write(to: url)
        #expect(throws: CoreMLError.invalidPackage(path: url.path, reason: "blob 0 at 64: 8 padding bits")) {
            try MILBlobFile(url: url)
        }
    }
}
