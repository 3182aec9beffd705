import Foundation

/// The local Hugging Face cache: `$HF_HOME/hub`, or `~/.cache/huggingface/hub`.
/// A repository `Org/Name` lives in `models--Org--Name/snapshots/<revision>/`,
/// with `refs/main` naming the revision.
public struct HuggingFaceCacheLocation: Sendable {
    /// The `hub` folder.
    public let hub: URL

    /// The cache of the given environment (`HF_HUB_CACHE`, then `HF_HOME`, then `HOME`).
    public init(environment: [String: String]) {
        if let explicit = environment["HF_HUB_CACHE"], !explicit.isEmpty {
            hub = URL(fileURLWithPath: explicit, isDirectory: true)
        } else if let home = environment["HF_HOME"], !home.isEmpty {
            hub = URL(fileURLWithPath: home, isDirectory: true).appendingPathComponent("hub")
        } else {
            let user = environment["HOME"] ?? NSHomeDirectory()
            hub = URL(fileURLWithPath: user, isDirectory: true).appendingPathComponent(".cache/huggingface/hub")
        }
    }

    /// The cache folder of `repoID` (whether or not it exists).
    public func repositoryFolder(of repoID: String) -> URL {
        hub.appendingPathComponent("models--" + repoID.replacingOccurrences(of: "/", with: "--"), isDirectory: true)
    }

    /// The snapshot folder and revision of `repoID`: the one `refs/main` names, or the only
    /// snapshot when there is no ref. Nil when the repository is not cached or has no config.
    public func snapshot(of repoID: String) -> (snapshot: URL, revision: String)? {
        let folder = repositoryFolder(of: repoID)
        let snapshots = folder.appendingPathComponent("snapshots", isDirectory: true)
        let revision: String
        if let ref = try? String(contentsOf: folder.appendingPathComponent("refs/main"), encoding: .utf8) {
            revision = ref.trimmingCharacters(in: .whitespacesAndNewlines)
        } else {
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: snapshots.path)) ?? []
            let visible = entries.filter { !$0.hasPrefix(".") }
            guard visible.count == 1 else { return nil }
            revision = visible[0]
        }
        guard !revision.isEmpty, !revision.contains("/"), revision != "..", revision != "." else { return nil }
        let snapshot = snapshots.appendingPathComponent(revision, isDirectory: true)
        guard FileManager.default.fileExists(atPath: snapshot.appendingPathComponent("config.json").path) else {
            return nil
        }
        return (snapshot, revision)
    }
}
