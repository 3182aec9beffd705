import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("artifact folders: staging, cleaning, publishing")
struct ArtifactDirectoryTests {
    private func entries(_ folder: URL) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
    }

    @Test(
        "a staging folder being filled survives cleaners; abandoned ones of the same artifact go when the next one starts"
    )
    func cleaning() throws {
        let parent = try Fixtures.temporaryDirectory()
        let destination = parent.appendingPathComponent("M.aimodel")
        // Left by killed runs: this artifact's (and an old-style displaced copy), and another artifact's.
        for name in [".partial-M.aimodel-dead", ".partial-old-M.aimodel-dead", ".partial-N.aimodel-dead"] {
            try FileManager.default.createDirectory(
                at: parent.appendingPathComponent(name), withIntermediateDirectories: false)
        }
        let directory = try ArtifactDirectory(destination: destination, overwrite: false, marker: "manifest.json")
        #expect(try entries(parent) == [".partial-N.aimodel-dead", directory.staging.lastPathComponent].sorted())
        // A farm's clean-up (every staging folder) leaves the one being filled.
        ArtifactDirectory.removeAbandonedStaging(in: parent)
        #expect(try entries(parent) == [directory.staging.lastPathComponent])
        let file = try directory.createFile("a.bin")
        try file.write([1, 2, 3])
        try file.finish()
        try directory.publish()
        #expect(try entries(parent) == ["M.aimodel"])
    }

    @Test(
        "a staging folder another run's cleaner removes before it is locked: a fresh one is tried, and a failed try leaves no folder the run made"
    )
    func stagingRemovedBeforeLock() throws {
        let base = try Fixtures.temporaryDirectory()
        let current = Locked(base.path)
        let done = Locked(false)
        // A cleaner that removes each staging folder as soon as it sees it: some fall between
        // the mkdir and the lock, a window of microseconds, so it takes many runs.
        let cleaner = Thread {
            while !done.value {
                let folder = current.value
                for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
                where name.hasPrefix(ArtifactDirectory.stagingPrefix) {
                    _ = rmdir(folder + "/" + name)
                }
            }
        }
        cleaner.start()
        defer { done.mutate { $0 = true } }
        for run in 0..<3_000 {
            // A model folder of its own, made by the run; its second staging folder cannot be made.
            let model = base.appendingPathComponent("m\(run)")
            let destination = model.appendingPathComponent("M.aimodel")
            current.mutate { $0 = model.path }
            do {
                _ = try ArtifactDirectory(
                    destination: destination, overwrite: false, marker: "manifest.json",
                    faults: FaultInjector(failAtOperation: 3))
            } catch {
                #expect(
                    error as? BundleError
                        == BundleError.writeFailed(path: destination.path, reason: "no space left on device"))
                #expect(!FileManager.default.fileExists(atPath: model.path))
            }
        }
    }

    @Test("a file removed or cut short in the staging folder stops the publication, and nothing is published")
    func changedBeforePublishing() throws {
        for change in ["remove", "truncate"] {
            let parent = try Fixtures.temporaryDirectory()
            let destination = parent.appendingPathComponent("M.aimodel")
            let directory = try ArtifactDirectory(destination: destination, overwrite: false, marker: "manifest.json")
            let file = try directory.createFile("sub/weights.bin")
            try file.write([UInt8](repeating: 7, count: 100))
            try file.finish()
            let staged = directory.staging.appendingPathComponent("sub/weights.bin")
            if change == "remove" {
                try FileManager.default.removeItem(at: staged)
            } else {
                try Data([7]).write(to: staged)
            }
            #expect(
                throws: BundleError.writeFailed(
                    path: destination.appendingPathComponent("sub/weights.bin").path,
                    reason: "the file was removed or changed while the artifact was being written")
            ) { try directory.publish() }
            #expect(!FileManager.default.fileExists(atPath: destination.path), "\(change)")
        }
    }

    @Test(
        "a staging folder taken away (and made again by someone) stops the artifact; an unfinished file stops publishing"
    )
    func stagingTakenAway() throws {
        let parent = try Fixtures.temporaryDirectory()
        let destination = parent.appendingPathComponent("M.aimodel")
        let removed = BundleError.writeFailed(
            path: destination.path, reason: "its staging folder was removed while the artifact was being written")
        let directory = try ArtifactDirectory(destination: destination, overwrite: false, marker: "manifest.json")
        try FileManager.default.removeItem(at: directory.staging)
        #expect(throws: removed) { try directory.createFile("a.bin") }
        // Made again at the same path: not the folder this artifact locked.
        try FileManager.default.createDirectory(at: directory.staging, withIntermediateDirectories: false)
        #expect(throws: removed) { try directory.createFile("a.bin") }
        #expect(throws: removed) { try directory.publish() }
        #expect(!FileManager.default.fileExists(atPath: destination.path))

        let other = try ArtifactDirectory(
            destination: parent.appendingPathComponent("N.aimodel"), overwrite: false, marker: "manifest.json")
        let file = try other.createFile("b.bin")
        try file.write([1])
        #expect(
            throws: BundleError.writeFailed(
                path: parent.appendingPathComponent("N.aimodel/b.bin").path,
                reason: "the file was removed or changed while the artifact was being written")
        ) { try other.publish() }
        try file.finish()
        try other.publish()
    }

    @Test("two runs filling one artifact without --overwrite: the first to finish publishes, the other is refused (73)")
    func concurrentFirstPublishWins() throws {
        let parent = try Fixtures.temporaryDirectory()
        let destination = parent.appendingPathComponent("M.aimodel")
        let runs = try ([[1], [2, 2]] as [[UInt8]]).map { content -> ArtifactDirectory in
            let directory = try ArtifactDirectory(destination: destination, overwrite: false, marker: "a.bin")
            let file = try directory.createFile("a.bin")
            try file.write(content)
            try file.finish()
            return directory
        }
        try runs[1].publish()
        #expect(throws: BundleError.outputExists(path: destination.path)) { try runs[0].publish() }
        #expect(try Data(contentsOf: destination.appendingPathComponent("a.bin")) == Data([2, 2]))
        #expect(try entries(destination) == ["a.bin"])
    }

    @Test("--overwrite never replaces what is not an artifact: a file, or a folder without the marker (exit 73)")
    func replacingOnlyArtifacts() throws {
        let parent = try Fixtures.temporaryDirectory()
        let folder = parent.appendingPathComponent("M.aimodel")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
        try Data("mine".utf8).write(to: folder.appendingPathComponent("thesis.txt"))
        let file = parent.appendingPathComponent("N.aimodel")
        try Data("mine".utf8).write(to: file)
        // With or without --overwrite: the refusal does not suggest a flag that would be refused too.
        // A manifest.json of something else (a web app's) does not make an artifact.
        let notOurs = parent.appendingPathComponent("W.aimodel")
        try FileManager.default.createDirectory(at: notOurs, withIntermediateDirectories: false)
        try Data(#"{"name": "my web app", "icons": []}"#.utf8).write(
            to: notOurs.appendingPathComponent("manifest.json"))
        let dangling = parent.appendingPathComponent("L.aimodel")
        try FileManager.default.createSymbolicLink(atPath: dangling.path, withDestinationPath: "/nonexistent/x")
        let cases = [
            (folder, "the folder holds no manifest.json of an artifact"), (file, "it is a file"),
            (notOurs, "the folder holds no manifest.json of an artifact"),
            (dangling, "it is a link to nothing"),
        ]
        for ((destination, reason), overwrite) in cases.flatMap({ item in [true, false].map { (item, $0) } }) {
            let error = #expect(throws: BundleError.self) {
                try ArtifactDirectory(destination: destination, overwrite: overwrite, marker: "manifest.json")
            }
            #expect(
                error?.description
                    == "'\(destination.path)' already exists and is not an artifact to replace (\(reason)); "
                    + "--overwrite replaces artifacts only: move or remove it")
            #expect(error?.exitStatus == .outputExists)
        }
        #expect(try entries(parent) == ["L.aimodel", "M.aimodel", "N.aimodel", "W.aimodel"])
        // An empty folder holds nothing to lose: it is replaced with --overwrite.
        let empty = parent.appendingPathComponent("E.aimodel")
        try FileManager.default.createDirectory(at: empty, withIntermediateDirectories: false)
        #expect(throws: BundleError.outputExists(path: empty.path)) {
            try ArtifactDirectory(destination: empty, overwrite: false, marker: "manifest.json")
        }
        _ = try ArtifactDirectory(destination: empty, overwrite: true, marker: "manifest.json")
        #expect(try Data(contentsOf: folder.appendingPathComponent("thesis.txt")) == Data("mine".utf8))
        #expect(try Data(contentsOf: file) == Data("mine".utf8))
    }

    @Test("replacing an artifact exchanges it whole: the new one in place, the old one gone, nothing beside")
    func replacing() throws {
        let parent = try Fixtures.temporaryDirectory()
        let destination = parent.appendingPathComponent("M.aimodel")
        for version in ["1", "2"] {
            let content = Array(#"{"schema": "exporter.manifest/1", "version": \#(version)}"#.utf8)
            let directory = try ArtifactDirectory(destination: destination, overwrite: true, marker: "manifest.json")
            let file = try directory.createFile("manifest.json")
            try file.write(content)
            try file.finish()
            try directory.publish()
            #expect(try Data(contentsOf: destination.appendingPathComponent("manifest.json")) == Data(content))
            #expect(try entries(parent) == ["M.aimodel"])
            #expect(try entries(destination) == ["manifest.json"])
        }
    }

    /// An output folder `outlink` → `lA`, its link retargeted to `lB` at the `operation`-th
    /// file-system operation of an export of a tiny checkpoint (`overwrite`: over a bundle there).
    private func exportRetargeted(atOperation operation: Int, overwrite: Bool = false) throws -> (
        root: URL, error: Error?
    ) {
        let root = try Fixtures.temporaryDirectory()
        for name in ["lA", "lB"] {
            try FileManager.default.createDirectory(
                at: root.appendingPathComponent(name), withIntermediateDirectories: false)
        }
        let link = root.appendingPathComponent("outlink")
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: "lA")
        let plan = try Fixtures.plan(
            try Fixtures.syntheticCheckpoint(overrides: ["architectures": ["Qwen2ForCausalLM"]]))
        if overwrite { _ = try ExportRunner.run(plan, settings: ExportSettings(outputDirectory: link)) }
        var settings = ExportSettings(outputDirectory: link)
        settings.overwrite = overwrite
        settings.faults = FaultInjector(atOperation: operation) { _, _ in
            _ = unlink(link.path)
            _ = symlink("lB", link.path)
        }
        do {
            _ = try ExportRunner.run(plan, settings: settings)
            return (root, nil)
        } catch {
            return (root, error)
        }
    }

    /// What an export into `root/outlink` fails with once the link leads elsewhere.
    private func retargeted(_ root: URL) throws -> BundleError {
        let real = try #require(resolvedRealPath(root.path))
        return .writeFailed(
            path: root.path + "/outlink/tiny/Tiny.aimodel",
            reason: "its folder '\(root.path)/outlink/tiny' no longer resolves to '\(real)/lA/tiny', where the "
                + "artifact was being written (a symbolic link on the way was changed, or a folder moved); nothing was "
                + "published")
    }

    @Test(
        "an output folder whose link is retargeted mid-export: the message says so, and the staging folder goes from where it is"
    )
    func retargetedOutputLink() throws {
        // Operation 4 is the first write to weights.bin, after the model folder, the staging folder and the file.
        let (root, error) = try exportRetargeted(atOperation: 4)
        #expect(error as? BundleError == (try retargeted(root)))
        // Nothing in the folder the link leads to now; the staging folder and the model folder the
        // export made are gone from the one it led to.
        #expect(try entries(root.appendingPathComponent("lB")) == [])
        #expect(try entries(root.appendingPathComponent("lA")) == [])
    }

    @Test(
        "a link retargeted before an artifact replacing another is published: refused, the old one intact; during the rename: published where it started"
    )
    func retargetedBeforePublishing() throws {
        // The operations of an export replacing a bundle: the last is the rename that publishes it.
        let plan = try Fixtures.plan(
            try Fixtures.syntheticCheckpoint(overrides: ["architectures": ["Qwen2ForCausalLM"]]))
        var settings = ExportSettings(outputDirectory: try Fixtures.temporaryDirectory())
        _ = try ExportRunner.run(plan, settings: settings)
        let counting = FaultInjector(failAtOperation: Int.max)
        settings.overwrite = true
        settings.faults = counting
        _ = try ExportRunner.run(plan, settings: settings)
        let rename = counting.operations

        let (before, error) = try exportRetargeted(atOperation: rename - 1, overwrite: true)
        #expect(error as? BundleError == (try retargeted(before)))
        #expect(try entries(before.appendingPathComponent("lB")) == [])
        #expect(try entries(before.appendingPathComponent("lA/tiny")) == ["Tiny.aimodel"])
        _ = try BundleReader(url: before.appendingPathComponent("lA/tiny/Tiny.aimodel"), verifyFiles: true)

        // Changed once the publication has checked it: the folder resolved at the start gets it.
        let (during, none) = try exportRetargeted(atOperation: rename, overwrite: true)
        #expect(none == nil)
        #expect(try entries(during.appendingPathComponent("lB")) == [])
        #expect(try entries(during.appendingPathComponent("lA/tiny")) == ["Tiny.aimodel"])
    }
}
