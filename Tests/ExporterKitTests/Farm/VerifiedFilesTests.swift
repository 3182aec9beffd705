import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("farm: the record of verified files")
struct VerifiedFilesTests {
    /// A folder with `sub/file.bin` holding `abcd`.
    private func makeRoot() throws -> (root: URL, file: URL) {
        let root = try Fixtures.temporaryDirectory("verified")
        let file = root.appendingPathComponent("sub/file.bin")
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data("abcd".utf8).write(to: file)
        return (root, file)
    }

    private func recordFile(_ url: URL, bytes: Int, crc32: String, in root: URL, settleSeconds: Double = 0) throws {
        let record = VerifiedFiles(root: root, settleSeconds: settleSeconds)
        record.record(url, before: VerifiedFiles.stamp(of: url, crc32: crc32), bytes: bytes, crc32: crc32)
        try record.save()
    }

    @Test("a recorded file is vouched for, without being read, while its size, times and inode hold")
    func vouches() throws {
        let (root, file) = try makeRoot()
        // A CRC-32 that is not the file's: vouching must not read it.
        try recordFile(file, bytes: 4, crc32: "0badc0de", in: root)
        let saved = try JSONSerialization.jsonObject(
            with: Data(contentsOf: root.appendingPathComponent(".farm-verified.json")))
        let files = try #require((saved as? [String: Any])?["files"] as? [String: Any])
        #expect(Array(files.keys) == ["sub/file.bin"])

        let next = VerifiedFiles(root: root, settleSeconds: 0)
        #expect(next.vouches(for: file, bytes: 4, crc32: "0badc0de"))
        #expect(!next.vouches(for: file, bytes: 4, crc32: "12345678"), "the manifest gives another CRC-32")
        #expect(!next.vouches(for: file, bytes: 5, crc32: "0badc0de"), "the manifest gives another size")
        #expect(!next.vouches(for: root.appendingPathComponent("sub/other.bin"), bytes: 4, crc32: "0badc0de"))
        #expect(!VerifiedFiles(root: root, trusting: false).vouches(for: file, bytes: 4, crc32: "0badc0de"))

        // What a run vouched for stays recorded, and what it did not check (another shard's)
        // while the file is there.
        try next.save()
        #expect(VerifiedFiles(root: root).vouches(for: file, bytes: 4, crc32: "0badc0de"))
        try VerifiedFiles(root: root).save()
        #expect(VerifiedFiles(root: root).vouches(for: file, bytes: 4, crc32: "0badc0de"))
        try FileManager.default.removeItem(at: file)
        try VerifiedFiles(root: root).save()
        try Data("abcd".utf8).write(to: file)
        #expect(!VerifiedFiles(root: root).vouches(for: file, bytes: 4, crc32: "0badc0de"))
        let text = try String(contentsOf: root.appendingPathComponent(".farm-verified.json"), encoding: .utf8)
        #expect(!text.contains("file.bin"))
    }

    @Test("a file written again (same size), replaced or too recently changed is read again")
    func distrusts() throws {
        let (root, file) = try makeRoot()
        try recordFile(file, bytes: 4, crc32: "0badc0de", in: root)
        // In place: same inode, same size. After a pause longer than the kernel's timestamp
        // tick (the record's settling, disabled here, is what covers that case in a farm).
        Thread.sleep(forTimeInterval: 0.05)
        let handle = try FileHandle(forUpdating: file)
        try handle.seek(toOffset: 3)
        try handle.write(contentsOf: Data("e".utf8))
        try handle.close()
        #expect(!VerifiedFiles(root: root).vouches(for: file, bytes: 4, crc32: "0badc0de"))

        try recordFile(file, bytes: 4, crc32: "0badc0de", in: root)
        let replacement = root.appendingPathComponent("sub/replacement.bin")
        try Data("abcd".utf8).write(to: replacement)
        #expect(rename(replacement.path, file.path) == 0)
        #expect(!VerifiedFiles(root: root).vouches(for: file, bytes: 4, crc32: "0badc0de"))

        // Changed within the last hour: not recorded at all.
        try recordFile(file, bytes: 4, crc32: "0badc0de", in: root, settleSeconds: 3600)
        #expect(!VerifiedFiles(root: root).vouches(for: file, bytes: 4, crc32: "0badc0de"))
        // Not recorded when it changed while read, or outside the folder.
        let record = VerifiedFiles(root: root, settleSeconds: 0)
        let before = VerifiedFiles.stamp(of: file, crc32: "0badc0de")
        try Data("abcf".utf8).write(to: file)
        record.record(file, before: before, bytes: 4, crc32: "0badc0de")
        let outside = try Fixtures.temporaryDirectory("outside").appendingPathComponent("file.bin")
        try Data("abcd".utf8).write(to: outside)
        record.record(outside, before: VerifiedFiles.stamp(of: outside, crc32: "0badc0de"), bytes: 4, crc32: "0badc0de")
        try record.save()
        let text = try String(contentsOf: root.appendingPathComponent(".farm-verified.json"), encoding: .utf8)
        #expect(
            text
                == "{\n  \"files\" : {\n\n  },\n  \"manifests\" : {\n\n  },\n  \"schema\" : \"exporter.farm-verified/2\"\n}\n",
            "\(text)")
    }

    @Test("a manifest is known while its bytes are those the farm wrote, with or without --reverify")
    func manifests() throws {
        let (root, _) = try makeRoot()
        let artifact = root.appendingPathComponent("sub/M.aimodel")
        try FileManager.default.createDirectory(at: artifact, withIntermediateDirectories: true)
        let written = Data(#"{"context_length": 512}"#.utf8)
        try written.write(to: artifact.appendingPathComponent("manifest.json"))
        let record = VerifiedFiles(root: root)
        #expect(!record.knows(manifest: written, of: artifact), "nothing recorded yet")
        record.record(manifest: written, of: artifact)
        try record.save()
        let saved = try String(contentsOf: root.appendingPathComponent(".farm-verified.json"), encoding: .utf8)
        #expect(saved.contains(#""sub/M.aimodel/manifest.json" : {"#))
        #expect(saved.contains(#""crc32" : "\#(BundleWriter.hex(written.withUnsafeBytes { CRC32.checksum($0) }))""#))

        let edited = Data(#"{"context_length": 511}"#.utf8)
        #expect(VerifiedFiles(root: root).knows(manifest: written, of: artifact))
        #expect(VerifiedFiles(root: root, trusting: false).knows(manifest: written, of: artifact))
        #expect(!VerifiedFiles(root: root).knows(manifest: edited, of: artifact))
        #expect(!VerifiedFiles(root: root).knows(manifest: written, of: root.appendingPathComponent("sub/N.aimodel")))
        // Found different, it leaves the record; not checked (another shard's), it stays.
        let next = VerifiedFiles(root: root)
        #expect(!next.knows(manifest: edited, of: artifact))
        try next.save()
        #expect(!VerifiedFiles(root: root).knows(manifest: written, of: artifact))
        record.record(manifest: written, of: artifact)
        try record.save()
        try VerifiedFiles(root: root).save()
        #expect(VerifiedFiles(root: root).knows(manifest: written, of: artifact))
        // Gone with its artifact.
        try FileManager.default.removeItem(at: artifact)
        try VerifiedFiles(root: root).save()
        #expect(!VerifiedFiles(root: root).knows(manifest: written, of: artifact))
    }
}
