import Foundation
import ExporterKit

/// `exporter <model>`: the main job; the root command of the tool.
enum ExportCommand {
    static let spec = CommandSpec(
        name: "exporter",
        abstract: "Turn a Hugging Face LLM checkpoint into a shippable on-device artifact.",
        discussion: "Resolves the model (a checkpoint folder, a preset name, or an 'org/model' id in the local "
            + "Hugging Face cache), checks the registry, palettises the weights and writes "
            + "<output-dir>/<name>/<Name>.aimodel with its manifest.",
        version: ToolVersion.current,
        arguments: [.positional("model", isRequired: false, help: "A checkpoint folder, a preset name or an 'org/model' id.")]
            + ExportArguments.specs + [
                .option("output-dir", aliases: ["output"], valueName: "dir", help: "Where artifacts go (default: Artifacts)."),
                .flag("overwrite", help: "Replace an existing artifact of the same name."),
                .flag("synthetic", help: "Export generated weights of the exact shapes (marked synthetic: never ship them)."),
                .option("seed", valueName: "n", defaultValue: "0", help: "Seed of --synthetic weights."),
                .flag("allow-clamp", help: "Clamp weights beyond float16's range instead of refusing."),
                .flag("dry-run", help: "Show the plan and write nothing (same as 'exporter plan')."),
                .flag("json", help: "With --dry-run or a list, print JSON."),
                .flag("list-models", help: "List the model families and presets."),
                .flag("list-presets", help: "List the presets."),
            ],
        subcommands: [PlanCommand.spec, ListCommand.spec, SynthCommand.spec])

    static func run(_ arguments: ParsedArguments, context: CommandContext) throws -> ExitStatus {
        let json = arguments.flag("json")
        if arguments.flag("list-models") || arguments.flag("list-presets") {
            let sections: ListCommand.Sections = arguments.flag("list-models") ? [.families, .presets] : [.presets]
            return try ListCommand.show(sections, json: json, context: context)
        }
        guard let model = arguments.positional(0) else { throw UsageError.missingArgument("model") }
        let options = try ExportArguments.options(from: arguments, model: model)
        if arguments.flag("dry-run") {
            return try PlanCommand.show(options: options, json: json, listTensors: false, context: context)
        }
        let plan = try ExportPlan.make(options: options, resolver: try context.resolver())
        var settings = ExportSettings(
            outputDirectory: URL(
                fileURLWithPath: arguments.value("output-dir") ?? "Artifacts", relativeTo: context.currentDirectory))
        settings.overwrite = arguments.flag("overwrite")
        settings.allowClamp = arguments.flag("allow-clamp")
        settings.faults = context.faults
        settings.availableMemoryBytes = context.availableMemoryBytes()
        settings.availableDiskBytes = context.availableDiskBytes(at: settings.outputDirectory)
        if arguments.flag("synthetic") {
            guard let seed = UInt64(arguments.value("seed") ?? "0") else {
                throw UsageError.invalidValue(value: arguments.value("seed") ?? "", option: "--seed", expected: "a non-negative integer")
            }
            settings.syntheticSeed = seed
        }
        let bar = ProgressBar(context: context)
        let result = try ExportRunner.run(
            plan, settings: settings, warn: { context.printError("warning: \($0)") }, progress: bar.update)
        ExportSummary.lines(result).forEach { context.print($0) }
        return .success
    }
}
