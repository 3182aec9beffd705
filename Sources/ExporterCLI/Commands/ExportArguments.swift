import ExporterKit
import Foundation

/// The options shared by every command that plans an export (`exporter <model>`, `plan`).
enum ExportArguments {
    /// Their declarations, in help order.
    static let specs: [ArgumentSpec] = [
        .option(
            "platform", choices: Platform.allCases.map(\.rawValue), defaultValue: "iOS",
            help: "The target platform; iOS exports exist for mistral, qwen2 and qwen3 only."),
        .option(
            "max-context-length", aliases: ["context"], valueName: "n",
            help: "Context length in tokens (default: the preset's, else 4096 or max_position_embeddings if smaller), "
                + "up to max_position_embeddings."),
        .option(
            "compute-precision", choices: ComputePrecision.allCases.map(\.rawValue),
            help: "Compute precision (default: the preset's); required with --experimental."),
        .option(
            "compression", valueName: "name",
            help: "A compression config of Presets/compression, or 'none' (default: the preset's)."),
        .option("compression-config", valueName: "file", help: "A compression config file (not with --compression)."),
        .flag("experimental", help: "Export a supported architecture that has no preset."),
        .option("preset", valueName: "id", help: "Apply a preset's defaults to a local checkpoint of the same shape."),
        .flag(
            "disable-embedding-quantization-ios",
            help: "On iOS, keep the token embedding in the compute precision instead of int8 per tensor (it is "
                + "never palettised)."),
        .option(
            "palette-search", choices: CompressionScheme.Search.allCases.map(\.rawValue),
            help: "How each LUT is searched for (default: the config's, else standard); thorough comes closer "
                + "to the least squared error for about a quarter more time, exact reaches it at 10-20 times the time."),
        .option("output-name", valueName: "name", help: "The artifact's name (default: the model's)."),
        .option("devices", valueName: "file", help: "A device table that extends Presets/devices.json."),
        FitGate.spec,
    ]

    /// The export options the arguments describe.
    /// - Throws: `UsageError` for a missing model, a bad number or conflicting options.
    /// What the export writes and how: `plan` takes them too, so that any export command
    /// line becomes its plan by inserting `plan` (or adding `--dry-run`); those that change
    /// the plan (`--synthetic`, `--allow-clamp`, `--calibration`: the conversion's memory;
    /// `--compile`, `--format`: refusals) are counted, the others ignored.
    static let writeSpecs: [ArgumentSpec] = [
        .option("output-dir", aliases: ["output"], valueName: "dir", help: "Where artifacts go (default: Artifacts)."),
        .flag("overwrite", help: "Replace an existing artifact of the same name."),
        .option(
            "format", choices: ["aimodel", "mlpackage"], defaultValue: "aimodel",
            help: "aimodel, or mlpackage: also a Core ML package converted from the bundle, beside it."),
        .flag("synthetic", help: "Export generated weights of the exact shapes (marked synthetic: never ship them)."),
        .option("seed", valueName: "n", defaultValue: "0", help: "Seed of --synthetic weights."),
        .flag("allow-clamp", help: "Clamp weights beyond float16's range instead of refusing."),
        .option(
            "calibration", valueName: "file",
            help: "Token ids of a calibration text: palettisation weighs each weight by its activations' energy."),
        .flag("compile", help: "Then compile the bundle for every eligible architecture of the platform."),
        .option(
            "min-deployment-version", valueName: "version", defaultValue: DeploymentVersion.minimum.description,
            help: "With --compile: the oldest OS version the app supports; 27.0 at least."),
    ]

    static func options(from arguments: ParsedArguments, model: String, context: CommandContext) throws
        -> ExportOptions
    {
        var options = ExportOptions(model: model)
        options.platform = try arguments.choice("platform", as: Platform.self) ?? .iOS
        options.contextLength = try arguments.int("max-context-length", range: 1...)
        options.computePrecision = try arguments.choice("compute-precision", as: ComputePrecision.self)
        switch (arguments.value("compression"), arguments.value("compression-config")) {
        case (.some, .some):
            throw UsageError.validation("--compression and --compression-config cannot be used together")
        case (.some(let name), nil):
            options.compression = .named(name)
        case (nil, .some(let path)):
            options.compression = .file(context.fileURL(path))
        case (nil, nil):
            options.compression = .automatic
        }
        options.experimental = arguments.flag("experimental")
        options.presetOverride = arguments.value("preset")
        options.quantizeIOSEmbedding = !arguments.flag("disable-embedding-quantization-ios")
        // As the reference tool: a flag that cannot apply is refused, not ignored.
        if !options.quantizeIOSEmbedding, options.platform != .iOS {
            throw UsageError.validation(
                "--disable-embedding-quantization-ios applies to --platform iOS; the platform is \(options.platform)")
        }
        options.outputName = arguments.value("output-name")
        options.paletteSearch = try arguments.choice("palette-search", as: CompressionScheme.Search.self)
        if let name = options.outputName, name.isEmpty || name.contains("/") || name.hasPrefix(".") {
            throw UsageError.validation("--output-name must be a plain file name, got '\(name)'")
        }
        // --seed is checked whether or not --synthetic uses it: a bad value is never ignored.
        if arguments.command.option(named: "seed") != nil, let seed = arguments.value("seed"), UInt64(seed) == nil {
            throw UsageError.invalidValue(value: seed, option: "--seed", expected: "a non-negative integer")
        }
        if arguments.isGiven("seed"), !arguments.flag("synthetic") {
            throw UsageError.validation("--seed applies to --synthetic weights; pass --synthetic too")
        }
        if let name = options.outputName, name.unicodeScalars.contains(where: \.isControlCharacter) {
            throw UsageError.validation("--output-name must not contain control characters, got '\(name)'")
        }
        return options
    }
}
