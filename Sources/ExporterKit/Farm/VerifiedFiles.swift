import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What a farm run remembers of the artifact files it read in full and found as their
/// manifests say: `<output>/.farm-verified.json`, each file's size, CRC-32 and the file
/// system's identity of that state (modification and change times, inode, device); and the
/// size and CRC-32 of each artifact's `manifest.json` as the farm wrote it.
///
/// No checksum covers a manifest: an edited or bit-rotted one would pass every file check.
/// The farm skips an artifact only while its manifest is the one it wrote (or skipped before,
/// unchanged), byte for byte: a manifest is small and read anyway, so it is compared every
/// time, with or without `--reverify`.
///
/// Why: deciding to skip a job re-read every byte of its artifacts (9.7 GB for the example
/// farm, 6.6 s), so a no-op run grew with everything the farm had built. A file whose size,
/// times, inode and device are those recorded has not been written, truncated or replaced
/// since it was read (any write sets its change time, which no tool can set back), so its
/// recorded CRC-32 still holds. A file is recorded only once its last change is
/// ``settleSeconds`` old, so that a change within the file system's timestamp granularity
/// cannot go unseen. `exporter batch --reverify` ignores the record and reads everything.
///
/// Thread-safe: jobs check their artifacts side by side.
public final class VerifiedFiles: @unchecked Sendable {
    /// The record's file name in the farm's output folder.
    public static let fileName = ".farm-verified.json"
    /// The record's schema.
    static let schema = "exporter.farm-verified/2"

    /// A file as it was when read in full.
    struct Stamp: Codable, Equatable {
        var bytes: Int
        var crc32: String
        /// Modification and change times, nanoseconds since 1970.
        var modified: Int64
        var changed: Int64
        var inode: UInt64
        var device: UInt64
    }

    /// A manifest as the farm wrote it.
    struct ManifestStamp: Codable, Equatable {
        var bytes: Int
        var crc32: String

        init(_ data: Data) {
            bytes = data.count
            crc32 = BundleWriter.hex(data.withUnsafeBytes { CRC32.checksum($0) })
        }
    }

    private struct Record: Codable {
        var schema: String
        /// By path relative to the output folder.
        var files: [String: Stamp]
        /// By the manifest's path relative to the output folder.
        var manifests: [String: ManifestStamp]
    }

    /// The output folder; recorded paths are relative to it.
    public let root: URL
    /// How old a file's last change must be before it is recorded.
    let settleSeconds: Double
    /// Whether recorded files are believed (not with `--reverify`).
    let trusting: Bool
    private let lock = NSLock()
    /// The record as loaded.
    private let previous: [String: Stamp]
    /// What this run read or found unchanged.
    private var current: [String: Stamp] = [:]
    /// Every file this run checked, whatever the outcome.
    private var checked: Set<String> = []
    /// The manifests of the record as loaded.
    private let previousManifests: [String: ManifestStamp]
    /// The manifests this run wrote, or found as recorded.
    private var currentManifests: [String: ManifestStamp] = [:]
    /// Every manifest this run checked or wrote.
    private var checkedManifests: Set<String> = []

    /// The record of `root`; with `trusting` false (`--reverify`), nothing recorded is believed.
    /// A missing or unreadable record is an empty one: every file is read in full again.
    public init(root: URL, trusting: Bool = true, settleSeconds: Double = 2) {
        self.root = root.physicallyStandardized
        self.trusting = trusting
        self.settleSeconds = settleSeconds
        let url = self.root.appendingPathComponent(Self.fileName)
        if let data = try? Data(contentsOf: url), let record = try? JSONDecoder().decode(Record.self, from: data),
            record.schema == Self.schema
        {
            previous = record.files
            previousManifests = record.manifests
        } else {
            previous = [:]
            previousManifests = [:]
        }
    }

    /// Whether `data`, the `manifest.json` of the artifact at `artifact`, is the one the farm
    /// wrote there (or found there before and kept), byte for byte; whatever `trusting` says.
    func knows(manifest data: Data, of artifact: URL) -> Bool {
        guard let key = key(for: artifact.appendingPathComponent(BundleWriter.manifestName)) else { return false }
        let stamp = ManifestStamp(data)
        return lock.withLock {
            checkedManifests.insert(key)
            guard previousManifests[key] == stamp else { return false }
            currentManifests[key] = stamp
            return true
        }
    }

    /// Records `data` as the `manifest.json` the farm just wrote for the artifact at `artifact`.
    func record(manifest data: Data, of artifact: URL) {
        guard let key = key(for: artifact.appendingPathComponent(BundleWriter.manifestName)) else { return }
        lock.withLock {
            checkedManifests.insert(key)
            currentManifests[key] = ManifestStamp(data)
        }
    }

    /// Whether `url` is recorded with `bytes` and `crc32` (the manifest's) and is unchanged since.
    func vouches(for url: URL, bytes: Int, crc32: String) -> Bool {
        guard let key = key(for: url) else { return false }
        let stamp = Self.stamp(of: url, crc32: crc32)
        return lock.withLock {
            checked.insert(key)
            guard trusting, let stamp, let recorded = previous[key], recorded == stamp, stamp.bytes == bytes else {
                return false
            }
            current[key] = stamp
            return true
        }
    }

    /// Records `url` as read in full with `bytes` and `crc32`, if it was not changed while it
    /// was read (`before`, its stamp taken first) and its last change has settled.
    func record(_ url: URL, before: Stamp?, bytes: Int, crc32: String) {
        guard let key = key(for: url) else { return }
        let after = Self.stamp(of: url, crc32: crc32)
        let settled = (Date().timeIntervalSince1970 - settleSeconds) * 1e9
        lock.withLock {
            checked.insert(key)
            guard let before, let after, before == after, after.bytes == bytes, Double(after.changed) < settled,
                Double(after.modified) < settled
            else { return }
            current[key] = after
        }
    }

    /// Writes the next record, atomically: what this run read, wrote or found unchanged, and
    /// what it did not check (another shard's artifacts) while the file is still there. Sorted
    /// keys: the same state gives the same bytes.
    /// - Throws: `BundleError.writeFailed`.
    public func save() throws {
        func exists(_ key: String) -> Bool {
            FileManager.default.fileExists(atPath: root.appendingPathComponent(key).path)
        }
        let (files, manifests) = lock.withLock {
            (
                previous.filter { key, _ in !checked.contains(key) && exists(key) }.merging(current) { _, new in new },
                previousManifests.filter { key, _ in !checkedManifests.contains(key) && exists(key) }
                    .merging(currentManifests) { _, new in new }
            )
        }
        try FarmRunner.writeAtomically(
            try CanonicalJSON.encode(Record(schema: Self.schema, files: files, manifests: manifests)),
            to: root.appendingPathComponent(Self.fileName))
    }

    /// `url`'s path relative to the output folder; nil outside it.
    private func key(for url: URL) -> String? {
        let path = url.physicallyStandardized.path
        let prefix = root.path.hasSuffix("/") ? root.path : root.path + "/"
        guard path.hasPrefix(prefix) else { return nil }
        return String(path.dropFirst(prefix.count))
    }

    /// The file system's view of `url` now, with `crc32` attached; nil when it cannot be read.
    static func stamp(of url: URL, crc32: String) -> Stamp? {
        var status = stat()
        guard stat(url.path, &status) == 0, status.st_mode & S_IFMT == S_IFREG else { return nil }
        #if canImport(Darwin)
            let (modified, changed) = (status.st_mtimespec, status.st_ctimespec)
        #else
            let (modified, changed) = (status.st_mtim, status.st_ctim)
        #endif
        func nanoseconds(_ time: timespec) -> Int64 { Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec) }
        return Stamp(
            bytes: Int(status.st_size), crc32: crc32, modified: nanoseconds(modified), changed: nanoseconds(changed),
            // `dev_t` is a signed 32-bit integer on macOS (unsigned 64 on Linux): its bits, never a trap.
            inode: UInt64(status.st_ino), device: UInt64(truncatingIfNeeded: status.st_dev))
    }
}
