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
                .flag("dry-run", help: "Show the plan and write nothing (same as 'exporter plan')."),
                .flag("json", help: "With --dry-run or a list, print JSON."),
                .flag("list-models", help: "List the model families and presets."),
                .flag("list-presets", help: "List the presets."),
            ],
        subcommands: [PlanCommand.spec, ListCommand.spec])

    static func run(_ arguments: ParsedArguments, context: CommandContext) throws -> ExitStatus {
        let json = arguments.flag("json")
        if arguments.flag("list-models") || arguments.flag("list-presets") {
            let sections: ListCommand.Sections = arguments.flag("list-models") ? [.families, .presets] : [.presets]
            return try ListCommand.show(sections, json: json, context: context)
        }
        guard let model = arguments.positional(0) else { throw UsageError.missingArgument("<model>") }
        let options = try ExportArguments.options(from: arguments, model: model)
        if arguments.flag("dry-run") {
            return try PlanCommand.show(options: options, json: json, listTensors: false, context: context)
        }
        let plan = try ExportPlan.make(options: options, resolver: try context.resolver())
        throw ExportNotAvailable.bundleWriterMissing(model: plan.outputName)
    }
}

/// Temporary until the bundle writer lands: the export stops before writing anything.
enum ExportNotAvailable: ExporterError {
    case bundleWriterMissing(model: String)

    var description: String {
        switch self {
        case .bundleWriterMissing(let model):
            return "writing the bundle of '\(model)' is not available in this build; 'exporter plan' shows what it will hold"
        }
    }

    var exitStatus: ExitStatus { .internalError }
}
