import Foundation
import TestSupport
import Testing

@testable import ExporterKit

/// Folders reached through a symbolic link, as every temporary folder is on macOS (`/tmp` and
/// `/var` are links to `/private/...` there): paths the user gave and paths the system resolved
/// must never be compared with each other.
@Suite("folders reached through a symbolic link")
struct SymlinkedFolderTests {
    /// A real folder and a link to it in another temporary folder.
    private func linkedFolder() throws -> (real: URL, link: URL) {
        let real = try Fixtures.temporaryDirectory("real")
        let link = try Fixtures.temporaryDirectory("links").appendingPathComponent("linked")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: real)
        return (real, link)
    }

    @Test("`..` after a link is the parent of its target; a folder's parent never traps, a one-letter name included")
    func physicalPaths() throws {
        let (real, link) = try linkedFolder()
        try FileManager.default.createDirectory(
            at: real.appendingPathComponent("inner"), withIntermediateDirectories: true)
        let parentOfTarget = try #require(resolvedRealPath(real.path))
        #expect(link.appendingPathComponent("inner/..").physicallyStandardized.path == parentOfTarget)
        #expect(
            URL.resolvingFilePath("linked/inner/../x", from: link.deletingLastPathComponent()).path
                == parentOfTarget + "/x")
        // No link: `..` is the same as text.
        #expect(URL.resolvingFilePath("a/./b/../c", from: URL(fileURLWithPath: "/base")).path == "/base/a/c")
        for (path, parent) in [
            ("x", ""), ("/a", "/"), ("/a/b/", "/a"), ("a/b", "a"), ("/", "/"), ("", ""), ("a//b", "a"),
        ] {
            #expect(parentPath(path) == parent, "\(path)")
        }
        #expect(nearestExistingPath(real.path + "/no/such/thing")?.path == real.path)
        #expect(nearestExistingPath("no-such-entry-\(UUID().uuidString)") == nil)
        // A relative URL (its working folder gone) stays as given: never resolved from '/'.
        let relative = try #require(URL(string: "x/.."))
        #expect(relative.physicallyStandardized == relative)
        #expect(URL.resolvingFilePath("x/..", from: try #require(URL(string: "."))).relativePath == "x/..")
    }

    @Test("a checkpoint opened through a link accepts its own linked blobs and names resolved paths when refusing")
    func checkpoint() throws {
        let (real, link) = try linkedFolder()
        let blobs = real.appendingPathComponent("ckpt/blobs")
        try FileManager.default.createDirectory(at: blobs, withIntermediateDirectories: true)
        _ = try SafetensorsFixture.writeFile(named: "abc123", in: blobs, tensors: [.f32("y", [1], [2])])
        let weights = link.appendingPathComponent("ckpt/model.safetensors")
        try FileManager.default.createSymbolicLink(atPath: weights.path, withDestinationPath: "blobs/abc123")
        #expect(try CheckpointWeights(directory: link.appendingPathComponent("ckpt")).tensorNames == ["y"])

        let outside = try SafetensorsFixture.writeFile(
            named: "elsewhere.safetensors", in: try Fixtures.temporaryDirectory(), tensors: [.f32("x", [1], [1])])
        try FileManager.default.removeItem(at: weights)
        try FileManager.default.createSymbolicLink(at: weights, withDestinationURL: outside)
        #expect(
            throws: CheckpointError.fileOutsideCheckpoint(
                path: weights.path, resolvedPath: try #require(resolvedRealPath(outside.path)),
                root: try #require(resolvedRealPath(real.appendingPathComponent("ckpt").path)))
        ) { _ = try CheckpointWeights(directory: link.appendingPathComponent("ckpt")) }
    }

    @Test("an artifact written through a link is published whole, its files named by the path given")
    func artifact() throws {
        let (real, link) = try linkedFolder()
        let destination = link.appendingPathComponent("out/Tiny.aimodel", isDirectory: true)
        let artifact = try ArtifactDirectory(destination: destination, overwrite: false, marker: "manifest.json")
        let file = try artifact.createFile("weights.bin")
        #expect(file.path == destination.appendingPathComponent("weights.bin").path)
        try file.write([1, 2, 3])
        try file.finish()
        try artifact.publish()
        let published = real.appendingPathComponent("out/Tiny.aimodel/weights.bin")
        #expect(FileManager.default.contents(atPath: published.path) == Data([1, 2, 3]))
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: real.appendingPathComponent("out").path) == [
                "Tiny.aimodel"
            ])
    }

    @Test("the farm's record of verified files works with an output folder given through a link")
    func verifiedFiles() throws {
        let (_, link) = try linkedFolder()
        let file = link.appendingPathComponent("sub/file.bin")
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data("abcd".utf8).write(to: file)
        let record = VerifiedFiles(root: link, settleSeconds: 0)
        record.record(file, before: VerifiedFiles.stamp(of: file, crc32: "0badc0de"), bytes: 4, crc32: "0badc0de")
        try record.save()
        #expect(VerifiedFiles(root: link, settleSeconds: 0).vouches(for: file, bytes: 4, crc32: "0badc0de"))
        // A trailing slash or a `.` in the folder given is the same folder.
        let spelled = URL(fileURLWithPath: link.path + "/./", isDirectory: true)
        #expect(VerifiedFiles(root: spelled, settleSeconds: 0).vouches(for: file, bytes: 4, crc32: "0badc0de"))
    }
}
