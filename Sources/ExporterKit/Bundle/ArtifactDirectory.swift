import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

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
        try ArtifactDirectory.makeDirectories(staging, faults: faults, reportedAs: { _ in destination.path })
    }

    deinit {
        if !published { try? FileManager.default.removeItem(at: staging) }
    }

    /// Creates `url` and any missing parents, each creation a counted operation.
    /// - Parameter reportedAs: the path an error names for a folder (staging folders are
    ///   named by where their content is going, which is what the user asked for).
    /// - Throws: `BundleError.writeFailed` naming the folder that could not be made.
    static func makeDirectories(
        _ url: URL, faults: FaultInjector?, reportedAs: (String) -> String = { $0 }
    ) throws {
        var missing: [String] = []
        var current = url.standardizedFileURL.path
        var isDirectory: ObjCBool = false
        while !current.isEmpty, current != "/", !FileManager.default.fileExists(atPath: current, isDirectory: &isDirectory) {
            missing.append(current)
            current = (current as NSString).deletingLastPathComponent
        }
        if !current.isEmpty, FileManager.default.fileExists(atPath: current, isDirectory: &isDirectory), !isDirectory.boolValue {
            throw BundleError.writeFailed(path: reportedAs(current), reason: "not a directory")
        }
        for path in missing.reversed() {
            try faults?.check(reportedAs(path), .createDirectory)
            if mkdir(path, 0o755) != 0, errno != EEXIST {
                throw BundleError.writeFailed(path: reportedAs(path), reason: systemErrorMessage(errno))
            }
        }
    }

    /// A new file at `relativePath` inside the staging folder (sub-folders are created).
    /// Errors name the file where it will be once published (`<destination>/<relativePath>`).
    /// - Throws: `BundleError.writeFailed`.
    public func createFile(_ relativePath: String, bypassPageCache: Bool = false) throws -> OutputFile {
        let url = staging.appendingPathComponent(relativePath)
        try ArtifactDirectory.makeDirectories(url.deletingLastPathComponent(), faults: faults, reportedAs: reported)
        return try OutputFile(
            url: url, faults: faults, reportedPath: reported(url.path), bypassPageCache: bypassPageCache)
    }

    /// `path` inside the staging folder, as it will be once published.
    private func reported(_ path: String) -> String {
        guard path.hasPrefix(staging.path) else { return path }
        return destination.path + path.dropFirst(staging.path.count)
    }

    /// Moves the finished folder into place. With an existing artifact (and `--overwrite`),
    /// the old one is moved aside first and removed only after the new one is in place.
    /// - Throws: `BundleError.writeFailed`; the previous artifact is then left as it was.
    public func publish() throws {
        let manager = FileManager.default
        var displaced: URL?
        do {
            if manager.fileExists(atPath: destination.path) {
                let aside = destination.deletingLastPathComponent().appendingPathComponent(
                    ArtifactDirectory.stagingPrefix + "old-" + destination.lastPathComponent + "-" + UUID().uuidString)
                try ArtifactDirectory.rename(destination, to: aside, reportedAs: destination.path, faults: faults)
                displaced = aside
            }
            try ArtifactDirectory.rename(staging, to: destination, reportedAs: destination.path, faults: faults)
        } catch {
            if let displaced, !manager.fileExists(atPath: destination.path) {
                _ = Foundation.rename(displaced.path, destination.path)
            }
            throw error
        }
        published = true
        if let displaced { try? manager.removeItem(at: displaced) }
    }

    /// Renames `source` to `target` atomically (one `rename(2)`, on the same file system).
    /// - Throws: `BundleError.writeFailed` naming `reportedPath` (the artifact's destination).
    private static func rename(_ source: URL, to target: URL, reportedAs reportedPath: String, faults: FaultInjector?) throws {
        try faults?.check(reportedPath, .rename)
        guard Foundation.rename(source.path, target.path) == 0 else {
            throw BundleError.writeFailed(path: reportedPath, reason: systemErrorMessage(errno))
        }
    }
}
