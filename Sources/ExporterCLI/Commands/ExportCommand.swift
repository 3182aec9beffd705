import ExporterKit
import Foundation

/// `exporter <model>`: the main job; the root command of the tool.
enum ExportCommand {
    static let spec = CommandSpec(
        name: "exporter",
        abstract: "Turn a Hugging Face LLM checkpoint into a shippable on-device artifact.",
        discussion: "Resolves the model (a checkpoint folder, a preset name, or an 'org/model' id in the local "
            + "Hugging Face cache), checks the registry, palettises the weights and writes "
            + "<output-dir>/<name>/<Name>.aimodel with its manifest.",
        version: ToolVersion.current,
        arguments: [
            .positional("model", isRequired: false, help: "A checkpoint folder, a preset name or an 'org/model' id.")
        ]
            + ExportArguments.specs + ExportArguments.writeSpecs + [
                .flag("dry-run", help: "Show the plan and write nothing (same as 'exporter plan')."),
                .flag("tensors", help: "With --dry-run: list every tensor."),
                .flag(
                    "json",
                    help: "Print JSON: the plan with --dry-run, the list, or what was written and its manifests."),
                .flag("list-models", help: "List the model families and presets."),
                .flag(
                    "list-presets",
                    help: "List the presets and the compression presets (configs) that --compression takes."),
            ],
        subcommands: [
            PlanCommand.spec, ListCommand.spec, SynthCommand.spec, CompileCommand.spec, BatchCommand.spec,
            InspectCommand.spec, VerifyCommand.spec, DiffCommand.spec, ConvertCommand.spec, EvalCommand.spec,
        ])

    static func run(_ arguments: ParsedArguments, context: CommandContext) throws -> ExitStatus {
        let json = arguments.flag("json")
        if arguments.flag("list-models") || arguments.flag("list-presets") {
            // Listing exports nothing: a model or an export option beside it would silently do nothing.
            if let model = arguments.positional(0) {
                throw UsageError.validation("--list-models and --list-presets take no model, got '\(model)'")
            }
            let listing: Set<String> = ["list-models", "list-presets", "json"]
            if let stray = arguments.occurrences.filter({ !listing.contains($0.key) }).values.compactMap(\.first)
                .map(\.spelling).sorted().first
            {
                throw UsageError.validation(
                    "\(stray) does not apply to --list-models and --list-presets, which export nothing")
            }
            // As in the reference tool, --list-presets shows what --compression takes.
            var sections: ListCommand.Sections = []
            if arguments.flag("list-models") { sections.formUnion([.families, .presets]) }
            if arguments.flag("list-presets") { sections.formUnion([.presets, .compression]) }
            return try ListCommand.show(sections, json: json, context: context)
        }
        guard let model = arguments.positional(0) else { throw UsageError.missingArgument("model") }
        if arguments.flag("dry-run") { return try PlanCommand.run(arguments, context: context) }
        if arguments.isGiven("tensors") { throw UsageError.validation("--tensors applies to --dry-run") }
        try refuseStrayDeploymentVersion(arguments)
        let options = try ExportArguments.options(from: arguments, model: model, context: context)
        let devices = try CompileCommand.deviceTable(arguments, context: context)
        let required = try FitGate.required(arguments, table: devices)
        let version = try CompileCommand.deploymentVersion(arguments)
        // Read before the threads are tried and anything is planned, as `plan` reads it: what the
        // process maps from here on is the forecast's to count.
        let availableMemory = context.availableMemory(startingThreads: WorkerThreads.export())
        try WorkerThreads.check(WorkerThreads.export())
        let plan = try ExportPlan.make(options: options, resolver: try context.resolver())
        let checked = try checkedBeforeExport(plan, arguments, devices: devices, context: context)
        let (compilePlatform, compileDevices, outputDirectory) = (
            checked.platform, checked.devices, checked.outputDirectory
        )
        try refuseOutputsInTheWay(
            plan, devices: compileDevices, platform: compilePlatform,
            mlpackage: arguments.value("format") == "mlpackage", outputDirectory: outputDirectory,
            overwrite: arguments.flag("overwrite"))
        let availableDisk = context.availableDiskBytes(at: outputDirectory)
        try checkDisk(
            plan, checked, tokenizer: try ExportRunner.tokenizer(of: plan, synthetic: arguments.flag("synthetic")),
            mlpackage: arguments.value("format") == "mlpackage", available: availableDisk)
        var settings = ExportSettings(outputDirectory: outputDirectory)
        settings.overwrite = arguments.flag("overwrite")
        settings.allowClamp = arguments.flag("allow-clamp")
        settings.calibrationTokens = checked.calibrationTokens
        settings.faults = context.faults
        settings.availableMemory = availableMemory
        settings.availableDiskBytes = availableDisk
        if arguments.flag("synthetic") {
            guard let seed = UInt64(arguments.value("seed") ?? "0") else {
                throw UsageError.invalidValue(
                    value: arguments.value("seed") ?? "", option: "--seed", expected: "a non-negative integer")
            }
            settings.syntheticSeed = seed
        }
        let bar = ProgressBar(context: context)
        let calibrationBar = ProgressBar(context: context)
        let result: ExportResult
        do {
            result = try ExportRunner.run(
                plan, settings: settings, warn: { context.printError("warning: \($0)") }, progress: bar.update,
                stepProgress: calibrationBar.update)
        } catch BundleError.outputExists(let path) {
            let differences = ExistingBundle.differences(at: URL(fileURLWithPath: path), plan: plan)
            throw ExistingBundle(
                path: path, differences: differences,
                followUps: differences.isEmpty
                    ? followUps(
                        forBundleAt: path, arguments, platform: compilePlatform, devices: compileDevices,
                        name: CompileSubject(plan: plan).name) : [])
        }
        // With --json, one report at the end; otherwise each step prints as it ends.
        let output: OutputStyle = json ? .none : .text
        if !json { context.print(lines: ExportSummary.lines(result)) }
        var compiled: [CompileResult] = []
        if arguments.flag("compile") {
            var request = CompileRequest(
                platform: compilePlatform, devices: compileDevices, minimumDeploymentVersion: version,
                outputDirectory: result.bundleURL.deletingLastPathComponent())
            request.overwrite = settings.overwrite
            request.deviceTable = CompileCommand.deviceTableURL(arguments, context: context)
            request.availableDiskBytes = context.availableDiskBytes(at: request.outputDirectory)
            compiled = try CompileCommand.compile(result.bundleURL, request: request, output: output, context: context)
        }
        var package: ConvertCommand.Written?
        if arguments.value("format") == "mlpackage" {
            let destination = MLPackageWriter.defaultDestination(forBundle: result.bundleURL)
            package = try ConvertCommand.write(
                bundle: result.bundleURL, to: destination, overwrite: settings.overwrite, output: output,
                context: context)
        }
        warnOfStaleSiblings(
            result.bundleURL, name: CompileSubject(plan: plan).name, deviceTable: arguments.value("devices"),
            context: context)
        if json {
            let report = ExportSummary.Report(
                bundle: result.bundleURL.path, manifest: result.manifest,
                compiled: compiled.map { ExportSummary.Report.Compiled(artifact: $0.url.path, manifest: $0.manifest) },
                mlpackage: package)
            context.writeOutput(try CanonicalJSON.string(report))
        }
        // The summary's memory is the portable bundle's; a device may need more (a compiled
        // artifact holds a second copy of a tied embedding for the head): without a compile step
        // or a fit gate to say it, the plan's warnings are said.
        let warnsOfFit = !arguments.flag("compile") && required.isEmpty
        // The plan's verdicts, planned only when used: a compiled artifact's is the same (the
        // same code plans both).
        let verdicts =
            warnsOfFit || !required.isEmpty ? CompilePlan.verdicts(for: CompileSubject(plan: plan), table: devices) : []
        if warnsOfFit {
            for warning in VerdictPrinter.warnings(verdicts) { context.printError("warning: \(warning)") }
        }
        return FitGate.status(
            FitGate.failures(verdicts, required: required),
            notes: FitGate.entitlementNotes(verdicts, required: required), context: context)
    }

    /// The bundle is there already: the refusal, then the commands that do the rest of this
    /// command line's work from that bundle (an interrupted `--compile` or `--format mlpackage`
    /// export is finished by them, not by running it again).
    /// When the bundle there is another export (other platform, precision, context or
    /// compression), no step is suggested from it: what differs is said instead.
    struct ExistingBundle: ExporterError {
        let path: String
        /// What of the bundle there differs from this command line's (`context 4096 there, 2048 asked`).
        var differences: [String] = []
        let followUps: [String]
        var description: String { descriptionLines.joined(separator: "\n") }
        var descriptionLines: [String] {
            [BundleError.outputExists(path: path).description]
                + (differences.isEmpty
                    ? [] : ["it holds another export than this one (\(differences.joined(separator: "; ")))"])
                + (followUps.isEmpty ? [] : ["or keep it and run the other steps from it:"])
                + followUps.map { "  " + $0 }
        }
        var exitStatus: ExitStatus { .outputExists }

        /// What the bundle at `url` records differently from what `plan` would export: platform,
        /// compute precision, context, compression config and the tool version that wrote it (an
        /// earlier version's bundle is not this export's); empty when they agree or it cannot be
        /// read (its own refusal then says what it is).
        static func differences(at url: URL, plan: ExportPlan) -> [String] {
            guard let there = try? LoadedArtifact(url: url).manifest else { return [] }
            let asked = Manifest(plan: plan, kind: "bundle")
            let fields = [
                ("platform", there.platform, asked.platform),
                ("compute precision", there.computePrecision, asked.computePrecision),
                ("context", String(there.contextLength), String(asked.contextLength)),
                ("compression", there.compression.config, asked.compression.config),
            ]
            let version =
                there.tool.version == asked.tool.version
                ? [] : ["written by exporter \(there.tool.version), this is \(asked.tool.version)"]
            return fields.filter { $0.1 != $0.2 }.map { "\($0.0) \($0.1) there, \($0.2) asked" } + version
        }
    }

    /// Warns of the compiled artifacts and Core ML package beside the bundle just written that
    /// were made from the bundle it replaced, and says how to bring them up to date: an export
    /// replaces its bundle only, and `verify` of such an artifact alone cannot tell. The command
    /// compiles each for the deployment version it was compiled for, with the export's device
    /// table (`--devices`), so that it makes what was there again.
    static func warnOfStaleSiblings(_ bundle: URL, name: String, deviceTable: String?, context: CommandContext) {
        let stale = StaleSiblings(ofBundle: bundle, name: name)
        let quoted = ShellWord.quoted(bundle.path)
        let table = deviceTable.map { " --devices \(ShellWord.quoted($0))" } ?? ""
        let groups = Set(stale.compiled.map { "\($0.platform) \($0.minimumDeploymentVersion)" }).sorted()
        for group in groups {
            let members = stale.compiled.filter { "\($0.platform) \($0.minimumDeploymentVersion)" == group }
            let (platform, version) = (members[0].platform, members[0].minimumDeploymentVersion)
            let architectures = members.map(\.architecture)
            let names = architectures.map { "'\(name).\($0).\(Compiler.artifactExtension)'" }.joined(separator: ", ")
            let deployment =
                version == DeploymentVersion.minimum.description ? "" : " --min-deployment-version \(version)"
            context.printError(
                "warning: \(names) \(architectures.count == 1 ? "was" : "were") compiled from the bundle this export "
                    + "replaced; to bring \(architectures.count == 1 ? "it" : "them") up to date: exporter compile "
                    + "\(quoted) --platform \(platform)" + architectures.map { " --device \($0)" }.joined()
                    + deployment + table + " --overwrite")
        }
        if let package = stale.package {
            context.printError(
                "warning: '\(package.lastPathComponent)' was converted from the bundle this export replaced; to bring it "
                    + "up to date: exporter convert \(quoted) --to mlpackage --overwrite")
        }
    }

    /// `exporter compile` and `exporter convert` command lines for the steps after the export
    /// that are not done: the compile of the `devices` whose artifacts (of `name`) are missing
    /// beside the bundle, the conversion when its package is missing. None when all are there.
    static func followUps(
        forBundleAt path: String, _ arguments: ParsedArguments, platform: DevicePlatform,
        devices: [DeviceArchitecture], name: String
    ) -> [String] {
        let bundle = URL(fileURLWithPath: path)
        var commands: [String] = []
        // Artifacts compiled or converted from another bundle (an earlier export there) are
        // made again, with --overwrite.
        let stale = StaleSiblings(ofBundle: bundle, name: name)
        let staleDevices = devices.filter { device in stale.compiled.contains { $0.architecture == device.id } }
        let toCompile = devices.filter { device in
            staleDevices.contains(device)
                || !FileManager.default.fileExists(
                    atPath: Compiler.artifactURL(name: name, device: device, in: bundle.deletingLastPathComponent())
                        .path)
        }
        if arguments.flag("compile"), !toCompile.isEmpty {
            var words = ["exporter compile \(ShellWord.quoted(path)) --platform \(platform.rawValue)"]
            if toCompile.count < devices.count { words += toCompile.map { "--device \($0.id)" } }
            if arguments.isGiven("min-deployment-version"), let version = arguments.value("min-deployment-version") {
                words.append("--min-deployment-version \(version)")
            }
            if let table = arguments.value("devices") { words.append("--devices \(ShellWord.quoted(table))") }
            if !staleDevices.isEmpty { words.append("--overwrite") }
            commands.append(words.joined(separator: " "))
        }
        if arguments.value("format") == "mlpackage" {
            if stale.package != nil {
                commands.append("exporter convert \(ShellWord.quoted(path)) --to mlpackage --overwrite")
            } else if !FileManager.default.fileExists(
                atPath: MLPackageWriter.defaultDestination(forBundle: bundle).path)
            {
                commands.append("exporter convert \(ShellWord.quoted(path)) --to mlpackage")
            }
        }
        return commands
    }

    /// What is already where this command line writes, refused before the export rather than
    /// after it: compiled artifacts of another platform; with `--overwrite`, anything that is
    /// not an artifact to replace (bundle, compiled artifacts, Core ML package); without it,
    /// compiled artifacts there for a bundle not yet exported; either way, another entry one name
    /// with any of them, or with the model's folder, where names ignore case and Unicode form. With the bundle there, the
    /// export's own refusal comes first and names the compile that finishes from it.
    static func refuseOutputsInTheWay(
        _ plan: ExportPlan, devices: [DeviceArchitecture], platform: DevicePlatform, mlpackage: Bool,
        outputDirectory: URL, overwrite: Bool
    ) throws {
        let bundle = ExportRunner.bundleURL(for: plan, in: outputDirectory)
        let name = CompileSubject(plan: plan).name
        let compiled = devices.map {
            Compiler.artifactURL(name: name, device: $0, in: bundle.deletingLastPathComponent())
        }
        // A name that is another's on a Mac (case, Unicode form) is refused whatever else is there.
        try ArtifactDirectory.checkNameClash(bundle.deletingLastPathComponent())
        for artifact in [bundle] + compiled + (mlpackage ? [MLPackageWriter.defaultDestination(forBundle: bundle)] : [])
        {
            try ArtifactDirectory.checkNameClash(artifact)
        }
        let there = compiled.filter { FileManager.default.fileExists(atPath: $0.path) }
        for artifact in there { try Compiler.refuseOtherPlatform(artifact, platform: platform) }
        if overwrite {
            for artifact in [bundle] + compiled {
                try ArtifactDirectory.checkDestination(artifact, overwrite: true, marker: BundleWriter.manifestName)
            }
            if mlpackage {
                try ArtifactDirectory.checkDestination(
                    MLPackageWriter.defaultDestination(forBundle: bundle), overwrite: true,
                    marker: MLPackageWriter.packageManifestPath)
            }
            return
        }
        guard !there.isEmpty, !FileManager.default.fileExists(atPath: bundle.path) else { return }
        throw CompileError.artifactsExist(
            paths: there.map(\.physicallyStandardized.path), bundle: bundle.physicallyStandardized.path,
            platform: platform,
            missingDevices: [])
    }

    /// Refuses an export whose bundle, and with `--compile` every compiled artifact too, and with
    /// `--format mlpackage` its Core ML package too, would not fit in the `available` free
    /// space, before any is written (each step checks its own part again); `plan` refuses the same.
    /// - Throws: `ResourceError.notEnoughDisk`; `CoreMLError` when the bundle could not become a
    ///   Core ML program.
    /// - Parameter tokenizer: the tokenizer files the bundle will copy (``ExportRunner/tokenizer(of:synthetic:)``).
    static func checkDisk(
        _ plan: ExportPlan, _ checked: Checked, tokenizer: TokenizerFiles?, mlpackage: Bool, available: Int?
    ) throws {
        guard let available else { return }
        guard checked.devices.isEmpty, !mlpackage else {
            let bundleBytes = plan.estimatedBundleBytes(
                copiedFileBytes: ExportRunner.copiedFileBytes(of: plan, tokenizer: tokenizer))
            let packageBytes = mlpackage ? try MLPackageWriter.packageBytes(plan: plan) : 0
            let what: ResourceError.DiskNeed? =
                mlpackage ? .bundleAndPackage(compiledArtifacts: !checked.devices.isEmpty) : nil
            let subject = CompileSubject(plan: plan)
            try Compiler.checkDisk(
                checked.devices.map { CompilePlan(subject: subject, device: $0) },
                otherFilesBytes: bundleBytes - plan.estimatedWeightsBytes,
                besides: bundleBytes.saturatingAdding(packageBytes), what: what,
                outputDirectory: checked.outputDirectory, available: available)
            return
        }
        try ExportRunner.checkDisk(
            plan, tokenizer: tokenizer, outputDirectory: checked.outputDirectory, available: available)
    }

    /// `--min-deployment-version` only means something to `--compile`.
    static func refuseStrayDeploymentVersion(_ arguments: ParsedArguments) throws {
        if arguments.isGiven("min-deployment-version"), !arguments.flag("compile") {
            throw UsageError.validation("--min-deployment-version applies to --compile; pass --compile too")
        }
    }

    /// What the export needs beyond its plan, read and checked once before anything is written.
    struct Checked {
        /// The platform and devices `--compile` compiles for (no devices without it).
        let platform: DevicePlatform
        let devices: [DeviceArchitecture]
        /// The `--calibration` token ids, all inside the vocabulary.
        let calibrationTokens: [Int]?
        /// `--output-dir`, which is not a file.
        let outputDirectory: URL
    }

    /// Refuses before exporting what would fail after it, so nothing is written: `--compile`
    /// with no eligible architecture, `--format mlpackage` of a model Core ML cannot express,
    /// calibration ids outside the vocabulary, an output folder that is a file.
    static func checkedBeforeExport(
        _ plan: ExportPlan, _ arguments: ParsedArguments, devices: DeviceTable, context: CommandContext
    ) throws -> Checked {
        let platform: DevicePlatform = plan.platform == .macOS ? .macOS : .iOS
        let compiled = arguments.flag("compile") ? try devices.select([], platform: platform) : []
        if arguments.value("format") == "mlpackage" { try LanguageModelProgram.checkSupported(plan) }
        let vocabulary = plan.model.config.vocabularySize
        let tokens = try arguments.tokenIds(inFileOf: "calibration", relativeTo: context.currentDirectory)
        if let outside = tokens?.first(where: { $0 >= vocabulary }) {
            throw UsageError.invalidValue(
                value: String(outside), option: "--calibration",
                expected: "token ids below the vocabulary size \(vocabulary)")
        }
        let output = context.fileURL(arguments.value("output-dir") ?? "Artifacts")
        // The model's folder, the output folder, or the nearest of their parents that exists,
        // must be a folder: a file there fails the export after its plan.
        let modelFolder = ExportRunner.bundleURL(for: plan, in: output).deletingLastPathComponent()
        // None exists when the working folder of a relative path was removed.
        let folder = modelFolder.physicallyStandardized
        guard let existing = nearestExistingPath(folder.path) else {
            throw BundleError.writeFailed(path: folder.path, reason: "no such file or directory")
        }
        if !existing.isDirectory {
            throw BundleError.writeFailed(path: existing.path, reason: "not a directory")
        }
        return Checked(platform: platform, devices: compiled, calibrationTokens: tokens, outputDirectory: output)
    }
}
