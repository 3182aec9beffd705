import Foundation

/// The local Hugging Face hub cache, where `huggingface-cli download Org/Name` puts models:
/// `<hub>/models--Org--Name/{refs/main, snapshots/<commit>/…, blobs/<hash>}`, with snapshot
/// files as symbolic links into `blobs/`.
public struct HuggingFaceCache: Sendable {
    /// The hub folder holding the `models--…` folders.
    public let hubDirectory: URL

    /// A snapshot resolved from the cache.
    public struct Snapshot: Equatable, Sendable {
        /// The repository id, `Org/Name`.
        public let repository: String
        /// The commit hash of the snapshot.
        public let revision: String
        /// `…/models--Org--Name/snapshots/<revision>`: the checkpoint folder.
        public let directory: URL
        /// `…/models--Org--Name`: every file of the snapshot must resolve inside it.
        public let repositoryDirectory: URL
    }

    /// The cache at `hubDirectory`.
    public init(hubDirectory: URL) {
        self.hubDirectory = hubDirectory
    }

    /// The cache the environment designates, as `huggingface_hub` finds it: `HF_HUB_CACHE`,
    /// else `HUGGINGFACE_HUB_CACHE` (its former name), else `$HF_HOME/hub`, else
    /// `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`; a leading `~` in any
    /// of them is the home folder: `HOME`, else the user's (as Python's `expanduser`).
    /// - Parameter environment: the variables to consult (pass the process environment).
    public init(environment: [String: String]) {
        func nonEmpty(_ key: String) -> String? {
            guard let value = environment[key], !value.isEmpty else { return nil }
            return value
        }
        let home = nonEmpty("HOME") ?? FileManager.default.homeDirectoryForCurrentUser.path
        // Foundation expands `~` itself, from the account's home: `HOME` set apart from it (as
        // in containers and CI) would be ignored.
        func folder(_ path: String) -> URL {
            let expanded = path == "~" || path.hasPrefix("~/") ? home + path.dropFirst() : path
            return URL(fileURLWithPath: expanded, isDirectory: true)
        }
        if let hub = nonEmpty("HF_HUB_CACHE") ?? nonEmpty("HUGGINGFACE_HUB_CACHE") {
            hubDirectory = folder(hub)
        } else if let hfHome = nonEmpty("HF_HOME") {
            hubDirectory = folder(hfHome).appendingPathComponent("hub", isDirectory: true)
        } else {
            hubDirectory = folder(nonEmpty("XDG_CACHE_HOME") ?? "~/.cache")
                .appendingPathComponent("huggingface/hub", isDirectory: true)
        }
    }

    /// Whether `text` has the shape of a repository id: `org/model`, each part of letters,
    /// digits, `-`, `_` and `.`, not `.` or `..`.
    public static func isRepositoryID(_ text: String) -> Bool {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return false }
        return parts.allSatisfy { part in
            !part.isEmpty && part != "." && part != ".."
                && part.unicodeScalars.allSatisfy { scalar in
                    scalar.isASCII
                        && (CharacterSet.alphanumerics.contains(scalar) || "-_.".unicodeScalars.contains(scalar))
                }
        }
    }

    /// The repository folder of a snapshot folder given by its path (`…/models--Org--Name/
    /// snapshots/<revision>`), whose files link into the repository's `blobs/`: the folder they
    /// must resolve inside. Nil for any other folder.
    public static func repositoryFolder(ofSnapshot folder: URL) -> URL? {
        let snapshots = folder.physicallyStandardized.deletingLastPathComponent()
        let repository = snapshots.deletingLastPathComponent()
        guard snapshots.lastPathComponent == "snapshots", repository.lastPathComponent.hasPrefix("models--") else {
            return nil
        }
        return repository
    }

    /// The repository id a cache folder's name spells (`models--Org--Name`: `Org/Name`), or nil.
    public static func repositoryID(ofFolder folder: URL) -> String? {
        let parts = folder.lastPathComponent.components(separatedBy: "--")
        guard parts.count == 3, parts[0] == "models" else { return nil }
        let id = parts[1] + "/" + parts[2]
        return isRepositoryID(id) ? id : nil
    }

    /// The cache folder of `repository`: `<hub>/models--Org--Name`.
    /// - Throws: `CheckpointError.invalidRepositoryID` when `repository` is not `org/model`.
    public func repositoryDirectory(for repository: String) throws -> URL {
        guard HuggingFaceCache.isRepositoryID(repository) else { throw CheckpointError.invalidRepositoryID(repository) }
        let folder = "models--" + repository.replacingOccurrences(of: "/", with: "--")
        return hubDirectory.appendingPathComponent(folder, isDirectory: true)
    }

    /// Finds the snapshot of `repository` at `revision`: the commit named by `refs/<revision>`,
    /// or `revision` itself when it is a snapshot folder's name (a commit hash); when the ref is
    /// absent but exactly one snapshot exists, that one.
    /// - Throws: `CheckpointError.invalidRepositoryID`, `.repositoryNotCached`,
    ///   `.invalidRevision`, `.revisionNotResolved`, `.snapshotMissing`.
    public func snapshot(of repository: String, revision: String = "main") throws -> Snapshot {
        let repositoryDirectory = try repositoryDirectory(for: repository)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: repositoryDirectory.path, isDirectory: &isDirectory),
            isDirectory.boolValue
        else { throw CheckpointError.repositoryNotCached(repository: repository, path: repositoryDirectory.path) }

        let snapshots = repositoryDirectory.appendingPathComponent("snapshots", isDirectory: true)
        let refURL = repositoryDirectory.appendingPathComponent("refs").appendingPathComponent(revision)
        let commit: String
        if HuggingFaceCache.isPathComponent(revision), let data = FileManager.default.contents(atPath: refURL.path) {
            let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard HuggingFaceCache.isPathComponent(text) else {
                throw CheckpointError.invalidRevision(repository: repository, revision: text, refPath: refURL.path)
            }
            commit = text
        } else if HuggingFaceCache.isPathComponent(revision),
            FileManager.default.fileExists(atPath: snapshots.appendingPathComponent(revision).path)
        {
            commit = revision
        } else {
            let folders = HuggingFaceCache.snapshotNames(in: snapshots)
            guard folders.count == 1, let only = folders.first else {
                throw CheckpointError.revisionNotResolved(
                    repository: repository, revision: revision, snapshotCount: folders.count, refPath: refURL.path)
            }
            commit = only
        }
        let directory = snapshots.appendingPathComponent(commit, isDirectory: true)
        guard FileManager.default.fileExists(atPath: directory.path, isDirectory: &isDirectory), isDirectory.boolValue
        else { throw CheckpointError.snapshotMissing(repository: repository, revision: commit, path: directory.path) }
        return Snapshot(
            repository: repository, revision: commit, directory: directory, repositoryDirectory: repositoryDirectory)
    }

    /// Why the cache's folder of `repository`, which is there, has no snapshot to read at
    /// `revision` (what an interrupted download of a new revision leaves): nil when it has one,
    /// or when the folder is absent (nothing was downloaded).
    public func unusableSnapshotReason(of repository: String, revision: String = "main") -> String? {
        guard let folder = try? repositoryDirectory(for: repository),
            FileManager.default.fileExists(atPath: folder.path)
        else { return nil }
        return missingSnapshotReason(of: repository, revision: revision)
    }

    /// Why `repository` has no snapshot to read at `revision` (nil when it has one), in the words
    /// of the list of places a model was looked for: its folder is absent; or there is no
    /// `refs/<revision>` and not exactly one snapshot (those there named, with the folder to pass
    /// to export one); or the ref names no snapshot, or no revision at all.
    public func missingSnapshotReason(of repository: String, revision: String = "main") -> String? {
        do {
            _ = try snapshot(of: repository, revision: revision)
            return nil
        } catch CheckpointError.repositoryNotCached(_, let path) {
            return "\(path) is absent"
        } catch CheckpointError.revisionNotResolved(_, _, _, let refPath) {
            let folder = URL(fileURLWithPath: refPath).deletingLastPathComponent().deletingLastPathComponent()
            let snapshots = folder.appendingPathComponent("snapshots", isDirectory: true)
            let names = HuggingFaceCache.snapshotNames(in: snapshots)
            let ref = "refs/\(revision)"
            guard !names.isEmpty else { return "\(folder.path) has no \(ref) and no snapshot" }
            return "\(folder.path) has no \(ref) and \(names.count) snapshots (\(names.joined(separator: ", "))): "
                + "pass the folder of the one to export, \(snapshots.path)/<revision>"
        } catch CheckpointError.invalidRevision(_, let text, let refPath) {
            return "'\(refPath)' holds an invalid revision '\(text)'"
        } catch CheckpointError.snapshotMissing(_, let commit, let path) {
            return "refs/\(revision) names revision \(commit), which has no snapshot folder '\(path)'"
        } catch {
            return "\(error)"
        }
    }

    /// The snapshot folders of `snapshots/`, sorted: hidden entries (a download's temporary
    /// folder) are none.
    private static func snapshotNames(in snapshots: URL) -> [String] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: snapshots.path)) ?? []
        return entries.filter { !$0.hasPrefix(".") }.sorted()
    }

    /// Opens the weights of `repository` at `revision`, allowing the snapshot's links into the
    /// repository's `blobs/` and nothing outside the repository's cache folder.
    /// - Throws: as `snapshot(of:revision:)` and `CheckpointWeights.init(directory:containmentRoot:)`.
    public func weights(of repository: String, revision: String = "main") throws -> (Snapshot, CheckpointWeights) {
        let snapshot = try snapshot(of: repository, revision: revision)
        let weights = try CheckpointWeights(
            directory: snapshot.directory, containmentRoot: snapshot.repositoryDirectory)
        return (snapshot, weights)
    }

    /// A single, harmless path component: no separators, not `.` or `..`, not empty.
    private static func isPathComponent(_ text: String) -> Bool {
        !text.isEmpty && text != "." && text != ".." && !text.contains("/") && !text.contains("\0")
    }
}
