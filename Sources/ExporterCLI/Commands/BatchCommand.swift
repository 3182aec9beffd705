import ExporterKit
import Foundation

/// `exporter batch <farm.json>`: many exports on a build farm, incremental and shardable.
enum BatchCommand {
    static let spec = CommandSpec(
        name: "batch",
        abstract: "Run a farm file's jobs: incremental, isolated, shardable across machines.",
        discussion: "Each job runs as its own 'exporter' process, N at a time. A job whose inputs are unchanged "
            + "(same build key) and whose artifacts are as the farm wrote them (the same manifest.json, no file it "
            + "does not list, its files read in full once, then trusted while unchanged) is skipped. The run ends "
            + "with a table and <output>/farm-report.json; the exit status is non-zero if any job failed, its "
            + "export or a device. See docs/FARM.md.",
        arguments: [
            .positional("farm", help: "The farm file (JSON, schema exporter.farm/1)."),
            .option("jobs", valueName: "n", help: "Jobs at once (default: cores; exports wait while memory is short)."),
            .option("output", valueName: "dir", defaultValue: "Artifacts", help: "Where every job's artifacts go."),
            .flag("force", help: "Rebuild every job, even unchanged ones."),
            .flag(
                "reverify",
                help: "Read every existing artifact in full to check it, even files earlier runs read and that "
                    + "have not changed since (size, times, inode: <output>/.farm-verified.json)."),
            .option("shard", valueName: "i/n", help: "Run only shard i of n (balanced by estimated cost)."),
            .flag("matrix", help: "Print the shard list as a CI matrix (JSON) and exit."),
            .option(
                "shards", valueName: "n", defaultValue: "4",
                help: "Shards in --matrix (at most one per job: a farm of fewer jobs gets one shard per job)."),
            .flag(
                "collect",
                help: "Merge the shard reports in the output folder into farm-report.json (removed when this fails): "
                    + "only reports of the farm as it is now and of one run, every shard's."),
            .option(
                "run-id", valueName: "id",
                help: "Name this run in its report (a CI run's id, for every shard); --collect merges only that "
                    + "run's shard reports."),
            .flag("wait", help: "Wait for another farm run on the same output folder instead of giving up."),
            .flag("json", help: "Print the report as JSON."),
        ])

    /// The most `--jobs` and `--shards` take: far beyond any farm, and said in the message of a
    /// larger number (which "a positive integer" would not explain).
    static let largestCount = 1_000_000

    /// Options of a run that `--matrix` (which prints the split and exits) and `--collect` (which
    /// merges reports) would ignore.
    static let runOptions = ["shard", "jobs", "force", "reverify", "wait"]

    /// Refuses options that conflict or would do nothing, as usage errors, before the farm file is read.
    /// - Throws: `UsageError.validation`.
    static func validate(_ arguments: ParsedArguments) throws {
        if arguments.flag("matrix") {
            if arguments.flag("collect") {
                throw UsageError.validation("--matrix and --collect cannot be used together")
            }
            for option in runOptions + ["output", "json", "run-id"] where arguments.isGiven(option) {
                throw UsageError.validation("--\(option) does not apply to --matrix, which only prints the shard list")
            }
        } else if arguments.isGiven("shards") {
            throw UsageError.validation("--shards applies to --matrix; pass --matrix too")
        }
        if arguments.flag("collect") {
            // --wait does apply: a collect waits for a shard still running in the folder.
            for option in runOptions where option != "wait" && arguments.isGiven(option) {
                throw UsageError.validation(
                    "--\(option) does not apply to --collect, which merges every shard's report without running jobs")
            }
        }
    }

    static func run(_ arguments: ParsedArguments, context: CommandContext) throws -> ExitStatus {
        guard let farmPath = arguments.positional(0) else { throw UsageError.missingArgument("farm") }
        try validate(arguments)
        // Every option's value is checked before the farm file is read, as every command checks
        // its usage first: a bad --jobs is 64 whether or not the farm file is there.
        let output = context.fileURL(arguments.value("output") ?? "Artifacts")
        let shardCount = try arguments.int("shards", range: 1...BatchCommand.largestCount) ?? 4
        var settings = FarmSettings(
            outputDirectory: output,
            concurrentJobs: try arguments.int("jobs", range: 1...BatchCommand.largestCount)
                ?? FarmSettings.defaultConcurrentJobs(),
            executable: context.executable, environment: context.environment)
        settings.availableMemoryBytes = context.availableMemoryBytes()
        settings.force = arguments.flag("force")
        settings.reverify = arguments.flag("reverify")
        settings.waitForLock = arguments.flag("wait")
        if let id = arguments.value("run-id") {
            // It is printed in messages and compared across machines: printable, and short.
            guard !id.isEmpty, id.utf8.count <= 128, !id.unicodeScalars.contains(where: \.isControlCharacter) else {
                throw UsageError.invalidValue(
                    value: id, option: "--run-id", expected: "1 to 128 bytes without control characters")
            }
            settings.runID = id
        }
        if let text = arguments.value("shard") {
            // Digits only on either side of one '/': Int() alone takes "+1", split() skips "1//2".
            let parts = text.split(separator: "/", omittingEmptySubsequences: false)
                .map { $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) ? Int($0) : nil }
            guard parts.count == 2, let index = parts[0], let count = parts[1], count >= 1, (1...count).contains(index)
            else {
                throw FarmError.invalidShard(text)
            }
            settings.shard = (index, count)
        }
        let farm = try FarmFile(contentsOf: context.fileURL(farmPath))
        // The farm's own process, bound only by its own limits: the machine's memory is its jobs' budget.
        let own = context.availableMemory(
            startingThreads: WorkerThreads.farm(jobs: min(farm.jobs.count, settings.concurrentJobs)))
        settings.processMemory = own?.limit == nil ? nil : own
        let resolver = try context.resolver()
        settings.environment = jobEnvironment(context, presets: resolver.catalog.directory)
        let runner = FarmRunner(farm: farm, resolver: resolver, settings: settings)
        // What the farm file and the presets decide is refused before anything runs, as the farm file's own errors.
        try farm.check(against: runner.resolver.catalog)
        if arguments.flag("matrix") {
            // At most one shard per job, so that no CI machine starts for nothing: the split of
            // N jobs into more shards would leave the extra ones empty.
            let total = min(shardCount, farm.jobs.count)
            let shards = (1...total).map { index -> JSONValue in
                .object(
                    JSONObject([
                        ("shard", .string("\(index)/\(total)")),
                        ("jobs", .array(runner.shardJobs(index: index, count: total).map { .string($0.name) })),
                    ]))
            }
            context.writeOutput(JSONWriter.string(.object(JSONObject([("include", .array(shards))]))))
            return .success
        }
        // A job's end is progress, for a terminal only; a notice (a wait, a report left aside, a
        // warning) is printed wherever standard error goes. A job's error may span lines (the
        // child's message): each is printed, escaped, on its own.
        let say = { (message: FarmMessage) in
            if case .jobEnded = message, !context.errorIsTerminal { return }
            for line in message.text.split(separator: "\n") { context.printError(String(line)) }
        }
        let report = try arguments.flag("collect") ? runner.collect(log: say) : runner.run(log: say)
        if arguments.flag("json") {
            context.writeOutput(String(decoding: try report.canonicalJSON(), as: UTF8.self))
        } else {
            var rows = [["job", "status", "time", "bundle", "verdicts or error"]]
            for job in report.jobs {
                let detail = job.error.map(oneLine) ?? job.devices.map(verdictText).joined(separator: ", ")
                rows.append([
                    job.name, job.status, report.seconds[job.name].map { Format.decimal($0, places: 1) + " s" } ?? "-",
                    job.bundleBytes.map(Format.megabytes) ?? "-", detail,
                ])
            }
            context.print(lines: Format.table(rows, rightAligned: [2, 3]))
            let written =
                arguments.flag("collect")
                ? settings.outputDirectory.appendingPathComponent("farm-report.json") : runner.reportURL
            context.print("report: \(written.path)")
        }
        if report.failedCount > 0 { throw FarmError.jobsFailed(count: report.failedCount, total: report.jobs.count) }
        return .success
    }

    /// The environment of the farm's jobs, which run in the farm file's folder: this process's,
    /// with the presets and the Hugging Face cache the farm reads named by absolute paths, so that
    /// a job reads the same ones (a relative `EXPORTER_PRESETS` or `HF_HOME` would be taken from
    /// the farm file's folder, and a `Presets/` found from the current folder would be missed).
    static func jobEnvironment(_ context: CommandContext, presets: URL) -> [String: String] {
        var environment = context.environment
        environment["EXPORTER_PRESETS"] = presets.path
        environment["HF_HUB_CACHE"] = HuggingFaceCache(environment: context.environment).hubDirectory.path
        return environment
    }

    /// `h17p fits`, `h17p needs-entitlement (ANE over budget)`.
    static func verdictText(_ device: FarmDeviceResult) -> String {
        let memory: String = device.memory ?? device.status
        let overBudget = device.neuralEngine == NeuralEngineVerdict.regionsOverBudget.rawValue
        return device.device + " " + memory + (overBudget ? " (ANE over budget)" : "")
    }

    /// A report's error on the one line of a table row: its lines (a refusal's list of what was
    /// tried, of what to do) each trimmed, joined by spaces, so that none is lost.
    static func oneLine(_ text: String) -> String {
        text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            .joined(separator: " ")
    }
}
