import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("Checkpoint: Hugging Face cache")
struct CheckpointHuggingFaceCacheTests {
    let commit = "0123456789abcdef0123456789abcdef01234567"

    /// A cache laid out as `huggingface_hub` does: blobs by hash, snapshot files linking to them
    /// with relative `../../blobs/…` links, `refs/main` naming the commit.
    func makeCache(writeRef: Bool = true, extraSnapshots: [String] = []) throws -> (hub: URL, repository: URL) {
        let hub = try Fixtures.temporaryDirectory("hf-hub")
        let repository = hub.appendingPathComponent("models--Org--Tiny-Model")
        let blobs = repository.appendingPathComponent("blobs")
        let snapshot = repository.appendingPathComponent("snapshots/\(commit)")
        for folder in [blobs, snapshot, repository.appendingPathComponent("refs")] {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        }
        for name in extraSnapshots {
            try FileManager.default.createDirectory(
                at: repository.appendingPathComponent("snapshots/\(name)"), withIntermediateDirectories: true)
        }
        try SafetensorsFixture.writeFile(
            named: "9f86d081884c7d659a2feaa0c55ad015", in: blobs, tensors: [.bf16("w", [2], [0.5, -1])])
        try FileManager.default.createSymbolicLink(
            atPath: snapshot.appendingPathComponent("model.safetensors").path,
            withDestinationPath: "../../blobs/9f86d081884c7d659a2feaa0c55ad015")
        if writeRef { try Data(commit.utf8).write(to: repository.appendingPathComponent("refs/main")) }
        return (hub, repository)
    }

    @Test("finds the hub from the environment like huggingface_hub")
    func hubLocation() {
        #expect(
            HuggingFaceCache(environment: ["HF_HOME": "/data/hf", "HOME": "/home/u"]).hubDirectory.path
                == "/data/hf/hub")
        #expect(
            HuggingFaceCache(environment: ["HF_HUB_CACHE": "/fast/hub", "HF_HOME": "/data/hf"]).hubDirectory.path
                == "/fast/hub")
        #expect(
            HuggingFaceCache(environment: ["XDG_CACHE_HOME": "/xdg", "HOME": "/home/u"]).hubDirectory.path
                == "/xdg/huggingface/hub")
        #expect(
            HuggingFaceCache(environment: ["HOME": "/home/u"]).hubDirectory.path == "/home/u/.cache/huggingface/hub")
        // The former name of HF_HUB_CACHE, which huggingface_hub still reads after it.
        #expect(
            HuggingFaceCache(environment: ["HUGGINGFACE_HUB_CACHE": "/old/hub", "HF_HOME": "/data/hf"]).hubDirectory
                .path == "/old/hub")
        #expect(
            HuggingFaceCache(environment: ["HUGGINGFACE_HUB_CACHE": "/old/hub", "HF_HUB_CACHE": "/fast/hub"])
                .hubDirectory.path == "/fast/hub")
        // `~` is HOME's, as Python's expanduser makes it, not the account's (Foundation's); `~x` is not HOME's.
        for (key, value, expected) in [
            ("HF_HUB_CACHE", "~/hubcache", "/home/u/hubcache"), ("HF_HOME", "~", "/home/u/hub"),
            ("XDG_CACHE_HOME", "~/xdg", "/home/u/xdg/huggingface/hub"), ("HF_HUB_CACHE", "/a/~/hub", "/a/~/hub"),
        ] {
            #expect(HuggingFaceCache(environment: [key: value, "HOME": "/home/u"]).hubDirectory.path == expected)
        }
    }

    @Test("resolves refs/main to the snapshot and reads weights through the blob links")
    func resolvesSnapshot() throws {
        let (hub, repository) = try makeCache()
        defer { try? FileManager.default.removeItem(at: hub) }
        let cache = HuggingFaceCache(environment: [
            "HF_HOME": hub.deletingLastPathComponent().path, "HF_HUB_CACHE": hub.path,
        ])
        let (snapshot, weights) = try cache.weights(of: "Org/Tiny-Model")
        #expect(snapshot.revision == commit)
        #expect(snapshot.directory.path == repository.appendingPathComponent("snapshots/\(commit)").path)
        #expect(snapshot.repositoryDirectory.path == repository.path)
        #expect(try allValues(weights) == ["w": [0.5, -1]])
    }

    @Test("without refs/main, a single snapshot is used; several are ambiguous")
    func withoutRef() throws {
        let (hub, repository) = try makeCache(writeRef: false)
        defer { try? FileManager.default.removeItem(at: hub) }
        let cache = HuggingFaceCache(hubDirectory: hub)
        #expect(try cache.snapshot(of: "Org/Tiny-Model").revision == commit)

        try FileManager.default.createDirectory(
            at: repository.appendingPathComponent("snapshots/fedcba"), withIntermediateDirectories: true)
        let refPath = repository.appendingPathComponent("refs/main").path
        #expect(
            throws: CheckpointError.revisionNotResolved(
                repository: "Org/Tiny-Model", revision: "main", snapshotCount: 2, refPath: refPath)
        ) { _ = try cache.snapshot(of: "Org/Tiny-Model") }
        #expect(
            CheckpointError.revisionNotResolved(repository: "O/N", revision: "main", snapshotCount: 2, refPath: "r")
                .description == "'O/N': no 'r' and 2 snapshots, cannot tell which one is revision 'main'")
        // A commit hash given directly picks its snapshot.
        #expect(try cache.snapshot(of: "Org/Tiny-Model", revision: commit).revision == commit)
    }

    @Test("without refs/main, hidden entries of snapshots/ (a download's temporary folder) are not snapshots")
    func hiddenSnapshotEntries() throws {
        let (hub, _) = try makeCache(writeRef: false, extraSnapshots: [".incomplete"])
        defer { try? FileManager.default.removeItem(at: hub) }
        #expect(try HuggingFaceCache(hubDirectory: hub).snapshot(of: "Org/Tiny-Model").revision == commit)
    }

    @Test("a snapshot file linking outside the repository's cache folder is refused")
    func linkOutsideRepository() throws {
        let (hub, repository) = try makeCache()
        defer { try? FileManager.default.removeItem(at: hub) }
        // A sibling repository's blob: inside the hub, outside this repository.
        let other = hub.appendingPathComponent("models--Evil--Model/blobs")
        try FileManager.default.createDirectory(at: other, withIntermediateDirectories: true)
        let foreign = try SafetensorsFixture.writeFile(named: "beef", in: other, tensors: [.f32("x", [1], [1])])
        let link = repository.appendingPathComponent("snapshots/\(commit)/model.safetensors")
        try FileManager.default.removeItem(at: link)
        try FileManager.default.createSymbolicLink(
            atPath: link.path, withDestinationPath: "../../../models--Evil--Model/blobs/beef")
        let cache = HuggingFaceCache(hubDirectory: hub)
        #expect(
            throws: CheckpointError.fileOutsideCheckpoint(
                path: link.path, resolvedPath: try #require(resolvedRealPath(foreign.path)),
                root: try #require(resolvedRealPath(repository.path)))
        ) { _ = try cache.weights(of: "Org/Tiny-Model") }
    }

    @Test("a blobs/ folder moved elsewhere behind a link still holds the snapshot's blobs, and only blobs")
    func movedBlobs() throws {
        let (hub, repository) = try makeCache()
        defer { try? FileManager.default.removeItem(at: hub) }
        let elsewhere = try Fixtures.temporaryDirectory("bigger-disk")
        let blobs = repository.appendingPathComponent("blobs")
        let moved = elsewhere.appendingPathComponent("blobs")
        try FileManager.default.createDirectory(at: moved, withIntermediateDirectories: true)
        // As huggingface_hub names them: the SHA-256 of an LFS file, the git SHA-1 of another.
        let weightsBlob = String(repeating: "ab", count: 32)
        let configBlob = String(repeating: "c0", count: 20)
        try FileManager.default.moveItem(
            at: blobs.appendingPathComponent("9f86d081884c7d659a2feaa0c55ad015"),
            to: moved.appendingPathComponent(weightsBlob))
        try FileManager.default.removeItem(at: blobs)
        try FileManager.default.createSymbolicLink(atPath: blobs.path, withDestinationPath: moved.path)
        let snapshot = repository.appendingPathComponent("snapshots/\(commit)")
        let weightsLink = snapshot.appendingPathComponent("model.safetensors")
        try FileManager.default.removeItem(at: weightsLink)
        try FileManager.default.createSymbolicLink(
            atPath: weightsLink.path, withDestinationPath: "../../blobs/\(weightsBlob)")
        let (_, weights) = try HuggingFaceCache(hubDirectory: hub).weights(of: "Org/Tiny-Model")
        #expect(weights.tensorNames == ["w"])
        let config = snapshot.appendingPathComponent("config.json")
        try Data("{}".utf8).write(to: moved.appendingPathComponent(configBlob))
        try FileManager.default.createSymbolicLink(
            atPath: config.path, withDestinationPath: "../../blobs/\(configBlob)")
        try CheckpointWeights.checkContained(config, checkpoint: snapshot)
        // Beside the moved folder, below it, or in it but not named as a blob (a key in a `.ssh`
        // the link leads to): no blob, outside.
        let below = moved.appendingPathComponent("sub/\(configBlob)")
        try FileManager.default.createDirectory(
            at: below.deletingLastPathComponent(), withIntermediateDirectories: true)
        for file in [
            elsewhere.appendingPathComponent(configBlob), below, moved.appendingPathComponent("id_ed25519"),
            moved.appendingPathComponent(configBlob.uppercased()),
        ] {
            try Data("{}".utf8).write(to: file)
            try FileManager.default.removeItem(at: config)
            try FileManager.default.createSymbolicLink(atPath: config.path, withDestinationPath: file.path)
            #expect(
                throws: CheckpointError.fileOutsideCheckpoint(
                    path: config.path, resolvedPath: try #require(resolvedRealPath(file.path)),
                    root: try #require(resolvedRealPath(repository.path)))
            ) { try CheckpointWeights.checkContained(config, checkpoint: snapshot) }
        }
    }

    @Test("refuses bad ids, uncached repositories, bad refs and missing snapshots")
    func failures() throws {
        let (hub, repository) = try makeCache()
        defer { try? FileManager.default.removeItem(at: hub) }
        let cache = HuggingFaceCache(hubDirectory: hub)
        for id in ["Tiny-Model", "Org/../x", "a/b/c", "/abs", "Org/", "Org/na me"] {
            #expect(throws: CheckpointError.invalidRepositoryID(id)) { _ = try cache.snapshot(of: id) }
        }
        #expect(
            CheckpointError.invalidRepositoryID("x").description
                == "'x' is not a Hugging Face repository id (expected 'org/model')")
        let missing = hub.appendingPathComponent("models--Org--Other").path
        #expect(throws: CheckpointError.repositoryNotCached(repository: "Org/Other", path: missing)) {
            _ = try cache.snapshot(of: "Org/Other")
        }
        #expect(
            CheckpointError.repositoryNotCached(repository: "O/N", path: "p").description
                == "'O/N' is not in the Hugging Face cache (no 'p')")

        let ref = repository.appendingPathComponent("refs/main")
        try Data("../../etc\n".utf8).write(to: ref)
        #expect(
            throws: CheckpointError.invalidRevision(
                repository: "Org/Tiny-Model", revision: "../../etc", refPath: ref.path)
        ) {
            _ = try cache.snapshot(of: "Org/Tiny-Model")
        }
        try Data("abc\n".utf8).write(to: ref)
        let snapshotPath = repository.appendingPathComponent("snapshots/abc").path
        #expect(
            throws: CheckpointError.snapshotMissing(repository: "Org/Tiny-Model", revision: "abc", path: snapshotPath)
        ) {
            _ = try cache.snapshot(of: "Org/Tiny-Model")
        }
        #expect(
            CheckpointError.snapshotMissing(repository: "O/N", revision: "abc", path: "p").description
                == "'O/N': revision 'abc' has no snapshot folder 'p'")
        // What is not there is not found (66); what is there but unusable is bad input (65).
        #expect(CheckpointError.repositoryNotCached(repository: "O/N", path: "p").exitStatus == .notFound)
        #expect(CheckpointError.snapshotMissing(repository: "O/N", revision: "abc", path: "p").exitStatus == .notFound)
        #expect(CheckpointError.invalidRepositoryID("x").exitStatus == .badInput)
        #expect(
            CheckpointError.invalidRevision(repository: "O/N", revision: "..", refPath: "r").exitStatus == .badInput)
    }

    @Test("says why a repository has no snapshot to read: absent, no refs/main among several or none, a bad ref")
    func missingSnapshotReasons() throws {
        let (hub, repository) = try makeCache(writeRef: false, extraSnapshots: ["fedcba"])
        defer { try? FileManager.default.removeItem(at: hub) }
        let cache = HuggingFaceCache(hubDirectory: hub)
        #expect(
            cache.missingSnapshotReason(of: "Org/Other")
                == "\(hub.appendingPathComponent("models--Org--Other").path) is absent")
        #expect(
            cache.missingSnapshotReason(of: "Org/Tiny-Model")
                == "\(repository.path) has no refs/main and 2 snapshots (\(commit), fedcba): pass the folder of the "
                + "one to export, \(repository.path)/snapshots/<revision>")
        let ref = repository.appendingPathComponent("refs/main")
        try Data("abc\n".utf8).write(to: ref)
        #expect(
            cache.missingSnapshotReason(of: "Org/Tiny-Model")
                == "refs/main names revision abc, which has no snapshot folder '\(repository.path)/snapshots/abc'")
        try Data("..\n".utf8).write(to: ref)
        #expect(cache.missingSnapshotReason(of: "Org/Tiny-Model") == "'\(ref.path)' holds an invalid revision '..'")
        try Data("fedcba\n".utf8).write(to: ref)
        #expect(cache.missingSnapshotReason(of: "Org/Tiny-Model") == nil)
        try FileManager.default.removeItem(at: ref)
        try FileManager.default.removeItem(at: repository.appendingPathComponent("snapshots"))
        #expect(
            cache.missingSnapshotReason(of: "Org/Tiny-Model") == "\(repository.path) has no refs/main and no snapshot")
    }

    @Test("says why a repository's folder, which is there, has no snapshot to read; nothing when absent or readable")
    func unusableSnapshotReasons() throws {
        let (hub, repository) = try makeCache()
        defer { try? FileManager.default.removeItem(at: hub) }
        let cache = HuggingFaceCache(hubDirectory: hub)
        // Not downloaded at all: no reason, the weights are simply not here.
        #expect(cache.unusableSnapshotReason(of: "Org/Other") == nil)
        #expect(cache.unusableSnapshotReason(of: "Org/Tiny-Model") == nil)
        // The revision asked for, not main's.
        try Data("fedcba\n".utf8).write(to: repository.appendingPathComponent("refs/v2"))
        #expect(
            cache.unusableSnapshotReason(of: "Org/Tiny-Model", revision: "v2")
                == "refs/v2 names revision fedcba, which has no snapshot folder '\(repository.path)/snapshots/fedcba'")
        try Data("abc\n".utf8).write(to: repository.appendingPathComponent("refs/main"))
        #expect(
            cache.unusableSnapshotReason(of: "Org/Tiny-Model")
                == "refs/main names revision abc, which has no snapshot folder '\(repository.path)/snapshots/abc'")
    }

    @Test("an unfinished download is a weights file not there (a missing shard, a link to nothing), not one unopened")
    func missingFileKinds() throws {
        let present = try Fixtures.temporaryDirectory().appendingPathComponent("model.safetensors")
        try Data().write(to: present)
        #expect(!CheckpointError.cannotOpen(path: present.path, reason: "permission denied").isMissingFile)
        #expect(
            CheckpointError.cannotOpen(path: present.path + ".absent", reason: "no such file or directory")
                .isMissingFile)
        #expect(CheckpointError.missingShard(indexPath: "i", shard: "s", tensor: "t").isMissingFile)
        #expect(!CheckpointError.invalidShardSize(0).isMissingFile)
    }
}
