import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("Checkpoint: positioned reads")
struct ReadOnlyFileTests {
    /// A file of `count` bytes, byte `i` being `i % 251`.
    private func file(_ count: Int) throws -> (ReadOnlyFile, [UInt8]) {
        let bytes = (0..<count).map { UInt8($0 % 251) }
        let url = try Fixtures.temporaryDirectory().appendingPathComponent("bytes.bin")
        try Data(bytes).write(to: url)
        return (try ReadOnlyFile(path: url.path), bytes)
    }

    @Test("pieces of any size cover exactly the range asked, in order")
    func pieces() throws {
        let (reader, bytes) = try file(10_000)
        for range in [0..<10_000, 3..<9_999, 4096..<8192, 5..<5, 9_999..<10_000] {
            for pieceBytes in [1, 7, 4096, 1 << 22] {
                var seen: [UInt8] = []
                var largest = 0
                try reader.forEachPiece(of: range, pieceBytes: pieceBytes) { piece in
                    seen.append(contentsOf: piece)
                    largest = max(largest, piece.count)
                }
                #expect(seen == Array(bytes[range]), "\(range) in pieces of \(pieceBytes)")
                #expect(largest <= pieceBytes)
            }
        }
        #expect(try reader.bytes(at: 250, count: 3) == [250, 0, 1])
        #expect(try reader.bytes(at: 10_000, count: 0) == [])
    }

    @Test("a file's CRC-32 from pieces checksummed on several workers is the one-pass CRC-32")
    func pieceChecksums() throws {
        for count in [0, 1, 10_000] {
            let (reader, bytes) = try file(count)
            let expected = bytes.withUnsafeBytes { CRC32.checksum($0) }
            for pieceBytes in [1, 7, 4096, CRC32.filePieceBytes] {
                for workers in [1, 2, 5] {
                    let crc = try CRC32.checksum(of: reader, workers: workers, pieceBytes: pieceBytes)
                    #expect(crc == expected, "\(count) bytes in pieces of \(pieceBytes) on \(workers) workers")
                }
            }
        }
    }

    @Test("a range past the end is refused, naming the file")
    func pastTheEnd() throws {
        let (reader, _) = try file(100)
        let reason = "8 bytes at offset 96 are past the end of the 100-byte file"
        #expect(throws: CheckpointError.readFailed(path: reader.path, reason: reason)) {
            try reader.bytes(at: 96, count: 8)
        }
        var pieces = 0
        #expect(throws: CheckpointError.readFailed(path: reader.path, reason: reason)) {
            try reader.forEachPiece(of: 96..<104) { _ in pieces += 1 }
        }
        #expect(pieces == 0)
        #expect(throws: BundleError.readFailed(path: "f", reason: reason)) {
            try BundleError.readingFile("f") { try reader.bytes(at: 96, count: 8) }
        }
        #expect(throws: BundleError.readFailed(path: "missing", reason: "no such file or directory")) {
            try BundleError.readingFile("missing") { try ReadOnlyFile(path: "/nonexistent/file") }
        }
    }

    @Test("a FIFO, a folder or a device is refused at once, naming the path and what it is")
    func notARegularFile() throws {
        let folder = try Fixtures.temporaryDirectory()
        let fifo = folder.appendingPathComponent("model.safetensors")
        try FIFOFixture.make(at: fifo, releaseAfter: 10)
        let start = Date()
        #expect(throws: CheckpointError.notARegularFile(path: fifo.path, kind: "a FIFO")) {
            try ReadOnlyFile(path: fifo.path)
        }
        #expect(Date().timeIntervalSince(start) < 5, "waited for a writer")
        #expect(throws: CheckpointError.notARegularFile(path: folder.path, kind: "a folder")) {
            try ReadOnlyFile(path: folder.path)
        }
        #expect(throws: CheckpointError.notARegularFile(path: "/dev/null", kind: "a character device")) {
            try ReadOnlyFile(path: "/dev/null")
        }
        #expect(
            CheckpointError.notARegularFile(path: fifo.path, kind: "a FIFO").description
                == "cannot read '\(fifo.path)': a FIFO, not a regular file")
        #expect(CheckpointError.notARegularFile(path: "p", kind: "a FIFO").exitStatus == .ioFailure)
        #expect(throws: BundleError.readFailed(path: "f", reason: "a FIFO, not a regular file")) {
            try BundleError.readingFile("f") { try ReadOnlyFile(path: fifo.path) }
        }
    }

    @Test("a file not there is not found (66); one there that cannot be opened is an I/O failure (74), config included")
    func notThereOrUnreadable() throws {
        let folder = try Fixtures.temporaryDirectory()
        let missing = folder.appendingPathComponent("missing.safetensors").path
        #expect(throws: CheckpointError.cannotOpen(path: missing, reason: "no such file or directory")) {
            try ReadOnlyFile(path: missing)
        }
        #expect(CheckpointError.cannotOpen(path: missing, reason: "").exitStatus == .notFound)
        // A path through a file is not there either.
        let file = folder.appendingPathComponent("file")
        try Data([0]).write(to: file)
        let through = file.appendingPathComponent("config.json").path
        #expect(throws: CheckpointError.cannotOpen(path: through, reason: "not a directory")) {
            try ReadOnlyFile(path: through)
        }
        #expect(throws: ConfigError.unreadable(path: through, reason: "no such file")) {
            try ModelConfig(contentsOf: URL(fileURLWithPath: through))
        }
        // A link to itself is there, and no process can open it (root neither).
        let loop = folder.appendingPathComponent("config.json")
        try FileManager.default.createSymbolicLink(atPath: loop.path, withDestinationPath: "config.json")
        #expect(throws: CheckpointError.readFailed(path: loop.path, reason: "too many levels of symbolic links")) {
            try ReadOnlyFile(path: loop.path)
        }
        #expect(throws: ConfigError.readFailed(path: loop.path, reason: "too many levels of symbolic links")) {
            try ModelConfig(contentsOf: loop)
        }
        #expect(ConfigError.readFailed(path: "c", reason: "r").exitStatus == .ioFailure)
        #expect(ConfigError.readFailed(path: "c", reason: "r").description == "cannot read config 'c': r")
        #expect(throws: ConfigError.unreadable(path: missing, reason: "no such file")) {
            try ModelConfig(contentsOf: URL(fileURLWithPath: missing))
        }
        // Permission denied, where the tests do not run as root.
        if getuid() != 0 {
            let locked = folder.appendingPathComponent("locked.safetensors")
            try Data([0]).write(to: locked)
            chmod(locked.path, 0)
            #expect(throws: CheckpointError.readFailed(path: locked.path, reason: "permission denied")) {
                try ReadOnlyFile(path: locked.path)
            }
        }
    }
}
