import Foundation

extension FarmRunner {
    /// The bundle at `url` when its export can be skipped, else nil: its `manifest.json` is the
    /// one the farm wrote (``VerifiedFiles/knows(manifest:of:)``), its build key is `buildKey`,
    /// its folder holds the manifest's files and no other, and each of them is as the manifest
    /// says (read in full, or vouched for by `verified`). No tensor is decoded.
    func currentBundle(at url: URL, buildKey: String, verified: VerifiedFiles) -> BundleReader? {
        guard let manifest = FarmRunner.knownManifest(of: url, buildKey: buildKey, verified: verified),
            let reader = try? BundleReader(url: url, verifyFiles: true, verified: verified),
            reader.manifestData == manifest.data
        else { return nil }
        return reader
    }

    /// Why the bundle at `url`, there but not current (``currentBundle(at:buildKey:verified:)``),
    /// is built again, in a few words; nil when there is none (a first build says nothing).
    /// The cheap reasons first: a farm rebuilding everything after an upgrade says so.
    func rebuildReason(at url: URL, buildKey: String, verified: VerifiedFiles) -> String? {
        let manifestURL = url.appendingPathComponent(BundleWriter.manifestName)
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        if settings.force { return "--force" }
        guard let data = (try? BundleReader.readDocument(manifestURL)) ?? nil,
            let manifest = try? Manifest.decoded(from: data, path: manifestURL.path)
        else { return "its manifest.json cannot be read" }
        if manifest.buildKey != buildKey {
            return manifest.tool.version == ToolVersion.current
                ? "its inputs changed (build key)"
                : "exporter \(manifest.tool.version) wrote it, this is \(ToolVersion.current)"
        }
        guard verified.knows(manifest: data, of: url) else {
            return "its manifest.json is not the one this farm wrote there"
        }
        return "its files differ from what its manifest lists"
    }

    /// The compiled artifact at `url` when its compile can be skipped, else nil: as for a
    /// bundle (``currentBundle(at:buildKey:verified:)``), and compiled from the bundle whose
    /// manifest's CRC-32 is `bundleManifestCRC32`.
    func currentCompiled(at url: URL, buildKey: String, bundleManifestCRC32: String, verified: VerifiedFiles)
        -> CompiledArtifactReader?
    {
        guard let manifest = FarmRunner.knownManifest(of: url, buildKey: buildKey, verified: verified),
            manifest.decoded.compiled?.portable.manifestCRC32 == bundleManifestCRC32,
            let reader = try? CompiledArtifactReader(url: url, verifyFiles: true, verified: verified),
            reader.manifest == manifest.decoded
        else { return nil }
        return reader
    }

    /// The manifest of the artifact at `url`, read and decoded, when it is the one the farm wrote,
    /// of `buildKey`, and the folder holds exactly the files it lists besides it.
    private static func knownManifest(of url: URL, buildKey: String, verified: VerifiedFiles) -> (
        data: Data, decoded: Manifest
    )? {
        let manifestURL = url.appendingPathComponent(BundleWriter.manifestName)
        guard let data = (try? BundleReader.readDocument(manifestURL)) ?? nil,
            verified.knows(manifest: data, of: url),
            let manifest = try? Manifest.decoded(from: data, path: manifestURL.path), manifest.buildKey == buildKey
        else { return nil }
        // A file the manifest does not list is one `verify` rejects: the artifact is built again.
        let listed = Set(manifest.files.map(\.path) + [BundleWriter.manifestName])
        guard Set(ArtifactVerifier.filesBelow(url)) == listed else { return nil }
        return (data, manifest)
    }

    /// Records the `manifest.json` of the artifact the farm just built at `url` in `verified`;
    /// false when it cannot be read.
    static func recordManifest(of url: URL, in verified: VerifiedFiles) -> Bool {
        guard let data = (try? BundleReader.readDocument(url.appendingPathComponent(BundleWriter.manifestName))) ?? nil
        else { return false }
        verified.record(manifest: data, of: url)
        return true
    }
}
