import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension FarmRunner {
    /// Merges the shard reports in the output folder into `farm-report.json`, jobs in farm order.
    /// Only reports of the farm as it is now (``farmDigest()``), of one run (`--run-id`: the
    /// given one, or one among them all), of one split with every shard present, holding every
    /// job of the farm once and no other, are merged. The earlier `farm-report.json` is removed
    /// first, so a collect that fails leaves none that could pass for its result (a CI step
    /// uploading the output folder would upload it).
    /// - Throws: `FarmError.collect` naming the report that is missing, foreign, stale or
    ///   overlapping, `FarmError.locked` when a run holds the folder (without `--wait`);
    ///   `BundleError.writeFailed` when the earlier report cannot be removed or the new one written.
    public func collect(log: (FarmMessage) -> Void = { _ in }) throws -> FarmReport {
        let manager = FileManager.default
        // A shard still running in this folder writes its report last: its lock is waited for
        // (`--wait`) or refused, as a run's is.
        let lock =
            manager.fileExists(atPath: settings.outputDirectory.path)
            ? try FarmLock(directory: settings.outputDirectory, wait: settings.waitForLock, log: log) : nil
        defer { lock?.release() }
        let reportURL = settings.outputDirectory.appendingPathComponent("farm-report.json")
        if unlink(reportURL.path) != 0, errno != ENOENT {
            throw BundleError.writeFailed(path: reportURL.path, reason: OutputFile.errnoText())
        }
        let names = ((try? manager.contentsOfDirectory(atPath: settings.outputDirectory.path)) ?? [])
            .filter { $0.hasPrefix("farm-report-shard-") && $0.hasSuffix(".json") }.sorted()
        guard !names.isEmpty else {
            throw FarmError.collect(reason: "no farm-report-shard-*.json in '\(settings.outputDirectory.path)'")
        }
        let digest = farmDigest()
        let listed = Set(farm.jobs.map(\.name))
        var byName: [String: FarmJobResult] = [:]
        // The report (file name) and split (its shard count) each job was found in.
        var foundIn: [String: (report: String, count: Int)] = [:]
        var seconds: [String: Double] = [:]
        // The shards found, by count (N of "I/N"), each shard's index with its report's file name.
        var splits: [Int: [Int: String]] = [:]
        // The first report of each run id, by file name.
        var runs: [(id: String?, report: String)] = []
        var reports: [(name: String, report: FarmReport)] = []
        for name in names {
            let report = try FarmRunner.shardReport(named: name, in: settings.outputDirectory)
            // With --run-id, another run's reports (of another split, another farm) are left aside:
            // an output folder kept from night to night holds them.
            if let wanted = settings.runID, report.runID != wanted {
                log(.notice("left aside: '\(name)', a report of \(FarmRunner.runText(report.runID))"))
                continue
            }
            reports.append((name, report))
            guard report.farm == reportedFarmName else {
                throw FarmError.collect(
                    reason: "'\(name)' is a report of farm '\(report.farm)', not of '\(reportedFarmName)': "
                        + "collect with the farm file its shards ran")
            }
            let parts = (report.shard ?? "").split(separator: "/", omittingEmptySubsequences: false).map { Int($0) }
            guard parts.count == 2, let index = parts[0], let count = parts[1], count >= 1, (1...count).contains(index)
            else {
                throw FarmError.collect(reason: "'\(name)' is not the report of a shard")
            }
            guard report.farmDigest == digest else {
                throw FarmError.collect(
                    reason: "'\(name)' was written for another version of the farm (its farm file, a file its jobs "
                        + "name, the presets or exporter changed since); run shard \(index)/\(count) again")
            }
            if !runs.contains(where: { $0.id == report.runID }) { runs.append((report.runID, name)) }
            if let other = splits[count]?[index] {
                throw FarmError.collect(reason: "'\(other)' and '\(name)' are both reports of shard \(index)/\(count)")
            }
            splits[count, default: [:]][index] = name
            for job in report.jobs {
                guard listed.contains(job.name) else {
                    throw FarmError.collect(
                        reason: "'\(name)' reports job '\(job.name)', which the farm file does not list")
                }
                if let other = foundIn[job.name] {
                    throw FarmError.collect(
                        reason: "job '\(job.name)' is in two shard reports, '\(other.report)' and '\(name)'"
                            + (other.count == count
                                ? ": their machines split the jobs differently (every machine needs the model folders' "
                                    + "config.json)"
                                : ", of splits into \(min(other.count, count)) and \(max(other.count, count)) shards; "
                                    + "keep one split's reports"))
                }
                byName[job.name] = job
                foundIn[job.name] = (name, count)
                seconds[job.name] = report.seconds[job.name]
            }
        }
        if let wanted = settings.runID, reports.isEmpty {
            throw FarmError.collect(reason: "no shard report of run '\(wanted)' in '\(settings.outputDirectory.path)'")
        }
        if runs.count > 1 {
            throw FarmError.collect(
                reason: "'\(runs[0].report)' is a report of \(FarmRunner.runText(runs[0].id)), '\(runs[1].report)' "
                    + "of \(FarmRunner.runText(runs[1].id)); collect one run's reports (--run-id)")
        }
        guard splits.count == 1, let (count, found) = splits.first else {
            let counts = splits.keys.sorted().map(String.init)
            throw FarmError.collect(
                reason: "the shard reports are of splits into \(counts.dropLast().joined(separator: ", ")) and "
                    + "\(counts.last ?? "") shards; keep one split's reports")
        }
        let missing = (1...count).filter { found[$0] == nil }
        guard missing.isEmpty else {
            let shards = missing.map { "\($0)/\(count)" }
            let files = missing.map { "'farm-report-shard-\($0)-of-\(count).json'" }
            throw FarmError.collect(
                reason: missing.count == 1
                    ? "shard \(shards[0]) has no report (\(files[0]))"
                    : "shards \(shards.joined(separator: ", ")) have no report (\(files.joined(separator: ", ")))")
        }
        let missingJobs = farm.jobs.map(\.name).filter { byName[$0] == nil }
        guard missingJobs.isEmpty else {
            throw FarmError.collect(reason: "no result for job(s) \(missingJobs.joined(separator: ", "))")
        }
        try markCollected(reports)
        let report = FarmReport(
            farm: reportedFarmName, farmDigest: digest, runID: runs.first?.id ?? nil, shard: nil,
            jobs: farm.jobs.compactMap { byName[$0.name] }, seconds: seconds)
        try FarmRunner.writeAtomically(try report.canonicalJSON(), to: reportURL)
        return report
    }

    /// Marks `reports` (shard reports by file name) as merged by this collect, whose mark is a
    /// digest of their `report_id`s, after refusing (without `--run-id`) a report an earlier
    /// collect merged with other reports: its shard has not run since, while others have (in an
    /// output folder kept from run to run, its report is a former run's). Collecting the same
    /// reports again finds them marked alike, and merges them as before.
    /// - Throws: `FarmError.collect` naming the report; `BundleError.writeFailed` when one
    ///   cannot be marked.
    private func markCollected(_ reports: [(name: String, report: FarmReport)]) throws {
        var hash = SHA256()
        hash.update(field: "exporter.farm-collect/1")
        for (_, report) in reports { hash.update(field: report.reportID) }
        let mark = hash.hexDigest()
        if settings.runID == nil,
            let stale = reports.first(where: { $0.report.collected.map { $0 != mark } ?? false })
        {
            throw FarmError.collect(
                reason: "'\(stale.name)' was merged by an earlier collect and its shard (\(stale.report.shard ?? "")) "
                    + "has not run since, while others have; run it again, or give every shard and the collect one "
                    + "--run-id")
        }
        for (name, report) in reports where report.collected != mark {
            var marked = report
            marked.collected = mark
            try FarmRunner.writeAtomically(
                try marked.canonicalJSON(), to: settings.outputDirectory.appendingPathComponent(name))
        }
    }

    /// The shard report `name` of `folder`, of this version's schema.
    /// - Throws: `FarmError.collect` for a file that is no farm report, or one of another schema.
    private static func shardReport(named name: String, in folder: URL) throws -> FarmReport {
        let url = folder.appendingPathComponent(name)
        guard let data = (try? readNamedFile(url)) ?? nil, let document = try? JSONParser.parse([UInt8](data)),
            let schema = document.objectValue?["schema"]?.stringValue
        else {
            throw FarmError.collect(reason: "'\(name)' is not a farm report")
        }
        guard schema == FarmReport.currentSchema else {
            throw FarmError.collect(
                reason: "'\(name)' is a report of schema '\(schema)'; this version collects "
                    + "'\(FarmReport.currentSchema)': run its shard again")
        }
        guard let report = try? JSONDecoder().decode(FarmReport.self, from: data) else {
            throw FarmError.collect(reason: "'\(name)' is not a farm report")
        }
        return report
    }

    /// `run 'nightly-42'`, or `a run without --run-id`.
    private static func runText(_ id: String?) -> String {
        id.map { "run '\($0)'" } ?? "a run without --run-id"
    }
}
