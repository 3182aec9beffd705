import ExporterKit
import Foundation

/// `exporter compile <bundle.aimodel>`: one `<Name>.<arch>.aimodelc` per device architecture, with a verdict.
enum CompileCommand {
    static let spec = CommandSpec(
        name: "compile",
        abstract: "Compile a portable bundle ahead of time, one artifact per device architecture.",
        discussion: "Cuts the graph into regions that fit each architecture's Neural Engine budget, lays their "
            + "weights out page-aligned, precomputes the static tables and says whether the model fits the "
            + "device's app memory limit. Writes <output>/<Name>.<arch>.aimodelc for each architecture; without "
            + "--device, for every eligible architecture of the platform. Device numbers: Presets/devices.json "
            + "and docs/DEVICES.md.",
        arguments: [
            .positional("bundle", help: "A portable <Name>.aimodel bundle."),
            .option(
                "platform", choices: DevicePlatform.allCases.map(\.rawValue),
                help: "The devices' platform (default: the bundle's)."),
            .option(
                "min-deployment-version", valueName: "version", defaultValue: DeploymentVersion.minimum.description,
                help: "The oldest OS version the app supports; 27.0 at least."),
            .option(
                "output", aliases: ["output-dir"], valueName: "dir",
                help: "Where the artifacts go (default: the bundle's folder)."),
            .option(
                "device", valueName: "arch", repeats: true,
                help: "An architecture id such as h17p; repeatable (default: every eligible one)."),
            .option("devices", valueName: "file", help: "A device table that extends Presets/devices.json."),
            .flag("overwrite", help: "Replace existing artifacts."),
            .flag("json", help: "Print each artifact's path and manifest as JSON (an export's 'compiled' list)."),
            FitGate.spec,
        ])

    static func run(_ arguments: ParsedArguments, context: CommandContext) throws -> ExitStatus {
        guard let path = arguments.positional(0) else { throw UsageError.missingArgument("bundle") }
        let version = try deploymentVersion(arguments)
        let table = try deviceTable(arguments, context: context)
        let required = try FitGate.required(arguments, table: table)
        let bundleURL = context.fileURL(path)
        // Read before the threads are tried and the bundle is opened: the forecast counts from here.
        let availableMemory = context.availableMemory(startingThreads: WorkerThreads.compile())
        try WorkerThreads.check(WorkerThreads.compile())
        // Its manifest is decoded first: a large one (thousands of tensors) takes more than the rest.
        try Compiler.checkMemory(beforeOpening: bundleURL, available: availableMemory)
        let bundle = try Compiler.openBundle(bundleURL)
        let platform =
            try arguments.choice("platform", as: DevicePlatform.self)
            ?? DevicePlatform(rawValue: bundle.manifest.platform) ?? .iOS
        try Compiler.checkPlatform(bundle: bundleURL, manifest: bundle.manifest, platform: platform)
        let devices = try Compiler.selectDevices(
            arguments.values("device"), from: table, platform: platform, manifest: bundle.manifest)
        let output =
            arguments.value("output").map {
                context.fileURL($0)
            } ?? bundleURL.deletingLastPathComponent()
        var request = CompileRequest(
            platform: platform, devices: devices, minimumDeploymentVersion: version, outputDirectory: output)
        request.overwrite = arguments.flag("overwrite")
        request.deviceTable = deviceTableURL(arguments, context: context)
        request.availableDiskBytes = context.availableDiskBytes(at: output)
        request.availableMemory = availableMemory
        try compile(bundleURL, request: request, output: arguments.flag("json") ? .json : .text, context: context)
        // Every device that loads the bundle, compiled here or not: as a plan of it gives them.
        let verdicts =
            required.isEmpty ? [] : CompilePlan.verdicts(for: try CompileSubject(bundle: bundle), table: table)
        return FitGate.status(
            FitGate.failures(verdicts, required: required),
            notes: FitGate.entitlementNotes(verdicts, required: required), context: context)
    }

    /// Compiles and prints each artifact's summary, or their paths and manifests as JSON, or
    /// nothing (`.none`: `exporter <model> --compile --json` prints them in its own report).
    @discardableResult
    static func compile(_ bundleURL: URL, request: CompileRequest, output: OutputStyle, context: CommandContext) throws
        -> [CompileResult]
    {
        let results = try Compiler.compile(
            bundleURL: bundleURL, request: request, progress: ProgressBar(context: context).update)
        switch output {
        case .json:
            context.writeOutput(
                try CanonicalJSON.string(
                    results.map { ExportSummary.Report.Compiled(artifact: $0.url.path, manifest: $0.manifest) }))
        case .text: for result in results { context.print(lines: VerdictPrinter.compiledLines(result)) }
        case .none: break
        }
        return results
    }

    /// `--min-deployment-version`, as a usage error when wrong.
    static func deploymentVersion(_ arguments: ParsedArguments) throws -> DeploymentVersion {
        let text = arguments.value("min-deployment-version") ?? DeploymentVersion.minimum.description
        do { return try DeploymentVersion(parsing: text) } catch let error as CompileError {
            throw UsageError.validation(error.description)
        }
    }

    /// The shipped device table, extended by `--devices`.
    static func deviceTable(_ arguments: ParsedArguments, context: CommandContext) throws -> DeviceTable {
        try DeviceTable.load(
            presetsDirectory: try context.catalog().directory, extra: deviceTableURL(arguments, context: context))
    }

    /// The user's device table, `--devices`, when given.
    static func deviceTableURL(_ arguments: ParsedArguments, context: CommandContext) -> URL? {
        arguments.value("devices").map {
            context.fileURL($0)
        }
    }
}
