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
            + ExportArguments.specs + [
                .flag("tensors", help: "List every tensor."),
                .flag("json", help: "Print the manifest preview as JSON."),
            ])

    static func run(_ arguments: ParsedArguments, context: CommandContext) throws -> ExitStatus {
        guard let model = arguments.positional(0) else { throw UsageError.missingArgument("model") }
        let options = try ExportArguments.options(from: arguments, model: model)
        return try show(
            options: options, json: arguments.flag("json"), listTensors: arguments.flag("tensors"), context: context,
            devices: try CompileCommand.deviceTable(arguments, context: context))
    }

    /// Plans `options` and prints the plan (shared with `--dry-run`, whose `exportFlags`, the
    /// export's `--synthetic`, `--allow-clamp` and `--calibration`, change what it will need).
    /// Each eligible device's verdict comes from `devices`, computed as `exporter compile` does.
    static func show(
        options: ExportOptions, json: Bool, listTensors: Bool, context: CommandContext, devices: DeviceTable,
        exportFlags: ParsedArguments? = nil
    ) throws -> ExitStatus {
        let plan = try ExportPlan.make(options: options, resolver: try context.resolver())
        let verdicts = CompilePlan.verdicts(for: CompileSubject(plan: plan), table: devices)
        let conversion = ExportRunner.conversionForecast(
            plan, synthetic: exportFlags?.flag("synthetic") ?? false,
            allowClamp: exportFlags?.flag("allow-clamp") ?? false,
            calibrated: exportFlags?.value("calibration") != nil, availableBytes: context.availableMemoryBytes())
        if json {
            var manifest = Manifest(plan: plan)
            manifest.verdicts = verdicts
            manifest.conversion = conversion
            context.writeOutput(String(decoding: try manifest.canonicalJSON(), as: UTF8.self))
        } else {
            (PlanPrinter.lines(plan, conversion: conversion, listTensors: listTensors)
                + VerdictPrinter.planLines(verdicts)).forEach { context.print($0) }
        }
        return .success
    }
}
