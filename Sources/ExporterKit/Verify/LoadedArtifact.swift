import Foundation

/// An artifact as `inspect`, `verify` and `diff` take it: a bundle folder (`.aimodel`), a
/// compiled folder (`.aimodelc`) or a bare `manifest.json` (also a plan's `--json` output).
public struct LoadedArtifact: Sendable {
    /// The manifest.
    public let manifest: Manifest
    /// The manifest file.
    public let manifestURL: URL
    /// The manifest's bytes as read.
    public let manifestData: Data
    /// The manifest file read.
    let manifestIdentity: FileIdentity
    /// The folder the manifest's `files` are relative to: the artifact folder, or the folder
    /// holding the manifest file given.
    public let folder: URL
    /// The path as the user gave it.
    public let displayPath: String
    /// Whether the path given is the artifact's folder (else a manifest file: a plan, a copy).
    public let givenAsFolder: Bool

    /// Loads the manifest at `url`: `url/manifest.json` for a folder, `url` itself for a file.
    /// - Throws: `BundleError.artifactNotFound` when nothing is at `url`, `.readFailed` when its
    ///   manifest is there but cannot be opened (``BundleReader/readDocument(_:)``),
    ///   `BundleError.notABundle` when there is no readable manifest,
    ///   `BundleError.unsupportedSchema` for a schema this version does not read.
    public init(url: URL, displayPath: String? = nil) throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) else {
            throw BundleError.artifactNotFound(path: url.path)
        }
        let manifestURL = isDirectory.boolValue ? url.appendingPathComponent(BundleWriter.manifestName) : url
        guard let (data, identity) = try BundleReader.readIdentifiedDocument(manifestURL) else {
            throw BundleError.notABundle(path: url.path, reason: "no readable \(BundleWriter.manifestName)")
        }
        manifest = try Manifest.decoded(from: data, path: manifestURL.path)
        manifestData = data
        manifestIdentity = identity
        self.manifestURL = manifestURL
        folder = manifestURL.deletingLastPathComponent()
        self.displayPath = displayPath ?? url.path
        givenAsFolder = isDirectory.boolValue
    }

    /// Checks that every file the manifest lists that is there can be opened.
    /// - Throws: `BundleError.readFailed` naming the first that cannot (permission denied):
    ///   checking what cannot be read would report corruption that is not there.
    public func checkReadable() throws {
        for file in manifest.files { try LoadedArtifact.checkOpens(folder.appendingPathComponent(file.path)) }
    }

    /// Refuses a file that is there but cannot be opened; one not there, or not a file, is left
    /// to the checks that report it.
    private static func checkOpens(_ url: URL) throws {
        do { _ = try ReadOnlyFile(path: url.path) } catch CheckpointError.readFailed(_, let reason) {
            throw BundleError.readFailed(path: url.path, reason: reason)
        } catch {}
    }

    /// Whether the manifest at the artifact's path is no longer the one read: the artifact was
    /// replaced since (an export with `--overwrite` exchanges the whole folder), so files read
    /// after the exchange may belong to another artifact than the manifest. Another file counts
    /// even with the same bytes: a replacement and its own replacement by an artifact identical
    /// to the first (exports are reproducible) leave the same manifest over files read between.
    public var wasReplaced: Bool {
        FileIdentity(path: manifestURL.path) != manifestIdentity
            || (try? BundleReader.readDocument(manifestURL)) != manifestData
    }
}
