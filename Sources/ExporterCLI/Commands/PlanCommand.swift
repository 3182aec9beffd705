import ExporterKit

/// `exporter plan <model>`: what an export will produce, from the config alone.
enum PlanCommand {
    static let spec = CommandSpec(
        name: "plan",
        abstract: "Show what an export will produce, from the checkpoint's config alone.",
        discussion: "Lists the tensors with their shapes, parameters and storage, the estimated bundle size, "
            + "the KV-cache cost at the chosen context, a runtime memory estimate, the memory the export itself will "
            + "need on this machine (refused above what is available) and, for each device architecture "
            + "that ahead-of-time compilation targets, the verdict 'exporter compile' will give. Works on a folder that "
            + "holds only a config.json. Same as 'exporter <model> --dry-run'.",
        arguments: [.positional("model", help: "A checkpoint folder, a preset name or an 'org/model' id.")]
            + ExportArguments.specs + ExportArguments.writeSpecs + [
                .flag("tensors", help: "List every tensor."),
                .flag("json", help: "Print the manifest preview as JSON."),
                // An export command line pasted after 'plan' may keep its --dry-run.
                .flag("dry-run", help: "Accepted and ignored: a plan writes nothing anyway."),
            ])

    /// Plans the export `arguments` describe and prints the plan (also `exporter <model>
    /// --dry-run`): the export's `--synthetic`, `--allow-clamp` and `--calibration` change
    /// what it will need, and what the export would refuse before writing is refused here (for
    /// memory or disk after the plan is printed, exit 71).
    /// Each eligible device's verdict is computed as `exporter compile` does.
    static func run(_ arguments: ParsedArguments, context: CommandContext) throws -> ExitStatus {
        guard let model = arguments.positional(0) else { throw UsageError.missingArgument("model") }
        try ExportCommand.refuseStrayDeploymentVersion(arguments)
        let options = try ExportArguments.options(from: arguments, model: model, context: context)
        let devices = try CompileCommand.deviceTable(arguments, context: context)
        let required = try FitGate.required(arguments, table: devices)
        // As the export: a --min-deployment-version below 27.0, or not a version, is refused.
        _ = try CompileCommand.deploymentVersion(arguments)
        // Where the export reads it: before planning, less the stacks of the threads it will start.
        let available = context.availableMemory(startingThreads: WorkerThreads.export())
        let plan = try ExportPlan.make(options: options, resolver: try context.resolver())
        let checked = try ExportCommand.checkedBeforeExport(plan, arguments, devices: devices, context: context)
        let synthetic = arguments.flag("synthetic")
        let checkpoint = try ExportRunner.checkCheckpoint(plan, synthetic: synthetic)
        let verdicts = CompilePlan.verdicts(for: CompileSubject(plan: plan), table: devices)
        let conversion = ExportRunner.conversionForecast(
            plan, synthetic: synthetic, allowClamp: arguments.flag("allow-clamp"),
            calibrated: arguments.value("calibration") != nil, availableBytes: available?.bytes,
            availableLimit: available?.limit, weights: checkpoint.weights)
        // What the export will warn of besides the plan's own warnings.
        let tokenizer = try ExportRunner.tokenizer(of: plan, synthetic: synthetic)
        func warnings(namingFolder: Bool) -> [String] {
            checkpoint.warnings
                + (tokenizer.map { ExportRunner.tokenizerWarnings(plan, tokenizer: $0, namingFolder: namingFolder) }
                    ?? [])
        }
        let calibration = checked.calibrationTokens.map(Manifest.CalibrationRecord.init(tokens:))
        // Said after the verdict tables, in their order (compiled devices first), and in the
        // manifest's warnings with the rest.
        let verdictWarnings = VerdictPrinter.warnings(verdicts)
        let json = arguments.flag("json")
        let listTensors = arguments.flag("tensors")
        if json {
            var manifest = Manifest(plan: plan)
            manifest.verdicts = verdicts
            manifest.conversion = conversion
            manifest.warnings += warnings(namingFolder: false) + verdictWarnings
            manifest.compression.calibration = calibration
            context.writeOutput(String(decoding: try manifest.canonicalJSON(), as: UTF8.self))
        } else {
            context.print(
                lines: PlanPrinter.lines(
                    plan, conversion: conversion, listTensors: listTensors, warnings: warnings(namingFolder: true),
                    calibration: calibration
                ))
            context.print(lines: VerdictPrinter.planLines(verdicts) + verdictWarnings.map { "warning: \($0)" })
        }
        // What the export would refuse for this machine's memory or disk (71), once the plan has
        // shown the figures.
        try ExportRunner.checkMemory(plan, forecast: conversion)
        try ExportCommand.checkDisk(
            plan, checked, tokenizer: tokenizer, mlpackage: arguments.value("format") == "mlpackage",
            available: context.availableDiskBytes(at: checked.outputDirectory))
        return FitGate.status(FitGate.failures(verdicts, required: required), context: context)
    }
}
