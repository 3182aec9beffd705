import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension FarmRunner {
    /// The digest of what defines the farm's jobs alike on every machine: this tool's version,
    /// the farm file's bytes, the bytes of the files its jobs name (`compression_config`,
    /// `device_table`; or that one is missing) and of every file of the presets folder (the
    /// presets, their configs, the compression configs, the device table; hidden ones aside), by
    /// its path relative to that folder, found as every command finds them: through symbolic
    /// links (``presetFiles(in:)``). Every report records it as `farm_digest`; `--collect` merges
    /// only the shard reports whose digest is the farm's now. Checkpoints are left out: their
    /// weights are only on the machines that export them, and each job's `build_key` covers them.
    public func farmDigest() -> String {
        var hash = SHA256()
        hash.update(field: "exporter.farm-digest/1")
        hash.update(field: ToolVersion.current)
        hash.update(field: farm.contentDigest)
        let folder = farm.path.deletingLastPathComponent()
        for job in farm.jobs {
            for (key, path) in [("compression_config", job.compressionConfig), ("device_table", job.deviceTable)] {
                guard let path else { continue }
                hash.update(field: "\(job.name)|\(key)|\(path)")
                FarmRunner.updateDigest(&hash, withContentsOf: URL.resolvingFilePath(path, from: folder))
            }
        }
        for entry in FarmRunner.presetFiles(in: resolver.catalog.directory) {
            hash.update(field: "presets|\(entry.path)")
            switch entry.kind {
            case .file(let url): FarmRunner.updateDigest(&hash, withContentsOf: url)
            case .unreadable: hash.update(field: "unreadable")
            case .loop: hash.update(field: "a link to a folder that holds it")
            }
        }
        return hash.hexDigest()
    }

    /// An entry of the presets folder, as the farm digest takes it.
    struct PresetEntry: Equatable {
        /// What is found at an entry's path.
        enum Kind: Equatable {
            /// A file (or anything but a folder), read through links.
            case file(URL)
            /// A symbolic link leading nowhere, or a folder that cannot be listed.
            case unreadable
            /// A folder already being walked, reached again through a link (a link to `..`).
            case loop
        }

        /// The path relative to the presets folder, with `/` between names.
        let path: String
        /// What it is.
        let kind: Kind
    }

    /// The entries of the presets folder `folder`, sorted by the bytes of their relative paths:
    /// every file but hidden ones (a Finder's `.DS_Store`, a `.git` folder), found through
    /// symbolic links as the commands that read the presets find them (the folder itself, a
    /// subfolder such as `compression/`, or a file may be a link), so that the same presets give
    /// the same entries however they are reached. A link leading nowhere is an unreadable
    /// entry, a link to a folder being walked a loop; folders add no entry of their own.
    static func presetFiles(in folder: URL) -> [PresetEntry] {
        var entries: [PresetEntry] = []
        func identity(_ url: URL) -> (isFolder: Bool, id: [UInt64])? {
            var status = stat()
            guard stat(url.path, &status) == 0 else { return nil }
            return (status.st_mode & S_IFMT == S_IFDIR, [UInt64(status.st_dev), UInt64(status.st_ino)])
        }
        func walk(_ url: URL, relative: String, ancestors: Set<[UInt64]>) {
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: url.path) else {
                if !relative.isEmpty { entries.append(PresetEntry(path: relative, kind: .unreadable)) }
                return
            }
            // Hidden entries are no presets: one machine's would fail the collect.
            for name in names where !name.hasPrefix(".") {
                let child = url.appendingPathComponent(name)
                let path = relative.isEmpty ? name : relative + "/" + name
                guard let found = identity(child) else {
                    entries.append(PresetEntry(path: path, kind: .unreadable))
                    continue
                }
                guard found.isFolder else {
                    entries.append(PresetEntry(path: path, kind: .file(child)))
                    continue
                }
                guard !ancestors.contains(found.id) else {
                    entries.append(PresetEntry(path: path, kind: .loop))
                    continue
                }
                walk(child, relative: path, ancestors: ancestors.union([found.id]))
            }
        }
        walk(folder, relative: "", ancestors: identity(folder).map { [$0.id] } ?? [])
        return entries.sorted { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) }
    }

    /// Adds a file's bytes to `hash`, or a marker when it is missing or cannot be read (a FIFO
    /// is never waited on): a job naming it fails alike on every machine.
    private static func updateDigest(_ hash: inout SHA256, withContentsOf url: URL) {
        guard let data = (try? readNamedFile(url)) ?? nil else { return hash.update(field: "unreadable") }
        hash.update(field: "bytes \(data.count)")
        hash.update(data)
    }
}
