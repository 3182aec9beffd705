@testable import ExporterCLI

/// Commands shaped like the tool's, used by the parsing tests.
enum SampleCommands {
    /// A platform enum whose raw values are the `--platform` choices.
    enum Platform: String, CaseIterable {
        case iOS, macOS
    }

    /// `plan <model> --platform --max-context-length/--context -f/--overwrite`.
    static let plan = CommandSpec(
        name: "plan",
        abstract: "Print the export plan without writing anything.",
        arguments: [
            .positional("model", help: "A checkpoint folder or Hugging Face ID."),
            .option("platform", choices: ["iOS", "macOS"], defaultValue: "iOS", help: "The target platform."),
            .option("max-context-length", aliases: ["context"], valueName: "n", help: "The context length in tokens."),
            .flag("overwrite", shortName: "f", help: "Replace an existing output."),
        ])

    /// `compile <bundles> ... --device (repeating) --compute-precision --output/-o`.
    static let compile = CommandSpec(
        name: "compile",
        abstract: "Compile bundles for devices.",
        arguments: [
            .positional("bundles", repeats: true, help: "The bundles to compile."),
            .option("device", repeats: true, help: "A device architecture."),
            .option("compute-precision", choices: ["float16", "bfloat16", "float32"], help: "The compute precision."),
            .option("output", shortName: "o", valueName: "dir", help: "The output folder."),
        ])

    /// `synth <model> --out (required) --seed`.
    static let synth = CommandSpec(
        name: "synth",
        abstract: "Write a synthetic checkpoint.",
        arguments: [
            .positional("model", help: "A checkpoint folder or Hugging Face ID."),
            .option("out", valueName: "dir", isRequired: true, help: "The folder to write."),
            .option("seed", valueName: "n", help: "The seed."),
        ])

    /// `list`: no arguments.
    static let list = CommandSpec(name: "list", abstract: "List the supported models.")

    /// `inspect <manifest> [<tensor>]`.
    static let inspect = CommandSpec(
        name: "inspect",
        abstract: "Show a manifest.",
        arguments: [
            .positional("manifest", help: "The manifest file."),
            .positional("tensor", isRequired: false, help: "One tensor to show."),
        ])

    /// The root: exports `<model>` itself and dispatches to the others.
    static let root = CommandSpec(
        name: "exporter",
        abstract: "Convert an LLM checkpoint into an on-device artifact.",
        discussion: "Reads a Hugging Face checkpoint, checks it against the registry and writes a bundle.",
        version: "1.2.3",
        arguments: [
            .positional("model", help: "A checkpoint folder or Hugging Face ID."),
            .option("platform", choices: ["iOS", "macOS"], defaultValue: "iOS", help: "The target platform."),
            .option(
                "max-context-length", aliases: ["context"], valueName: "n", defaultValue: "4096",
                help: "The context length in tokens."),
            .flag("overwrite", help: "Replace an existing output."),
        ],
        subcommands: [plan, list, compile, inspect])
}
