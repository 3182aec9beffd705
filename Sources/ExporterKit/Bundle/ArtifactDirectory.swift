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
    /// The temporary folder being filled, by the path it resolved to when it was made (symbolic
    /// links on the way followed), so that a link changed meanwhile does not lose it.
    public let staging: URL
    /// The folder holding `staging`, where the artifact is published, as resolved then: the
    /// destination's folder must still resolve to it (``folderMoved``).
    private let folder: URL
    /// The device and inode of `folder`.
    private let folderIdentity: (device: UInt64, inode: UInt64)?
    /// Fault injection for tests (nil in real runs).
    public let faults: FaultInjector?
    private var published = false
    /// Whether an artifact at the destination may be replaced (`--overwrite`); without it, one
    /// that appears while this one is filled (another run's) is not replaced either.
    private let overwrite: Bool
    /// An exclusive `flock` on the staging folder while it is being filled: cleaners
    /// (``removeAbandonedStaging(in:)``) leave a locked folder alone. The kernel drops it when
    /// the process ends, however it ends. -1 where the file system has no `flock` (NFS without
    /// it): the folder is then unlocked, and cleaners, unable to lock either, remove nothing.
    private var stagingLock: Int32 = -1
    /// Every file created (where it is, the path errors name), checked before publishing
    /// against the size it was finished at (`finishedSizes`, by path).
    private var files: [(url: URL, reportedPath: String)] = []
    private var finishedSizes: [String: Int] = [:]
    /// Folders above the staging folder that this artifact created (the model's folder of a
    /// first export), deepest first: removed again, when empty, if nothing is published.
    private var createdParents: [String] = []
    /// Removes the staging folder if the run is interrupted while it is filled (``InterruptCleanup``).
    private var cleanupToken: Int?

    /// Prefix of staging folders, so that leftovers of a killed run can be recognised.
    public static let stagingPrefix = ".partial-"

    /// Starts an artifact at `destination`, whose root will hold `marker` (the manifest).
    /// - Throws: `BundleError.outputExists` when it exists and `overwrite` is false, or when it
    ///   is not an artifact (``checkDestination(_:overwrite:marker:)``);
    ///   `BundleError.writeFailed` when the staging folder cannot be made.
    public init(destination: URL, overwrite: Bool, marker: String, faults: FaultInjector? = nil) throws {
        self.destination = destination
        self.faults = faults
        self.overwrite = overwrite
        try ArtifactDirectory.checkDestination(destination, overwrite: overwrite, marker: marker)
        let parent = destination.deletingLastPathComponent()
        let made = try ArtifactDirectory.makeStaging(for: destination, faults: faults)
        staging = made.url
        stagingLock = made.lock
        createdParents = made.createdParents
        cleanupToken = made.cleanupToken
        folder = made.url.deletingLastPathComponent()
        folderIdentity = ArtifactDirectory.identity(of: folder.path)
        // Staging folders of killed runs for this artifact: nobody holds them any more.
        ArtifactDirectory.removeAbandonedStaging(in: parent, for: destination.lastPathComponent)
    }

    /// The device and inode of what `path` resolves to, nil when nothing.
    private static func identity(of path: String) -> (device: UInt64, inode: UInt64)? {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        return (UInt64(status.st_dev), UInt64(status.st_ino))
    }

    /// The error when the destination's folder no longer resolves to the folder the staging
    /// folder was made in (a symbolic link on the way was retargeted, a folder moved): nothing is
    /// written or published elsewhere than where the run started. Nil while it does.
    private var folderMoved: BundleError? {
        guard let folderIdentity else { return nil }
        let given = destination.deletingLastPathComponent().path
        if let now = ArtifactDirectory.identity(of: given), now == folderIdentity { return nil }
        return .writeFailed(
            path: destination.path,
            reason: "its folder '\(given)' no longer resolves to '\(folder.path)', where the artifact was being "
                + "written (a symbolic link on the way was changed, or a folder moved); nothing was published")
    }

    /// Makes, locks and registers for ``InterruptCleanup`` a staging folder beside `destination`.
    /// - Returns: the folder, its lock (-1 where the file system has none), the folders above it
    ///   made for it (deepest first) and its clean-up token.
    /// - Throws: `BundleError.writeFailed` when the folder cannot be made or locked.
    private static func makeStaging(for destination: URL, faults: FaultInjector?) throws -> (
        url: URL, lock: Int32, createdParents: [String], cleanupToken: Int
    ) {
        let parent = destination.deletingLastPathComponent()
        // A signal arriving between the mkdir and the registration is handled after it.
        return try InterruptCleanup.registering {
            // A cleaner may lock and remove a staging folder between its mkdir and our flock: then
            // the folder is gone or the one locked is not the one at the path, and a fresh name is tried.
            var created: [String] = []
            var chosen: (url: URL, lock: Int32)?
            for _ in 0..<3 where chosen == nil {
                let candidate = parent.appendingPathComponent(
                    stagingPrefix + destination.lastPathComponent + "-" + UniqueName.make(),
                    isDirectory: true)
                do {
                    created += try ArtifactDirectory.makeDirectories(
                        candidate, faults: faults, reportedAs: { _ in destination.path }
                    )
                    .filter { $0 != candidate.physicallyStandardized.path }
                } catch {
                    // The model folder (and output folder) an earlier try made: a failed export leaves none.
                    for path in created.reversed() { _ = rmdir(path) }
                    throw error
                }
                let lock = ArtifactDirectory.lockedDescriptor(candidate.path, wait: true)
                switch lock {
                case .locked(let descriptor) where ArtifactDirectory.isFolder(candidate.path, openAs: descriptor):
                    chosen = (candidate, descriptor)
                case .locked(let descriptor):
                    close(descriptor)
                case .failed(ENOENT):
                    // Removed before it could be opened: as above.
                    break
                case .unsupported:
                    chosen = (candidate, -1)
                case .failed(let code):
                    _ = rmdir(candidate.path)
                    for path in created.reversed() { _ = rmdir(path) }
                    throw BundleError.writeFailed(
                        path: destination.path, reason: "cannot lock its staging folder: \(systemErrorMessage(code))")
                }
            }
            guard let chosen else {
                for path in created.reversed() { _ = rmdir(path) }
                throw BundleError.writeFailed(
                    path: destination.path, reason: "its staging folder was removed as soon as it was made")
            }
            // By the paths they resolve to now: removed there on failure, whatever a link on the
            // way leads to by then.
            let url =
                resolvedRealPath(chosen.url.path).map { URL(fileURLWithPath: $0, isDirectory: true) } ?? chosen.url
            let createdParents = created.reversed().map { resolvedRealPath($0) ?? $0 }
            let token = InterruptCleanup.register(url, emptyFolders: createdParents)
            return (url, chosen.lock, createdParents, token)
        }
    }

    /// Refuses to write an artifact at `destination` when something is there, unless `overwrite`
    /// is given and it is an artifact of the kind being written: a folder holding `marker` (its
    /// manifest), or an empty one. `--overwrite` replaces artifacts; a file or a folder of the
    /// user's, which happens to have the artifact's name, is never deleted, and the refusal says
    /// so at once rather than suggesting `--overwrite`. Another entry whose name is one with the
    /// artifact's on macOS (``checkNameClash(_:)``) is refused, `--overwrite` or not.
    /// - Throws: `BundleError.nameClash`, `.notReplaceable` or `.outputExists`; `.writeFailed`
    ///   when an artifact to replace has a folder another user keeps unwritable.
    public static func checkDestination(_ destination: URL, overwrite: Bool, marker: String) throws {
        try checkNameClash(destination)
        var isFolder: ObjCBool = false
        let manager = FileManager.default
        guard manager.fileExists(atPath: destination.path, isDirectory: &isFolder) else {
            // A symbolic link to nothing: no artifact, and no rename may replace it either.
            if (try? manager.attributesOfItem(atPath: destination.path))?[.type] as? FileAttributeType
                == .typeSymbolicLink
            {
                throw BundleError.notReplaceable(path: destination.path, reason: "it is a link to nothing")
            }
            return
        }
        guard isFolder.boolValue else {
            throw BundleError.notReplaceable(path: destination.path, reason: "it is a file")
        }
        let isEmpty = (try? manager.contentsOfDirectory(atPath: destination.path))?.isEmpty == true
        guard isEmpty || isManifest(destination.appendingPathComponent(marker)) else {
            throw BundleError.notReplaceable(
                path: destination.path, reason: "the folder holds no \(marker) of an artifact")
        }
        guard overwrite else { throw BundleError.outputExists(path: destination.path) }
        // Replaced, it must be removed: a folder of it another user owns and keeps unwritable
        // would leave the old artifact whole in a hidden folder (`removeTree` opens only ours).
        for folder in [destination.path] + subfolders(of: destination) where access(folder, W_OK | X_OK) != 0 {
            var status = stat()
            guard stat(folder, &status) == 0, status.st_uid != geteuid() else { continue }
            throw BundleError.writeFailed(
                path: destination.path,
                reason: "'\(folder)' is another user's and not writable: the artifact there could not be removed")
        }
    }

    /// Refuses `url` when its folder holds another entry that is one name with it where file
    /// names ignore case and Unicode normalization form (``FileSystemName``), as on macOS:
    /// there the two would be one artifact, so a folder of them copied to a Mac would lose one.
    /// - Throws: `BundleError.nameClash` naming both.
    public static func checkNameClash(_ url: URL) throws {
        let name = url.lastPathComponent
        let folder = url.deletingLastPathComponent()
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        if let other = entries.sorted(by: FileSystemName.byteOrder).first(where: {
            FileSystemName.clash($0, name) && !$0.utf8.elementsEqual(name.utf8)
        }) {
            throw BundleError.nameClash(path: url.path, existing: folder.appendingPathComponent(other).path)
        }
    }

    /// Every folder below `url`, however deep.
    private static func subfolders(of url: URL) -> [String] {
        var folders: [String] = []
        guard let walker = FileManager.default.enumerator(atPath: url.path) else { return folders }
        while let entry = walker.nextObject() as? String {
            if (walker.fileAttributes?[.type] as? FileAttributeType) == .typeDirectory {
                folders.append(url.appendingPathComponent(entry).path)
            }
        }
        return folders
    }

    /// Whether `url` is an artifact's manifest: a JSON object naming a schema of this tool
    /// (`exporter.…`) or, for a Core ML package, its `fileFormatVersion`. A folder that merely
    /// holds a file of that name is the user's.
    private static func isManifest(_ url: URL) -> Bool {
        guard let data = (try? BundleReader.readDocument(url)) ?? nil,
            let object = (try? JSONParser.parse([UInt8](data)))?.objectValue
        else { return false }
        return object["schema"]?.stringValue?.hasPrefix("exporter.") == true
            || object["fileFormatVersion"]?.stringValue != nil
    }

    deinit {
        if let cleanupToken { InterruptCleanup.unregister(cleanupToken) }
        if !published {
            try? FileManager.default.removeItem(at: staging)
            // rmdir: only empty folders go, so another writer's files are never touched.
            for path in createdParents { _ = rmdir(path) }
        }
        if stagingLock >= 0 { close(stagingLock) }
    }

    /// What trying to lock a folder gave.
    private enum FolderLock {
        /// An open descriptor holding an exclusive `flock`.
        case locked(Int32)
        /// The file system has no `flock` for it.
        case unsupported
        /// It could not be opened, or (without waiting) another process holds the lock: the errno.
        case failed(Int32)
    }

    /// Opens the folder at `path` and takes an exclusive `flock` on it, waiting or not.
    private static func lockedDescriptor(_ path: String, wait: Bool) -> FolderLock {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { return .failed(errno) }
        guard flock(descriptor, LOCK_EX | (wait ? 0 : LOCK_NB)) == 0 else {
            let code = errno
            close(descriptor)
            // macOS's flock(2) reports ENOTSUP for what it cannot lock: another number than
            // EOPNOTSUPP there, the same one on Linux.
            return [EBADF, ENOLCK, EOPNOTSUPP, ENOTSUP].contains(code) ? .unsupported : .failed(code)
        }
        return .locked(descriptor)
    }

    /// Whether `path` is still the folder open as `descriptor` (not removed, not replaced).
    private static func isFolder(_ path: String, openAs descriptor: Int32) -> Bool {
        var open = stat()
        var named = stat()
        guard fstat(descriptor, &open) == 0, stat(path, &named) == 0 else { return false }
        return open.st_dev == named.st_dev && open.st_ino == named.st_ino
    }

    /// Whether the staging folder is still the one this artifact made and locked.
    private var stagingIsIntact: Bool {
        if stagingLock >= 0 { return ArtifactDirectory.isFolder(staging.path, openAs: stagingLock) }
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: staging.path, isDirectory: &isDirectory) && isDirectory.boolValue
    }

    /// The error when the staging folder was taken away.
    private var stagingRemoved: BundleError {
        .writeFailed(
            path: destination.path, reason: "its staging folder was removed while the artifact was being written")
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
            guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), isDirectory.boolValue
            else { continue }
            guard case .locked(let descriptor) = lockedDescriptor(url.path, wait: false) else { continue }
            removeTree(url)
            close(descriptor)
        }
    }

    /// Removes the folder at `url` and everything in it, as far as possible. A replaced artifact
    /// may be read-only (build caches keep their outputs so): its folders are made writable by
    /// their owner first, since `--overwrite` asked for it to go, instead of leaving it whole in a
    /// hidden folder that no later run could remove either.
    static func removeTree(_ url: URL) {
        let manager = FileManager.default
        guard (try? manager.removeItem(at: url)) == nil else { return }
        func makeWritable(_ folder: String) {
            var status = stat()
            if lstat(folder, &status) == 0, status.st_mode & S_IFMT == S_IFDIR {
                _ = chmod(folder, status.st_mode & 0o7777 | S_IRWXU)
            }
        }
        // Each folder before the walk enters it.
        makeWritable(url.path)
        if let walker = manager.enumerator(atPath: url.path) {
            while let entry = walker.nextObject() as? String { makeWritable(url.appendingPathComponent(entry).path) }
        }
        try? manager.removeItem(at: url)
    }

    /// Creates `url` and any missing parents, each creation a counted operation.
    /// - Parameter reportedAs: the path an error names for a folder (staging folders are
    ///   named by where their content is going, which is what the user asked for).
    /// - Returns: the folders created, outermost first.
    /// - Throws: `BundleError.writeFailed` naming the folder that could not be made, once those
    ///   made before it are removed again (a path too long leaves no empty folders behind).
    @discardableResult
    static func makeDirectories(
        _ url: URL, faults: FaultInjector?, reportedAs: (String) -> String = { $0 }
    ) throws -> [String] {
        var missing: [String] = []
        var current = url.physicallyStandardized.path
        var isDirectory: ObjCBool = false
        while !current.isEmpty, current != "/",
            !FileManager.default.fileExists(atPath: current, isDirectory: &isDirectory)
        {
            missing.append(current)
            current = parentPath(current)
        }
        if !current.isEmpty, FileManager.default.fileExists(atPath: current, isDirectory: &isDirectory),
            !isDirectory.boolValue
        {
            throw BundleError.writeFailed(path: reportedAs(current), reason: "not a directory")
        }
        var created: [String] = []
        do {
            for path in missing.reversed() {
                try faults?.check(reportedAs(path), .createDirectory)
                // The umask decides the modes: a group-writable one lets a team share an output folder.
                var made = mkdir(path, 0o777) == 0
                // A parent another run made, then removed as empty when its export failed: once more.
                if !made, errno == ENOENT {
                    let parent = parentPath(path)
                    made = mkdir(parent, 0o777) == 0 && mkdir(path, 0o777) == 0
                }
                if made {
                    created.append(path)
                } else if errno != EEXIST {
                    throw BundleError.writeFailed(path: reportedAs(path), reason: systemErrorMessage(errno))
                }
            }
        } catch {
            for made in created.reversed() { _ = rmdir(made) }
            throw error
        }
        return created
    }

    /// A new file at `relativePath` inside the staging folder (sub-folders are created).
    /// Errors name the file where it will be once published (`<destination>/<relativePath>`).
    /// - Throws: `BundleError.writeFailed`.
    public func createFile(_ relativePath: String, bypassPageCache: Bool = false) throws -> OutputFile {
        if let moved = folderMoved { throw moved }
        let url = staging.appendingPathComponent(relativePath)
        // Under the clean-up's lock: a signal's clean-up renaming the staging folder away between
        // the check and the mkdir let this make it again, which left it (and the output folders)
        // behind, unregistered. Once a clean-up has begun, this waits for the process to end.
        let file = try InterruptCleanup.registering {
            // Never make the staging folder again: a new one would be unlocked and unknown.
            guard stagingIsIntact else { throw stagingRemoved }
            try ArtifactDirectory.makeDirectories(
                url.deletingLastPathComponent(), faults: faults, reportedAs: reported)
            return try OutputFile(
                url: url, faults: faults, reportedPath: reported(url.path), bypassPageCache: bypassPageCache)
        }
        files.append((url, file.path))
        file.whenFinished = { [weak self] size in self?.finishedSizes[url.path] = size }
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
        if let moved = folderMoved { throw moved }
        guard stagingIsIntact else { throw stagingRemoved }
        // Renamed within the folder the staging folder was made in, however the destination's
        // path resolves by now (checked just above); errors name the destination as given.
        let target = folder.appendingPathComponent(destination.lastPathComponent, isDirectory: true)
        let asGiven = destination.path
        for (url, reportedPath) in files {
            let size = (try? manager.attributesOfItem(atPath: url.path))?[.size] as? Int
            guard let finished = finishedSizes[url.path], size == finished else {
                throw BundleError.writeFailed(
                    path: reportedPath, reason: "the file was removed or changed while the artifact was being written")
            }
        }
        // From here the staging path may hold the artifact being replaced, or nothing: an
        // interruption leaves it to the next cleaner.
        if let cleanupToken { InterruptCleanup.unregister(cleanupToken) }
        cleanupToken = nil
        if !overwrite {
            // Another run may have published here since this one started: refused, not replaced.
            try ArtifactDirectory.renameIfAbsent(staging, to: target, reportedAs: asGiven, faults: faults)
            published = true
            return
        }
        if manager.fileExists(atPath: target.path),
            try ArtifactDirectory.exchange(staging, target, reportedAs: asGiven, faults: faults)
        {
            published = true
            // The staging path now holds the previous artifact (unlocked: the lock went with the
            // new one's folder), removed here, on an interruption meanwhile, or, if this process
            // is killed first, by the next cleaner.
            ArtifactDirectory.removeReplaced(staging)
            return
        }
        var displaced: URL?
        // The previous artifact, moved aside under a staging-like name, stays locked until it is
        // removed, so that no cleaner takes it while the new one is not yet in place.
        var displacedLock: Int32 = -1
        defer { if displacedLock >= 0 { close(displacedLock) } }
        do {
            if manager.fileExists(atPath: target.path) {
                if case .locked(let descriptor) = ArtifactDirectory.lockedDescriptor(target.path, wait: true) {
                    displacedLock = descriptor
                }
                let aside = folder.appendingPathComponent(
                    ArtifactDirectory.stagingPrefix + "old-" + target.lastPathComponent + "-" + UniqueName.make())
                try ArtifactDirectory.rename(target, to: aside, reportedAs: asGiven, faults: faults)
                displaced = aside
            }
            try ArtifactDirectory.rename(staging, to: target, reportedAs: asGiven, faults: faults)
        } catch {
            if let displaced, !manager.fileExists(atPath: target.path) {
                _ = Foundation.rename(displaced.path, target.path)
            }
            throw error
        }
        published = true
        if let displaced { ArtifactDirectory.removeReplaced(displaced) }
    }

    /// Removes the artifact a publication replaced (moved to `url`), registered for
    /// ``InterruptCleanup`` meanwhile: a signal during the removal of a large artifact left it
    /// behind in a hidden folder.
    private static func removeReplaced(_ url: URL) {
        let token = InterruptCleanup.register(url)
        removeTree(url)
        InterruptCleanup.unregister(token)
    }

    /// Exchanges two existing paths atomically; false when the system or file system cannot
    /// (the caller then renames in two steps).
    /// - Throws: `BundleError.writeFailed` naming `reportedPath` for any other failure.
    private static func exchange(_ first: URL, _ second: URL, reportedAs reportedPath: String, faults: FaultInjector?)
        throws -> Bool
    {
        try faults?.check(reportedPath, .rename)
        #if os(Linux)
            guard let renameat2 = linuxRenameAt2 else { return false }
            guard renameat2(AT_FDCWD, first.path, AT_FDCWD, second.path, linuxRenameExchange) == 0 else {
                let code = errno
                if [EINVAL, ENOSYS, EOPNOTSUPP].contains(code) { return false }
                throw BundleError.writeFailed(path: reportedPath, reason: systemErrorMessage(code))
            }
            return true
        #elseif canImport(Darwin)
            guard renamex_np(first.path, second.path, UInt32(RENAME_SWAP)) == 0 else {
                let code = errno
                // ENOTSUP: this file system cannot swap (documented by rename(2)); EOPNOTSUPP and
                // ENOSYS are not documented for it, but refusing to swap is what they would mean.
                if [EINVAL, ENOTSUP, EOPNOTSUPP, ENOSYS].contains(code) { return false }
                throw BundleError.writeFailed(path: reportedPath, reason: systemErrorMessage(code))
            }
            return true
        #else
            return false
        #endif
    }

    /// Whether artifacts in `folder` are replaced by one exchange (else two renames): tried on
    /// two scratch folders there. Tests count the operations of a replacement by it.
    static func exchangesAtomically(in folder: URL) -> Bool {
        let first = folder.appendingPathComponent(".exchange-probe-\(UniqueName.make())")
        let second = folder.appendingPathComponent(".exchange-probe-\(UniqueName.make())")
        defer {
            try? FileManager.default.removeItem(at: first)
            try? FileManager.default.removeItem(at: second)
        }
        guard mkdir(first.path, 0o755) == 0, mkdir(second.path, 0o755) == 0 else { return false }
        return (try? exchange(first, second, reportedAs: first.path, faults: nil)) == true
    }

    #if os(Linux)
        private typealias RenameAt2 =
            @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
        /// glibc's `renameat2` (2.28 and later), which Swift's Glibc module does not import.
        private static let linuxRenameAt2: RenameAt2? = dlsym(nil, "renameat2").map {
            unsafeBitCast($0, to: RenameAt2.self)
        }
        /// `RENAME_EXCHANGE` of `<linux/fs.h>`, which Swift's Glibc module does not import either.
        private static let linuxRenameExchange: UInt32 = 1 << 1
        /// `RENAME_NOREPLACE` of `<linux/fs.h>`.
        private static let linuxRenameNoReplace: UInt32 = 1 << 0
    #endif

    /// Renames `source` to `target` unless something is there: in one step where the system can
    /// (`renameat2` with `RENAME_NOREPLACE` on Linux, `renamex_np` with `RENAME_EXCL` on macOS),
    /// else after a check.
    /// - Throws: `BundleError.outputExists` when `target` exists, `.writeFailed` otherwise, both
    ///   naming `reportedPath` (the destination as given).
    private static func renameIfAbsent(
        _ source: URL, to target: URL, reportedAs reportedPath: String, faults: FaultInjector?
    )
        throws
    {
        try faults?.check(reportedPath, .rename)
        var code: Int32 = EINVAL
        #if os(Linux)
            if let renameat2 = linuxRenameAt2 {
                code = renameat2(AT_FDCWD, source.path, AT_FDCWD, target.path, linuxRenameNoReplace) == 0 ? 0 : errno
            }
        #elseif canImport(Darwin)
            code = renamex_np(source.path, target.path, UInt32(RENAME_EXCL)) == 0 ? 0 : errno
        #endif
        if [EINVAL, ENOSYS, EOPNOTSUPP, ENOTSUP].contains(code) {
            // No such rename here: the check and the rename are two steps.
            code =
                FileManager.default.fileExists(atPath: target.path)
                ? EEXIST : Foundation.rename(source.path, target.path) == 0 ? 0 : errno
        }
        switch code {
        case 0: return
        case EEXIST, ENOTEMPTY: throw BundleError.outputExists(path: reportedPath)
        default: throw BundleError.writeFailed(path: reportedPath, reason: systemErrorMessage(code))
        }
    }

    /// Renames `source` to `target` atomically (one `rename(2)`, on the same file system).
    /// - Throws: `BundleError.writeFailed` naming `reportedPath` (the artifact's destination).
    private static func rename(_ source: URL, to target: URL, reportedAs reportedPath: String, faults: FaultInjector?)
        throws
    {
        try faults?.check(reportedPath, .rename)
        guard Foundation.rename(source.path, target.path) == 0 else {
            throw BundleError.writeFailed(path: reportedPath, reason: systemErrorMessage(errno))
        }
    }
}
