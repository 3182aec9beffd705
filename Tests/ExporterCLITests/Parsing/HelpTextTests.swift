import Testing

@testable import ExporterCLI

@Suite("help and usage text")
struct HelpTextTests {
    @Test("renders a command's help with aligned options, choices and defaults")
    func commandHelp() {
        let expected = """
            OVERVIEW: Print the export plan without writing anything.

            USAGE: exporter plan <model> [--platform <platform>] [--max-context-length <n>]
                   [--overwrite]

            ARGUMENTS:
              <model>                 A checkpoint folder or Hugging Face ID.

            OPTIONS:
              --platform <platform>   The target platform. (values: iOS, macOS; default:
                                      iOS)
              --max-context-length, --context <n>
                                      The context length in tokens.
              -f, --overwrite         Replace an existing output.
              --version               Show the version.
              -h, --help              Show help information.
            """
        #expect(SampleCommands.root.resolve(["plan"]).helpText == expected)
    }

    @Test("renders the root's help with its discussion, version and subcommands")
    func rootHelp() {
        let expected = """
            OVERVIEW: Convert an LLM checkpoint into an on-device artifact.

            Reads a Hugging Face checkpoint, checks it against the registry and writes a
            bundle.

            USAGE: exporter <model> [--platform <platform>] [--max-context-length <n>]
                   [--overwrite]
                   exporter <subcommand>

            ARGUMENTS:
              <model>                 A checkpoint folder or Hugging Face ID.

            OPTIONS:
              --platform <platform>   The target platform. (values: iOS, macOS; default:
                                      iOS)
              --max-context-length, --context <n>
                                      The context length in tokens. (default: 4096)
              --overwrite             Replace an existing output.
              --version               Show the version.
              -h, --help              Show help information.

            SUBCOMMANDS:
              plan                    Print the export plan without writing anything.
              list                    List the supported models.
              compile                 Compile bundles for devices.
              inspect                 Show a manifest.

              See 'exporter <subcommand> --help' for detailed help.
            """
        #expect(SampleCommands.root.resolve([]).helpText == expected)
    }

    @Test("renders a command without arguments, and repeating arguments with '...'")
    func smallAndRepeatingHelp() {
        #expect(
            SampleCommands.root.resolve(["list"]).helpText == """
                OVERVIEW: List the supported models.

                USAGE: exporter list

                OPTIONS:
                  --version               Show the version.
                  -h, --help              Show help information.
                """)
        #expect(
            SampleCommands.root.resolve(["compile"]).helpText == """
                OVERVIEW: Compile bundles for devices.

                USAGE: exporter compile <bundles> ... [--device <device> ...]
                       [--compute-precision <compute-precision>] [--output <dir>]

                ARGUMENTS:
                  <bundles> ...           The bundles to compile.

                OPTIONS:
                  --device <device> ...   A device architecture.
                  --compute-precision <compute-precision>
                                          The compute precision. (values: float16, bfloat16,
                                          float32)
                  -o, --output <dir>      The output folder.
                  --version               Show the version.
                  -h, --help              Show help information.
                """)
    }

    @Test("writes the usage line in full when it fits, otherwise shortens the options")
    func usageLine() {
        #expect(SampleCommands.root.resolve(["inspect"]).usageLine == "exporter inspect <manifest> [<tensor>]")
        #expect(SampleCommands.root.resolve(["list"]).usageLine == "exporter list")
        #expect(SampleCommands.root.resolve(["plan"]).usageLine == "exporter plan <model> [<options>]")
        let group = CommandSpec(name: "exporter", abstract: "", subcommands: [SampleCommands.list])
        #expect(group.resolve([]).usageLine == "exporter <subcommand>")
    }

    @Test("shows a required option without brackets, in help and in the shortened usage line")
    func requiredOption() {
        let invocation = SampleCommands.synth.resolve([])
        #expect(invocation.usageLine == "synth <model> --out <dir> [--seed <n>]")
        #expect(invocation.helpText.contains("USAGE: synth <model> --out <dir> [--seed <n>]\n"))
        let long = CommandSpec(
            name: "synth", abstract: "",
            arguments: SampleCommands.synth.arguments + [
                .option("shard-size", valueName: "bytes", help: "The largest shard."),
                .option("dtype", choices: ["BF16", "F16", "F32"], help: "The storage type."),
            ])
        #expect(long.resolve([]).usageLine == "synth <model> --out <dir> [<options>]")
        #expect(
            long.resolve([]).usageErrorText(for: .missingOption("--out <dir>")) == """
                Error: missing '--out <dir>'
                Usage: synth <model> --out <dir> [<options>]
                  See 'synth --help' for more information.
                """)
    }

    @Test("presents a usage error with the usage line and where to find help")
    func usageErrorText() {
        #expect(
            SampleCommands.root.resolve(["plan"]).usageErrorText(
                for: .unknownOption("--contxt", suggestion: "--context"))
                    == """
                    Error: unknown option '--contxt'; did you mean '--context'?
                    Usage: exporter plan <model> [<options>]
                      See 'exporter plan --help' for more information.
                    """)
        #expect(
            SampleCommands.root.resolve([]).usageErrorText(for: .missingArgument("model")) == """
                Error: missing argument '<model>'
                Usage: exporter <model> [<options>]
                  See 'exporter --help' for more information.
                """)
    }
}
