import Testing

@testable import ExporterCLI

@Suite("argument parsing")
struct ArgumentParsingTests {
    @Test("reads a flag by its long and short names, and reports it absent otherwise")
    func flags() throws {
        #expect(try parsed(["m", "--overwrite"]).flag("overwrite"))
        #expect(try parsed(["m", "-f"]).flag("overwrite"))
        #expect(try !parsed(["m"]).flag("overwrite"))
    }

    @Test("reads an option's value given as '--name value' and '--name=value'")
    func optionForms() throws {
        #expect(try parsed(["m", "--platform", "macOS"]).value("platform") == "macOS")
        #expect(try parsed(["m", "--platform=macOS"]).value("platform") == "macOS")
        #expect(try parsed(["--output", "out", "b"], for: SampleCommands.compile).value("output") == "out")
        #expect(try parsed(["-o", "out", "b"], for: SampleCommands.compile).value("output") == "out")
        #expect(try parsed(["--output=a=b", "b"], for: SampleCommands.compile).value("output") == "a=b")
        #expect(try parsed(["--device=", "b"], for: SampleCommands.compile).value("device") == "")
    }

    @Test("an empty path (an option whose value is a <dir>, <file>…) or an empty positional is refused")
    func emptyPaths() throws {
        #expect(throws: UsageError.invalidValue(value: "", option: "--output", expected: "a path")) {
            try parsed(["--output=", "b"], for: SampleCommands.compile)
        }
        #expect(throws: UsageError.invalidValue(value: "", option: "-o", expected: "a path")) {
            try parsed(["-o", "", "b"], for: SampleCommands.compile)
        }
        #expect(throws: UsageError.emptyArgument("bundles")) { try parsed(["b", ""], for: SampleCommands.compile) }
        #expect(throws: UsageError.emptyArgument("model")) { try parsed([""]) }
        #expect(UsageError.emptyArgument("model").description == "'<model>' must not be empty")
    }

    @Test("accepts an alias and answers to any of the option's names")
    func alias() throws {
        let arguments = try parsed(["m", "--context", "8192"])
        #expect(arguments.value("context") == "8192")
        #expect(arguments.value("max-context-length") == "8192")
        #expect(try parsed(["m", "--context=2048"]).value("max-context-length") == "2048")
        #expect(try parsed(["m", "--max-context-length", "1024"]).value("context") == "1024")
    }

    @Test("reports the declared default of an absent option, and whether it was given")
    func defaults() throws {
        let absent = try parsed(["m"])
        #expect(absent.value("platform") == "iOS")
        #expect(absent.values("platform") == ["iOS"])
        #expect(!absent.isGiven("platform"))
        #expect(absent.value("context") == nil)
        #expect(try parsed(["m", "--platform", "iOS"]).isGiven("platform"))
    }

    @Test("collects a repeating option in order")
    func repeatingOption() throws {
        let arguments = try parsed(
            ["b", "--device", "h17p", "--device=h16", "--device", "h15"], for: SampleCommands.compile)
        #expect(arguments.values("device") == ["h17p", "h16", "h15"])
        #expect(arguments.value("device") == "h15")
        #expect(try parsed(["b"], for: SampleCommands.compile).values("device") == [])
    }

    @Test("matches choices exactly, then ignoring case, and reports the canonical spelling")
    func choices() throws {
        #expect(try parsed(["m", "--platform", "macOS"]).value("platform") == "macOS")
        #expect(try parsed(["m", "--platform", "MACOS"]).value("platform") == "macOS")
        #expect(try parsed(["m", "--platform=ios"]).value("platform") == "iOS")
        let precision = try parsed(["b", "--compute-precision", "BFloat16"], for: SampleCommands.compile)
        #expect(precision.value("compute-precision") == "bfloat16")
    }

    @Test("turns a choice into an enum case")
    func typedChoice() throws {
        #expect(
            try parsed(["m", "--platform", "macos"]).choice("platform", as: SampleCommands.Platform.self) == .macOS)
        #expect(try parsed(["m"]).choice("platform", as: SampleCommands.Platform.self) == .iOS)
        let arguments = try parsed(["b", "--output", "watchOS"], for: SampleCommands.compile)
        #expect(
            usageMessage { _ = try arguments.choice("output", as: SampleCommands.Platform.self) }
                == "invalid value 'watchOS' for '--output'; expected one of: iOS, macOS")
    }

    @Test("reads integers and names the option as typed when one is out of range")
    func integers() throws {
        #expect(try parsed(["m", "--context", "4096"]).int("context", range: 1...) == 4096)
        #expect(try parsed(["m"]).int("context", range: 1...) == nil)
        #expect(try parsed(["m"], for: SampleCommands.root).int("context") == 4096)
        #expect(try parsed(["m", "--context", "-1"]).int("context") == -1)
        let notANumber = try parsed(["m", "--max-context-length", "abc"])
        #expect(
            usageMessage { _ = try notANumber.int("context", range: 1...) }
                == "--max-context-length expects a positive integer, got 'abc'")
        let zero = try parsed(["m", "--context=0"])
        #expect(
            usageMessage { _ = try zero.int("context", range: 1...) } == "--context expects a positive integer, got '0'"
        )
        let negative = try parsed(["m", "--context", "-1"])
        #expect(
            usageMessage { _ = try negative.int("context", range: 0...) }
                == "--context expects a non-negative integer, got '-1'")
        #expect(
            usageMessage { _ = try negative.int("context", range: 16...) }
                == "--context expects an integer of at least 16, got '-1'")
        #expect(
            usageMessage { _ = try negative.int("context", range: 1...8) }
                == "--context expects an integer from 1 to 8, got '-1'")
        #expect(
            usageMessage { _ = try notANumber.int("context") } == "--max-context-length expects an integer, got 'abc'")
    }

    @Test("reads finite numbers only: inf and nan are refused, with or without a minimum")
    func numbers() throws {
        #expect(try parsed(["m", "--context", "2.5"]).number("context") == 2.5)
        #expect(try parsed(["m", "--context", "-1e3"]).number("context") == -1000)
        for value in ["inf", "-inf", "nan", "infinity", "1e999", "0x10", "0x1p3", "١٢"] {
            let arguments = try parsed(["m", "--context", value])
            #expect(
                usageMessage { _ = try arguments.number("context") } == "--context expects a number, got '\(value)'")
            #expect(
                usageMessage { _ = try arguments.number("context", minimum: 0) }
                    == "--context expects a non-negative number, got '\(value)'")
        }
        let high = try parsed(["m", "--context=1.5"])
        #expect(
            usageMessage { _ = try high.number("context", minimum: 0, maximum: 1) }
                == "--context expects a number from 0 to 1, got '1.5'")
    }

    @Test("fills positionals in order: required, optional and a repeating last one")
    func positionals() throws {
        let plan = try parsed(["--overwrite", "Qwen2.5-1.5B"])
        #expect(plan.positional(0) == "Qwen2.5-1.5B")
        #expect(plan.positional(1) == nil)
        #expect(try parsed(["a.json"], for: SampleCommands.inspect).positionals == ["a.json"])
        #expect(try parsed(["a.json", "embed"], for: SampleCommands.inspect).positional(1) == "embed")
        let compile = try parsed(["a", "--device", "h17p", "b", "c"], for: SampleCommands.compile)
        #expect(compile.positionals == ["a", "b", "c"])
        #expect(try parsed(["-"]).positional(0) == "-")
    }

    @Test("'--' ends options: what follows is positional, even '--' again")
    func terminator() throws {
        #expect(try parsed(["--", "--overwrite"]).positional(0) == "--overwrite")
        #expect(try !parsed(["--", "-f"]).flag("overwrite"))
        #expect(try parsed(["--", "-a", "--", "-h"], for: SampleCommands.compile).positionals == ["-a", "--", "-h"])
        #expect(try parsed(["-f", "--", "m"]).flag("overwrite"))
    }

    @Test("answers -h, --help and --version before any other check")
    func helpAndVersion() throws {
        let root = SampleCommands.root.resolve(["--contxt", "--help"])
        guard case .showHelp = try root.parse() else {
            Issue.record("expected help")
            return
        }
        guard case .showHelp = try SampleCommands.plan.resolve(["-h"]).parse()
        else {
            Issue.record("expected help")
            return
        }
        let version = SampleCommands.root.resolve(["--version"])
        guard case .showVersion("1.2.3") = try version.parse() else {
            Issue.record("expected version")
            return
        }
        #expect(try parsed(["--", "--help"]).positional(0) == "--help")
        #expect(usageMessage(["m", "--version"]) == "unknown option '--version'")
    }

    @Test("a subcommand answers --version with its parent's version, and suggests it for a typo")
    func inheritedVersion() throws {
        guard case .showVersion("1.2.3") = try SampleCommands.root.resolve(["plan", "m", "--version"]).parse() else {
            Issue.record("expected version")
            return
        }
        #expect(
            usageMessage(["plan", "m", "--versoin"], for: SampleCommands.root)
                == "unknown option '--versoin'; did you mean '--version'?")
        #expect(try parsed(["plan", "--", "--version"], for: SampleCommands.root).positional(0) == "--version")
    }

    @Test("reports each usage error with its exact message")
    func errors() throws {
        #expect(usageMessage(["m", "--contxt", "1"]) == "unknown option '--contxt'; did you mean '--context'?")
        #expect(usageMessage(["m", "--platfrom=iOS"]) == "unknown option '--platfrom'; did you mean '--platform'?")
        #expect(usageMessage(["m", "-context", "1"]) == "unknown option '-context'; did you mean '--context'?")
        #expect(usageMessage(["m", "--verbose"]) == "unknown option '--verbose'")
        // Two edits from '--help' but not less than half its length: no suggestion.
        #expect(usageMessage(["m", "--he"]) == "unknown option '--he'")
        #expect(usageMessage(["m", "--hep"]) == "unknown option '--hep'; did you mean '--help'?")
        #expect(usageMessage(["m", "-x"]) == "unknown option '-x'")
        #expect(usageMessage(["m", "-fh"]) == "unknown option '-fh'")
        #expect(usageMessage(["m", "--context"]) == "missing value for '--context'")
        #expect(usageMessage(["m", "--context", "--overwrite"]) == "missing value for '--context'")
        #expect(usageMessage(["m", "--context", "--", "x"]) == "missing value for '--context'")
        #expect(usageMessage(["m", "--overwrite=yes"]) == "'--overwrite' does not take a value")
        #expect(usageMessage(["m", "--platform", "iOS", "--platform=macOS"]) == "'--platform' given more than once")
        #expect(
            usageMessage(["m", "--context", "1", "--max-context-length", "2"])
                == "'--max-context-length' given more than once")
        #expect(usageMessage(["m", "-f", "--overwrite"]) == "'--overwrite' given more than once")
        #expect(
            usageMessage(["m", "--platform", "ios2"])
                == "invalid value 'ios2' for '--platform'; expected one of: iOS, macOS")
        #expect(
            usageMessage(["b", "--compute-precision=fp16"], for: SampleCommands.compile)
                == "invalid value 'fp16' for '--compute-precision'; expected one of: float16, bfloat16, float32")
        #expect(usageMessage(["m", "foo"]) == "unexpected argument 'foo'")
        #expect(usageMessage(["a", "b", "c"], for: SampleCommands.inspect) == "unexpected argument 'c'")
        #expect(usageMessage(["--overwrite"]) == "missing argument '<model>'")
        #expect(usageMessage([], for: SampleCommands.compile) == "missing argument '<bundles>'")
        #expect(usageMessage(["m", "--seed", "1"], for: SampleCommands.synth) == "missing '--out <dir>'")
        #expect(usageMessage([], for: SampleCommands.synth) == "missing argument '<model>'")
        #expect(try parsed(["m", "--out=o"], for: SampleCommands.synth).value("out") == "o")
        #expect(
            UsageError.validation("--experimental requires --compute-precision").description
                == "--experimental requires --compute-precision")
        #expect(UsageError.exitCode == 64)
    }
}
