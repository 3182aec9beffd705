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
    /// An exclusive `flock` on the staging folder while it is being filled: cleaners
    /// (``removeAbandonedStaging(in:)``) leave a locked folder alone. The kernel drops it when
    /// the process ends, however it ends.
    private var stagingLock: Int32 = -1
    /// Every file created, with the size it was finished at, checked before publishing.
    private var created: [(url: URL, file: OutputFile)] = []
    /// Folders above the staging folder that this artifact created (the model's folder of a
    /// first export), deepest first: removed again, when empty, if nothing is published.
    private var createdParents: [String] = []

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
        createdParents = try ArtifactDirectory.makeDirectories(staging, faults: faults, reportedAs: { _ in destination.path })
            .filter { $0 != staging.standardizedFileURL.path }.reversed()
        stagingLock = ArtifactDirectory.lockedDescriptor(staging.path, wait: true)
        // Staging folders of killed runs for this artifact: nobody holds them any more.
        ArtifactDirectory.removeAbandonedStaging(in: parent, for: destination.lastPathComponent)
    }

    deinit {
        if !published {
            try? FileManager.default.removeItem(at: staging)
            // rmdir: only empty folders go, so another writer's files are never touched.
            for path in createdParents { _ = rmdir(path) }
        }
        if stagingLock >= 0 { close(stagingLock) }
    }

    /// An open descriptor of the folder at `path` holding an exclusive `flock`, or -1 when it
    /// cannot be opened or (without `wait`) another process holds the lock.
    private static func lockedDescriptor(_ path: String, wait: Bool) -> Int32 {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { return -1 }
        guard flock(descriptor, LOCK_EX | (wait ? 0 : LOCK_NB)) == 0 else {
            close(descriptor)
            return -1
        }
        return descriptor
    }

    /// Removes the staging folders in `parent` (those of the artifact named `name`, or all)
    /// that no running process holds: what killed exports, compiles and conversions left.
    /// A folder being filled right now is locked by its writer and left alone.
    public static func removeAbandonedStaging(in parent: URL, for name: String? = nil) {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: parent.path)) ?? []
        for entry in entries where entry.hasPrefix(stagingPrefix) {
            if let name {
                // `.partial-<name>-<uuid>` or, from before exchanges, `.partial-old-<name>-<uuid>`.
                let rest = entry.dropFirst(stagingPrefix.count)
                guard rest.hasPrefix(name + "-") || rest.hasPrefix("old-" + name + "-") else { continue }
            }
            let url = parent.appendingPathComponent(entry)
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), isDirectory.boolValue else { continue }
            let descriptor = lockedDescriptor(url.path, wait: false)
            guard descriptor >= 0 else { continue }
            try? FileManager.default.removeItem(at: url)
            close(descriptor)
        }
    }

    /// Creates `url` and any missing parents, each creation a counted operation.
    /// - Parameter reportedAs: the path an error names for a folder (staging folders are
    ///   named by where their content is going, which is what the user asked for).
    /// - Returns: the folders created, outermost first.
    /// - Throws: `BundleError.writeFailed` naming the folder that could not be made.
    @discardableResult
    static func makeDirectories(
        _ url: URL, faults: FaultInjector?, reportedAs: (String) -> String = { $0 }
    ) throws -> [String] {
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
        var created: [String] = []
        for path in missing.reversed() {
            try faults?.check(reportedAs(path), .createDirectory)
            if mkdir(path, 0o755) != 0 {
                guard errno == EEXIST else { throw BundleError.writeFailed(path: reportedAs(path), reason: systemErrorMessage(errno)) }
            } else {
                created.append(path)
            }
        }
        return created
    }

    /// A new file at `relativePath` inside the staging folder (sub-folders are created).
    /// Errors name the file where it will be once published (`<destination>/<relativePath>`).
    /// - Throws: `BundleError.writeFailed`.
    public func createFile(_ relativePath: String, bypassPageCache: Bool = false) throws -> OutputFile {
        let url = staging.appendingPathComponent(relativePath)
        try ArtifactDirectory.makeDirectories(url.deletingLastPathComponent(), faults: faults, reportedAs: reported)
        let file = try OutputFile(
            url: url, faults: faults, reportedPath: reported(url.path), bypassPageCache: bypassPageCache)
        created.append((url, file))
        return file
    }

    /// `path` inside the staging folder, as it will be once published.
    private func reported(_ path: String) -> String {
        guard path.hasPrefix(staging.path) else { return path }
        return destination.path + path.dropFirst(staging.path.count)
    }

    /// Moves the finished folder into place, once every file created is still there at the
    /// size it was finished at. An existing artifact (with `--overwrite`) is exchanged with the
    /// new one in one atomic step where the system can (`renameat2` on Linux, `renamex_np`
    /// on macOS), so that no moment, even under SIGKILL, lacks a whole artifact; elsewhere it
    /// is moved aside first and removed only after the new one is in place.
    /// - Throws: `BundleError.writeFailed`; the previous artifact is then left as it was.
    public func publish() throws {
        let manager = FileManager.default
        for (url, file) in created {
            let size = (try? manager.attributesOfItem(atPath: url.path))?[.size] as? Int
            guard size == file.size else {
                throw BundleError.writeFailed(
                    path: file.path, reason: "the file was removed or changed while the artifact was being written")
            }
        }
        if manager.fileExists(atPath: destination.path),
            try ArtifactDirectory.exchange(staging, destination, reportedAs: destination.path, faults: faults)
        {
            published = true
            // The staging path now holds the previous artifact (unlocked: the lock went with the
            // new one's folder), removed here or, if this process dies first, by the next cleaner.
            try? manager.removeItem(at: staging)
            return
        }
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

    /// Exchanges two existing paths atomically; false when the system or file system cannot
    /// (the caller then renames in two steps).
    /// - Throws: `BundleError.writeFailed` naming `reportedPath` for any other failure.
    private static func exchange(_ first: URL, _ second: URL, reportedAs reportedPath: String, faults: FaultInjector?) throws -> Bool {
        try faults?.check(reportedPath, .rename)
        #if os(Linux)
            guard let renameat2 = linuxRenameAt2 else { return false }
            // AT_FDCWD, RENAME_EXCHANGE.
            guard renameat2(-100, first.path, -100, second.path, 2) == 0 else {
                if [EINVAL, ENOSYS, EOPNOTSUPP].contains(errno) { return false }
                throw BundleError.writeFailed(path: reportedPath, reason: systemErrorMessage(errno))
            }
            return true
        #elseif canImport(Darwin)
            guard renamex_np(first.path, second.path, UInt32(RENAME_SWAP)) == 0 else {
                if [EINVAL, ENOTSUP].contains(errno) { return false }
                throw BundleError.writeFailed(path: reportedPath, reason: systemErrorMessage(errno))
            }
            return true
        #else
            return false
        #endif
    }

    #if os(Linux)
        private typealias RenameAt2 = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
        /// glibc's `renameat2` (2.28 and later), which Swift's Glibc module does not import.
        private static let linuxRenameAt2: RenameAt2? = dlsym(nil, "renameat2").map { unsafeBitCast($0, to: RenameAt2.self) }
    #endif

    /// Renames `source` to `target` atomically (one `rename(2)`, on the same file system).
    /// - Throws: `BundleError.writeFailed` naming `reportedPath` (the artifact's destination).
    private static func rename(_ source: URL, to target: URL, reportedAs reportedPath: String, faults: FaultInjector?) throws {
        try faults?.check(reportedPath, .rename)
        guard Foundation.rename(source.path, target.path) == 0 else {
            throw BundleError.writeFailed(path: reportedPath, reason: systemErrorMessage(errno))
        }
    }
}
