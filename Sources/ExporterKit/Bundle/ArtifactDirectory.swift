import Foundation

/// An artifact folder built under a hidden temporary name beside its destination and
/// renamed into place only when whole: a failed or interrupted export leaves nothing that
/// looks complete, and never replaces a good artifact.
public final class ArtifactDirectory {
    /// Where the artifact will be once published.
    public let destination: URL
    /// The temporary folder being filled.
    public let staging: URL
    /// Fault injection for tests (nil in real runs).
    public let faults: FaultInjector?
    private var published = false

    /// Prefix of staging folders, so that leftovers of a killed run can be recognised.
    public static let stagingPrefix = ".partial-"

    /// Starts an artifact at `destination`.
    /// - Throws: `BundleError.outputExists` when it exists and `overwrite` is false;
    ///   `BundleError.writeFailed` when the staging folder cannot be made.
    public init(destination: URL, overwrite: Bool, faults: FaultInjector? = nil) throws {
        self.destination = destination
        self.faults = faults
        if FileManager.default.fileExists(atPath: destination.path), !overwrite {
            throw BundleError.outputExists(path: destination.path)
        }
        let parent = destination.deletingLastPathComponent()
        staging = parent.appendingPathComponent(
            ArtifactDirectory.stagingPrefix + destination.lastPathComponent + "-" + UUID().uuidString, isDirectory: true)
        do {
            try faults?.check(staging.path)
            try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
        } catch let error as BundleError {
            throw error
        } catch {
            throw BundleError.writeFailed(path: staging.path, reason: error.localizedDescription)
        }
    }

    deinit {
        if !published { try? FileManager.default.removeItem(at: staging) }
    }

    /// A new file at `relativePath` inside the staging folder (sub-folders are created).
    /// - Throws: `BundleError.writeFailed`.
    public func createFile(_ relativePath: String) throws -> OutputFile {
        let url = staging.appendingPathComponent(relativePath)
        let folder = url.deletingLastPathComponent()
        if !FileManager.default.fileExists(atPath: folder.path) {
            do {
                try faults?.check(folder.path)
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            } catch let error as BundleError {
                throw error
            } catch {
                throw BundleError.writeFailed(path: folder.path, reason: error.localizedDescription)
            }
        }
        return try OutputFile(url: url, faults: faults)
    }

    /// Moves the finished folder into place. With an existing artifact (and `--overwrite`),
    /// the old one is moved aside first and removed only after the new one is in place.
    /// - Throws: `BundleError.writeFailed`; the previous artifact is then left as it was.
    public func publish() throws {
        let manager = FileManager.default
        var displaced: URL?
        do {
            try faults?.check(destination.path)
            if manager.fileExists(atPath: destination.path) {
                let aside = destination.deletingLastPathComponent().appendingPathComponent(
                    ArtifactDirectory.stagingPrefix + "old-" + destination.lastPathComponent + "-" + UUID().uuidString)
                try manager.moveItem(at: destination, to: aside)
                displaced = aside
            }
            try manager.moveItem(at: staging, to: destination)
        } catch {
            if let displaced, !manager.fileExists(atPath: destination.path) {
                try? manager.moveItem(at: displaced, to: destination)
            }
            if let error = error as? BundleError { throw error }
            throw BundleError.writeFailed(path: destination.path, reason: error.localizedDescription)
        }
        published = true
        if let displaced { try? manager.removeItem(at: displaced) }
    }
}
