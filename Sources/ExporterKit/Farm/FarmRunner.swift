import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// How a farm runs.
public struct FarmSettings: Sendable {
    /// Where every job's artifacts and the report go.
    public var outputDirectory: URL
    /// Jobs run at once.
    public var concurrentJobs: Int
    /// Rebuild even when a job's key and artifact are unchanged.
    public var force = false
    /// Read every existing artifact in full, ignoring the record of files read before and
    /// unchanged since (``VerifiedFiles``).
    public var reverify = false
    /// Run only shard `index` of `count` (1-based).
    public var shard: (index: Int, count: Int)?
    /// Wait for another farm run holding the output folder instead of giving up.
    public var waitForLock = false
    /// The run this is part of (`--run-id`), recorded in the report; a collect merges only the
    /// reports of this run.
    public var runID: String?
    /// The `exporter` executable each job runs as a child process (isolation: a job that
    /// crashes or runs out of memory takes nothing else down), by its absolute path: a job runs
    /// in the farm file's folder.
    public var executable: URL
    /// The children's environment. A job runs in the farm file's folder: a path in it (the presets'
    /// `EXPORTER_PRESETS`, the cache's `HF_HUB_CACHE`) must be absolute to mean what it means to the farm.
    public var environment: [String: String]
    /// Memory the exports may take together (their conversion forecasts, summed); nil: no limit.
    public var availableMemoryBytes: Int?
    /// What a limit of the farm's own process (`ulimit -v`, `ulimit -d`) leaves it for itself
    /// (``SystemResources/availableMemory(startingThreads:)`` for ``WorkerThreads/farm(jobs:cores:)``);
    /// nil when no limit bounds it. Its jobs' processes inherit the limit and check it themselves.
    public var processMemory: AvailableMemory?

    /// Settings with every default.
    public init(outputDirectory: URL, concurrentJobs: Int, executable: URL, environment: [String: String]) {
        self.outputDirectory = outputDirectory
        self.concurrentJobs = concurrentJobs
        self.executable = executable
        self.environment = environment
    }

    /// As many jobs as cores; memory is shared by the exports' forecasts (``MemoryBudget``).
    public static func defaultConcurrentJobs() -> Int { SystemResources.activeCores }
}

/// Runs a farm: plans every job, skips the unchanged ones, exports the others in isolated
/// child processes N at a time, and writes the report. See `docs/FARM.md`.
public struct FarmRunner {
    /// The farm.
    public let farm: FarmFile
    /// Resolves models for planning (keys and costs).
    public let resolver: ModelResolver
    /// How to run.
    public let settings: FarmSettings
    /// The memory the running exports hold.
    public let memory: MemoryBudget
    /// Each job's plan, made once: sharding, the refusals before running and the run all need it.
    private let plans = PlanCache()

    /// The environment variable carrying the farm's process id to its jobs, which end with it.
    public static let parentEnvironmentKey = "EXPORTER_PARENT_PID"

    /// A runner.
    public init(farm: FarmFile, resolver: ModelResolver, settings: FarmSettings) {
        self.farm = farm
        self.resolver = resolver
        self.settings = settings
        memory = MemoryBudget(capacity: settings.availableMemoryBytes)
    }

    /// The export options of a job, as the child process will see them.
    func options(of job: FarmJob) -> ExportOptions {
        let folder = farm.path.deletingLastPathComponent()
        let arguments = job.exportArguments(outputDirectory: settings.outputDirectory, farmDirectory: folder)
        var options = ExportOptions(model: arguments[0])
        // As the child export takes it, run in the farm file's folder: not from this process's.
        options.modelBaseDirectory = folder
        options.platform = job.platform
        options.contextLength = job.context
        options.computePrecision = job.computePrecision
        if let name = job.compression { options.compression = .named(name) }
        if let file = job.compressionConfig {
            options.compression = .file(URL.resolvingFilePath(file, from: folder))
        }
        options.experimental = job.experimental
        options.presetOverride = job.preset
        options.quantizeIOSEmbedding = !job.disableEmbeddingQuantizationIOS
        options.outputName = job.outputName
        options.paletteSearch = job.paletteSearch
        return options
    }

    /// The job's plan, made on first use (from its config and safetensors headers).
    /// - Throws: what `ExportPlan.make` throws for it, every time it is asked.
    func plan(of job: FarmJob) throws -> ExportPlan {
        try plans.plan(named: job.name) { try ExportPlan.make(options: options(of: job), resolver: resolver) }
    }

    /// The report file of this run: `farm-report.json`, or `farm-report-shard-I-of-N.json`.
    public var reportURL: URL {
        guard let shard = settings.shard else {
            return settings.outputDirectory.appendingPathComponent("farm-report.json")
        }
        return settings.outputDirectory.appendingPathComponent(
            "farm-report-shard-\(shard.index)-of-\(shard.count).json")
    }

    /// Runs the farm (or its shard) and writes the report.
    /// - Parameter log: a line per job as it ends, and the run's notices (``FarmMessage``).
    /// - Throws: `FarmError.locked` when another run holds the folder; `ResourceError.cannotStartThread`
    ///   when the threads of the jobs running at once cannot be started, `.notEnoughMemoryFor` when a
    ///   limit of the process leaves the farm too little memory for itself; job failures are in the report.
    public func run(log: @escaping (FarmMessage) -> Void = { _ in }) throws -> FarmReport {
        // A failure removes the folders made before it, as an export's does.
        do {
            try ArtifactDirectory.makeDirectories(settings.outputDirectory, faults: nil)
        } catch BundleError.writeFailed(_, let reason) {
            throw BundleError.writeFailed(path: settings.outputDirectory.path, reason: reason)
        }
        let lock = try FarmLock(directory: settings.outputDirectory, wait: settings.waitForLock, log: log)
        defer { lock.release() }
        removeLeftovers()
        // An earlier run's report goes first: a run killed before writing its own leaves none
        // that a CI step could mistake for this run's.
        if unlink(reportURL.path) != 0, errno != ENOENT {
            throw BundleError.writeFailed(path: reportURL.path, reason: OutputFile.errnoText())
        }
        let verified = VerifiedFiles(root: settings.outputDirectory, trusting: !settings.reverify)
        let jobs = settings.shard.map { shardJobs(index: $0.index, count: $0.count) } ?? farm.jobs
        // The threads of the jobs running at once: one that cannot be started would hang the
        // farm, not fail a job.
        try WorkerThreads.check(WorkerThreads.farm(jobs: min(jobs.count, max(1, settings.concurrentJobs))))
        let refusals = refusalsBeforeRunning()
        try checkProcessMemory()
        let collected = Collected(count: jobs.count)
        let slots = DispatchSemaphore(value: max(1, settings.concurrentJobs))
        let group = DispatchGroup()
        for (index, job) in jobs.enumerated() {
            slots.wait()
            group.enter()
            DispatchQueue.global().async {
                let start = Date()
                var waitedForMemory: TimeInterval = 0
                let result = self.reported(
                    refusals[job.name].map {
                        FarmJobResult(
                            name: job.name, status: "failed", bundle: nil, bundleBytes: nil, buildKey: nil, error: $0,
                            exitStatus: ExitStatus.badInput.rawValue)
                    } ?? self.run(job, verified: verified, log: log, waitedForMemory: &waitedForMemory))
                // The job's own time: not its wait for a slot (before `start`), nor for the memory
                // other jobs' exports held (each wait is said on standard error).
                let elapsed = ((Date().timeIntervalSince(start) - waitedForMemory) * 100).rounded() / 100
                collected.record(index: index, name: job.name, result: result, seconds: elapsed)
                log(.jobEnded("\(job.name): \(result.status)" + (result.error.map { " — \($0)" } ?? "")))
                slots.signal()
                group.leave()
            }
        }
        group.wait()
        do {
            try verified.save()
        } catch {
            // Only the next run's speed depends on it: it reads the artifacts in full again.
            log(.notice("warning: \(error)"))
        }
        let report = FarmReport(
            farm: reportedFarmName, farmDigest: farmDigest(), runID: settings.runID,
            shard: settings.shard.map { "\($0.index)/\($0.count)" }, jobs: collected.results.compactMap { $0 },
            seconds: collected.seconds)
        try FarmRunner.writeAtomically(try report.canonicalJSON(), to: reportURL)
        return report
    }

    /// What the farm's own process takes at its peak beyond what it held when the farm file was
    /// read, its threads' stacks apart: 48 MiB (its report's and record's write buffers, the
    /// allocator's and the runtime's; four small jobs took 16 MiB) and, per tensor of every job
    /// planned, what a plan holds of it (``ConversionMemoryEstimate/bytesPerTensor``).
    func processMemoryForecast() -> Int {
        let tensors = farm.jobs.compactMap { try? plan(of: $0) }.map(\.tensors.count).saturatingSum
        return (48 << 20).saturatingAdding([tensors, ConversionMemoryEstimate.bytesPerTensor].saturatingProduct)
    }

    /// Refuses to run when a limit of the farm's own process leaves it less than
    /// ``processMemoryForecast()``: the farm would abort on an allocation, its report unwritten.
    /// - Throws: `ResourceError.notEnoughMemoryFor(.farm, …)`.
    private func checkProcessMemory() throws {
        guard let available = settings.processMemory else { return }
        let needed = processMemoryForecast()
        guard needed > available.bytes else { return }
        throw ResourceError.notEnoughMemoryFor(
            .farm, neededBytes: needed, availableBytes: available.bytes, limit: available.limit)
    }

    /// The device table a job's devices compile with: the shipped one, extended by the job's
    /// `device_table` (relative to the farm file), as `exporter compile --devices` extends it.
    /// - Throws: `CompileError` for either file.
    func deviceTable(of job: FarmJob) throws -> DeviceTable {
        try DeviceTable.load(presetsDirectory: resolver.catalog.directory, extra: deviceTableURL(of: job))
    }

    /// The job's `device_table`, resolved against the farm file's folder.
    func deviceTableURL(of job: FarmJob) -> URL? {
        job.deviceTable.map {
            URL.resolvingFilePath($0, from: farm.path.deletingLastPathComponent())
        }
    }

    /// Why jobs fail before they run, by name: a device table that cannot be read, or a device it
    /// does not offer for the job's platform (found before the export, not after it), or a bundle
    /// an earlier job of the farm file (in any shard) already writes, where both would report
    /// `built` while one overwrote the other.
    func refusalsBeforeRunning() -> [String: String] {
        var owners: [String: (job: String, bundle: String)] = [:]
        var collisions: [String: String] = [:]
        for job in farm.jobs {
            if !job.devices.isEmpty {
                // A table that cannot be read is the job's device_table's fault; a device it lacks, its devices'.
                let table: DeviceTable
                do { table = try deviceTable(of: job) } catch {
                    collisions[job.name] = "device_table: " + FarmRunner.reportText(error)
                    continue
                }
                do { _ = try FarmRunner.devices(job.devices, of: job.platform, in: table) } catch {
                    collisions[job.name] = "devices: " + FarmRunner.reportText(error)
                    continue
                }
            }
            // A job that cannot be planned fails on its own.
            guard let plan = try? plan(of: job) else { continue }
            let bundle = ExportRunner.bundleURL(for: plan, in: settings.outputDirectory)
            let relative = String(bundle.path.dropFirst(settings.outputDirectory.path.count + 1))
            // Case-insensitively: on macOS's usual file system `M.aimodel` and `m.aimodel` are one folder.
            let key = FileSystemName.key(relative)
            if let owner = owners[key] {
                // Named as the earlier job writes it, which is the folder on disk.
                let spelling =
                    owner.bundle == relative
                    ? "" : "; this job's '\(relative)' is that folder where file names ignore case"
                collisions[job.name] =
                    "writes the same bundle as job '\(owner.job)' ('\(owner.bundle)'\(spelling)); give one of them "
                    + "another 'output_name'"
            } else {
                owners[key] = (job.name, relative)
            }
        }
        return collisions
    }

    /// The architectures of `ids` that the bundle of a job exporting for `platform` compiles for:
    /// a macOS bundle's are Macs; an iOS bundle's are iPhones and iPads and, as `exporter compile
    /// --platform visionOS` takes an iOS bundle, Apple Vision Pro (`h14g` in an iOS job).
    /// - Throws: what ``DeviceTable/select(_:platform:)`` throws, `FarmError.deviceOfOtherPlatform`
    ///   for a device that loads only the other platform's bundles.
    static func devices(_ ids: [String], of platform: Platform, in table: DeviceTable) throws -> [DeviceArchitecture] {
        try ids.flatMap { id -> [DeviceArchitecture] in
            do {
                return try table.select([id], platform: platform == .macOS ? .macOS : .iOS)
            } catch CompileError.architectureOnOtherPlatform(let id, let other, _) {
                guard other.bundlePlatform == platform else {
                    throw FarmError.deviceOfOtherPlatform(id: id, devicePlatform: other, jobPlatform: platform)
                }
                return try table.select([id], platform: other)
            } catch CompileError.unknownArchitecture(let id, let requested, let known) {
                // The job takes the other platforms' devices that load its bundle too: named with theirs.
                let others = table.devices.filter { $0.platform != requested && $0.platform.bundlePlatform == platform }
                throw CompileError.unknownArchitecture(
                    id: id, platform: requested, known: known + others.map { "\($0.id) (\($0.platform.rawValue))" })
            }
        }
    }

    /// Results gathered from concurrent jobs.
    private final class Collected: @unchecked Sendable {
        private let lock = NSLock()
        private(set) var results: [FarmJobResult?]
        private(set) var seconds: [String: Double] = [:]

        init(count: Int) { results = Array(repeating: nil, count: count) }

        func record(index: Int, name: String, result: FarmJobResult, seconds elapsed: Double) {
            lock.withLock {
                results[index] = result
                seconds[name] = elapsed
            }
        }
    }

    /// Plans the job, skips its export when its bundle is current and as the farm wrote it
    /// (``currentBundle(at:buildKey:verified:)``), else exports it in a child process once its
    /// conversion forecast fits in ``memory`` beside the running exports' (and the exports that
    /// asked first have started); then its devices.
    /// - Parameter waitedForMemory: set to the seconds it waited for memory, which are not the job's time.
    func run(
        _ job: FarmJob, verified: VerifiedFiles, log: (FarmMessage) -> Void, waitedForMemory: inout TimeInterval
    ) -> FarmJobResult {
        var result = FarmJobResult(
            name: job.name, status: "failed", bundle: nil, bundleBytes: nil, buildKey: nil, error: nil, exitStatus: 0)
        let plan: ExportPlan
        let synthetic: Bool
        let buildKey: String
        do {
            plan = try self.plan(of: job)
            synthetic =
                job.synthetic == .always
                || (job.synthetic == .ifMissing && plan.model.source.weightsAbsent)
            buildKey = try expectedKey(of: job, plan: plan, synthetic: synthetic)
            result.buildKey = buildKey
        } catch {
            // A relative model not found beside the farm file was taken as a preset or an id.
            let folder = farm.path.deletingLastPathComponent()
            let asWritten = !job.model.hasPrefix("/") && job.modelArgument(farmDirectory: folder) == job.model
            let (message, status) = FarmRunner.planningFailure(error, farmDirectory: asWritten ? folder : nil)
            result.error = message
            result.exitStatus = status
            return result
        }
        // A preset whose cache folder holds no snapshot to read: the export's refusal, never
        // generated weights, whatever "synthetic" says (a half-finished download is not a model
        // that is not here).
        if !synthetic, case .presetConfigOnly(let repoID, let cacheProblem?) = plan.model.source {
            let refusal = ExportError.noSnapshot(model: job.model, repoID: repoID, reason: cacheProblem)
            result.error = FarmRunner.reportText(lines: refusal.descriptionLines)
            result.exitStatus = refusal.exitStatus.rawValue
            return result
        }
        // A preset whose weights are not here: what the export would refuse, with what the farm file can do.
        if !synthetic, case .presetConfigOnly(let repoID, nil) = plan.model.source {
            result.error = FarmRunner.reportText(lines: [
                "no weights for '\(job.model)' on this machine (looked in \(resolver.cacheDescription(repoID))); "
                    + "download them (huggingface-cli download \(repoID)), or set \"synthetic\" to \"if-missing\" "
                    + "or true to export generated weights"
            ])
            result.exitStatus = ExitStatus.notFound.rawValue
            return result
        }
        let bundle = ExportRunner.bundleURL(for: plan, in: settings.outputDirectory)
        let relative = String(bundle.path.dropFirst(settings.outputDirectory.path.count + 1))
        if !settings.force, let reader = currentBundle(at: bundle, buildKey: buildKey, verified: verified) {
            result.status = "skipped"
            result.bundleStatus = "skipped"
            result.bundle = relative
            result.bundleBytes = reader.manifest.sizes.bundleBytes
            result.devices = compile(
                job, bundle: bundle, manifest: reader.manifest,
                manifestCRC32: VerifiedFiles.ManifestStamp(reader.manifestData).crc32, verified: verified)
            if result.devices.contains(where: { $0.status == "built" }) { result.status = "built" }
            result.includeDeviceFailures()
            return result
        }
        if let reason = rebuildReason(at: bundle, buildKey: buildKey, verified: verified) {
            log(.notice("\(job.name): building '\(relative)' again: \(reason)"))
        }
        let arguments =
            job.exportArguments(
                outputDirectory: settings.outputDirectory, farmDirectory: farm.path.deletingLastPathComponent(),
                synthetic: synthetic) + ["--overwrite"]
        let forecast =
            ExportRunner.conversionForecast(plan, synthetic: synthetic, allowClamp: job.allowClamp, availableBytes: nil)
            .peakBytes
        let asked = Date()
        memory.hold(forecast, label: job.name) { wait in
            log(
                .notice(
                    FarmRunner.memoryWaitText(job: job.name, forecast: forecast, wait: wait, capacity: memory.capacity))
            )
        }
        waitedForMemory = Date().timeIntervalSince(asked)
        let (status, errorText) = runChild(arguments)
        memory.release(forecast)
        guard status == 0 else {
            result.exitStatus = status
            result.error = errorText.isEmpty ? "the export exited with status \(status)" : errorText
            return result
        }
        guard let reader = try? BundleReader(url: bundle, verifyFiles: false) else {
            result.exitStatus = ExitStatus.internalError.rawValue
            result.error = "the export succeeded but '\(relative)' cannot be read"
            return result
        }
        verified.record(manifest: reader.manifestData, of: bundle)
        result.status = "built"
        result.bundleStatus = "built"
        result.bundle = relative
        result.bundleBytes = reader.manifest.sizes.bundleBytes
        result.buildKey = reader.manifest.buildKey
        result.devices = compile(
            job, bundle: bundle, manifest: reader.manifest,
            manifestCRC32: VerifiedFiles.ManifestStamp(reader.manifestData).crc32, verified: verified)
        result.includeDeviceFailures()
        return result
    }

    /// Compiles the job's bundle for each of its devices whose artifact is missing, invalid or
    /// built from other inputs (another bundle, another device entry): a new device compiles,
    /// nothing is re-exported. A failed device has no artifact, its error and the exit status
    /// of its compile (or the one a compile would refuse it with).
    /// - Parameter manifestCRC32: the CRC-32 of the bundle's `manifest.json`, which its compiled
    ///   artifacts record.
    func compile(
        _ job: FarmJob, bundle: URL, manifest: Manifest, manifestCRC32: String, verified: VerifiedFiles
    ) -> [FarmDeviceResult] {
        guard !job.devices.isEmpty else { return [] }
        func failed(_ id: String, _ error: Error) -> FarmDeviceResult {
            FarmDeviceResult(
                device: id, status: "failed", error: FarmRunner.reportText(error),
                exitStatus: (error as? ExporterError)?.exitStatus.rawValue ?? ExitStatus.internalError.rawValue)
        }
        let table: DeviceTable
        do {
            table = try deviceTable(of: job)
        } catch {
            return job.devices.map { failed($0, error) }
        }
        let folder = bundle.deletingLastPathComponent()
        let name = bundle.deletingPathExtension().lastPathComponent
        return job.devices.map { id in
            let device: DeviceArchitecture
            do {
                guard let found = try FarmRunner.devices([id], of: job.platform, in: table).first else {
                    throw CompileError.unknownArchitecture(
                        id: id, platform: job.platform == .macOS ? .macOS : .iOS, known: table.devices.map(\.id))
                }
                device = found
            } catch {
                return failed(id, error)
            }
            // The table's spelling: the artifact's name and the report's agree whatever the farm file's case.
            var result = FarmDeviceResult(device: device.id, status: "failed")
            let artifact = Compiler.artifactURL(name: name, device: device, in: folder)
            let relative = String(artifact.path.dropFirst(settings.outputDirectory.path.count + 1))
            // The M2's id names a Mac and the Vision Pro: a job's folder holds one platform's.
            do {
                try Compiler.refuseOtherPlatform(artifact, platform: device.platform)
            } catch let error as CompileError {
                result.exitStatus = error.exitStatus.rawValue
                guard case .artifactOfOtherPlatform(_, let found, _) = error else {
                    result.error = FarmRunner.reportText(error)
                    return result
                }
                // The platform is read from the manifest found there: escaped as any text of an input.
                result.error = Format.escaped(
                    "'\(relative)' is a \(found) artifact of the same architecture id, from another job or an "
                        + "earlier platform of this one: give this job another 'output_name'")
                return result
            } catch {
                return failed(device.id, error)
            }
            let expected = manifest.buildKey.map {
                BuildKey.compiled(
                    bundleKey: $0, device: device, minimumDeploymentVersion: DeploymentVersion.minimum.description)
            }
            if !settings.force, let expected,
                let reader = currentCompiled(
                    at: artifact, buildKey: expected, bundleManifestCRC32: manifestCRC32, verified: verified),
                let verdict = reader.manifest.compiled?.verdict
            {
                result.status = "skipped"
                result.artifact = relative
                result.memory = verdict.memory.rawValue
                result.neuralEngine = verdict.neuralEngine.rawValue
                return result
            }
            let table = deviceTableURL(of: job).map { ["--devices", $0.path] } ?? []
            let (status, errorText) = runChild(
                [
                    "compile", bundle.path, "--platform", device.platform.rawValue, "--device", device.id, "--output",
                    folder.path, "--overwrite",
                ] + table, step: "compile")
            guard status == 0 else {
                result.exitStatus = status
                result.error = errorText.isEmpty ? "the compile exited with status \(status)" : errorText
                return result
            }
            guard let reader = try? CompiledArtifactReader(url: artifact, verifyFiles: false),
                let verdict = reader.manifest.compiled?.verdict,
                FarmRunner.recordManifest(of: artifact, in: verified)
            else {
                result.exitStatus = ExitStatus.internalError.rawValue
                result.error = "the compile succeeded but '\(relative)' cannot be read"
                return result
            }
            result.status = "built"
            result.artifact = relative
            result.memory = verdict.memory.rawValue
            result.neuralEngine = verdict.neuralEngine.rawValue
            return result
        }
    }

    /// The key the job's bundle will have: the same computation as the export's.
    func expectedKey(of job: FarmJob, plan: ExportPlan, synthetic: Bool) throws -> String {
        var fingerprints: [(name: String, fingerprint: String)] = []
        if !synthetic, let directory = plan.model.source.checkpointDirectory {
            let weights = try ExportRunner.openWeights(
                plan, directory: directory, containmentRoot: plan.model.source.containmentRoot)
            fingerprints = try ExportRunner.inputFingerprints(directory: directory, weights: weights)
        }
        return BuildKey.export(
            plan: plan, fileFingerprints: fingerprints, syntheticSeed: synthetic ? job.seed : nil,
            allowClamp: job.allowClamp)
    }

    /// Runs the exporter with `arguments` (``ChildProcess``: a clean signal mask, so a job stops
    /// on SIGTERM like an export run alone); returns its status (128 + N when signal N killed
    /// it) and the last lines of its standard error.
    /// - Parameter step: `export` or `compile`, for the message of a killed child.
    private func runChild(_ arguments: [String], step: String = "export") -> (Int32, String) {
        var environment = settings.environment
        environment[FarmRunner.parentEnvironmentKey] = String(getpid())
        let child: ChildProcess
        do {
            // In the farm file's folder: a relative model the farm did not find there is looked for
            // as a preset or an id, as the farm's own plan did, never in the farm's current folder.
            child = try ChildProcess.start(
                settings.executable, arguments: arguments, environment: environment,
                directory: farm.path.deletingLastPathComponent())
        } catch {
            return (
                ExitStatus.internalError.rawValue,
                Format.escaped("cannot start '\(settings.executable.path)': \(error)")
            )
        }
        let (status, signal, errorBytes) = child.finish()
        if let signal { return (status, "the \(step) was killed by signal \(signal)") }
        return (status, FarmRunner.childMessage(errorBytes))
    }

    /// Staging folders of killed runs (`.partial-*` beside artifacts) that no process holds
    /// (an export outside the farm may be writing into the same folder), and the temporary
    /// files of an interrupted report or record write, which only a farm run holding the lock writes.
    private func removeLeftovers() {
        let manager = FileManager.default
        guard let jobFolders = try? manager.contentsOfDirectory(atPath: settings.outputDirectory.path) else { return }
        ArtifactDirectory.removeAbandonedStaging(in: settings.outputDirectory)
        for folder in jobFolders {
            let url = settings.outputDirectory.appendingPathComponent(folder)
            // `..farm-verified.json.<uuid>` up to 0.8.3.
            if folder.hasPrefix(".farm-report") || folder.hasPrefix(VerifiedFiles.fileName + ".")
                || folder.hasPrefix("." + VerifiedFiles.fileName + ".")
            {
                try? manager.removeItem(at: url)
                continue
            }
            guard !folder.hasPrefix(ArtifactDirectory.stagingPrefix) else { continue }
            ArtifactDirectory.removeAbandonedStaging(in: url)
        }
    }

    /// The temporary file `url` is written as before it is renamed into place: hidden, beside it,
    /// `.<name>.<unique>` (`.farm-verified.json.<unique>` for a hidden one: never two dots).
    static func temporaryURL(for url: URL, unique: String = UniqueName.make()) -> URL {
        let name = url.lastPathComponent
        return url.deletingLastPathComponent().appendingPathComponent(
            (name.hasPrefix(".") ? name : "." + name) + "." + unique)
    }

    /// Writes `bytes` to a temporary file beside `url` (``temporaryURL(for:unique:)``), then
    /// renames it over `url`.
    /// - Throws: `BundleError.writeFailed` naming `url`.
    static func writeAtomically(_ bytes: [UInt8], to url: URL) throws {
        let temporary = temporaryURL(for: url)
        let (file, cleanupToken) = try InterruptCleanup.registering {
            (try OutputFile(url: temporary, reportedPath: url.path), InterruptCleanup.register(temporary))
        }
        defer { InterruptCleanup.unregister(cleanupToken) }
        do {
            try file.write(bytes)
            try file.finish()
            // rename(2) replaces the destination atomically: readers see the old or the new report.
            guard rename(temporary.path, url.path) == 0 else {
                throw BundleError.writeFailed(path: url.path, reason: OutputFile.errnoText())
            }
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            if let error = error as? BundleError { throw error }
            throw BundleError.writeFailed(path: url.path, reason: fileSystemFailureReason(error))
        }
    }
}

/// An exclusive lock on a farm's output folder (`flock` on `.farm.lock`): released by the
/// kernel when the process ends, even by SIGKILL, so a killed run never blocks the next.
final class FarmLock {
    private let descriptor: Int32

    init(directory: URL, wait: Bool, log: (FarmMessage) -> Void) throws {
        let path = directory.appendingPathComponent(".farm.lock").path
        descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o666)
        guard descriptor >= 0 else { throw BundleError.writeFailed(path: path, reason: OutputFile.errnoText()) }
        if flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            var holder = [UInt8](repeating: 0, count: 64)
            let count = pread(descriptor, &holder, 64, 0)
            let text = count > 0 ? String(decoding: holder.prefix(count), as: UTF8.self) : "unknown process"
            guard wait else {
                close(descriptor)
                throw FarmError.locked(path: directory.path, holder: text)
            }
            log(.notice("waiting for another farm run (\(text)) to release '\(directory.path)'"))
            guard flock(descriptor, LOCK_EX) == 0 else {
                close(descriptor)
                throw FarmError.locked(path: directory.path, holder: text)
            }
        }
        let holder = Array("pid \(getpid())".utf8)
        _ = ftruncate(descriptor, 0)
        _ = pwrite(descriptor, holder, holder.count, 0)
    }

    func release() {
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }
}

/// Plans by job name (unique in a farm file), each made once whichever thread asks first.
private final class PlanCache: @unchecked Sendable {
    private let lock = NSLock()
    private var plans: [String: Result<ExportPlan, Error>] = [:]

    func plan(named name: String, make: () throws -> ExportPlan) throws -> ExportPlan {
        try lock.withLock {
            if let made = plans[name] { return made }
            let made = Result { try make() }
            plans[name] = made
            return made
        }.get()
    }
}
