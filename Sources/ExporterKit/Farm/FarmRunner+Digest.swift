import Foundation

extension FarmRunner {
    /// The digest of what defines the farm's jobs alike on every machine: this tool's version,
    /// the farm file's bytes, the bytes of the files its jobs name (`compression_config`,
    /// `device_table`; or that one is missing) and of every file of the presets folder (the
    /// presets, their configs, the compression configs, the device table; hidden ones aside). Every report records
    /// it as `farm_digest`; `--collect` merges only the shard reports whose digest is the farm's
    /// now. Checkpoints are left out: their weights are only on the machines that export them,
    /// and each job's `build_key` covers them.
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
        let presets = resolver.catalog.directory
        let enumerator = FileManager.default.enumerator(atPath: presets.path)
        var files: [String] = []
        while let path = enumerator?.nextObject() as? String {
            // Hidden files (a Finder's .DS_Store) are no presets: one machine's would fail the collect.
            if (path as NSString).lastPathComponent.hasPrefix(".") {
                enumerator?.skipDescendants()
                continue
            }
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(
                atPath: presets.appendingPathComponent(path).path, isDirectory: &isDirectory),
                !isDirectory.boolValue
            {
                files.append(path)
            }
        }
        for path in files.sorted() {
            hash.update(field: "presets|\(path)")
            FarmRunner.updateDigest(&hash, withContentsOf: presets.appendingPathComponent(path))
        }
        return hash.hexDigest()
    }

    /// Adds a file's bytes to `hash`, or a marker when it is missing or cannot be read (a FIFO
    /// is never waited on): a job naming it fails alike on every machine.
    private static func updateDigest(_ hash: inout SHA256, withContentsOf url: URL) {
        guard let data = (try? readNamedFile(url)) ?? nil else { return hash.update(field: "unreadable") }
        hash.update(field: "bytes \(data.count)")
        hash.update(data)
    }
}
