import Testing

@testable import ExporterCLI

@Suite("subcommand resolution")
struct SubcommandResolutionTests {
    /// The command names and remaining arguments `arguments` resolve to from the sample root.
    private func resolved(_ arguments: [String]) -> (path: [String], arguments: [String]) {
        let invocation = SampleCommands.root.resolve(arguments)
        return (invocation.commandPath.map(\.name), invocation.arguments)
    }

    @Test("a first positional that is not a subcommand is the root's model")
    func rootPositional() {
        #expect(
            resolved(["Qwen2.5-1.5B", "--context", "4096"]) == (["exporter"], ["Qwen2.5-1.5B", "--context", "4096"]))
        #expect(resolved([]) == (["exporter"], []))
        #expect(resolved(["Qwen3", "plan"]) == (["exporter"], ["Qwen3", "plan"]))
    }

    @Test("a first positional naming a subcommand dispatches to it and is dropped")
    func dispatch() {
        #expect(resolved(["plan", "Qwen3", "-f"]) == (["exporter", "plan"], ["Qwen3", "-f"]))
        #expect(resolved(["list"]) == (["exporter", "list"], []))
        #expect(resolved(["--overwrite", "list"]) == (["exporter", "list"], ["--overwrite"]))
        #expect(resolved(["--platform", "iOS", "plan", "m"]) == (["exporter", "plan"], ["--platform", "iOS", "m"]))
        #expect(resolved(["--context=8", "plan", "m"]) == (["exporter", "plan"], ["--context=8", "m"]))
        #expect(resolved(["--help", "plan"]) == (["exporter", "plan"], ["--help"]))
    }

    @Test("an option's value or anything after '--' never names a subcommand")
    func notDispatched() {
        #expect(resolved(["--context", "plan"]) == (["exporter"], ["--context", "plan"]))
        #expect(resolved(["--", "plan"]) == (["exporter"], ["--", "plan"]))
        let model = try? parsed(["--", "plan"], for: SampleCommands.root)
        #expect(model?.positional(0) == "plan")
    }

    @Test("the sample specification has no mistakes, and mistakes are listed")
    func specificationProblems() {
        #expect(SampleCommands.root.specificationProblems() == [])
        #expect(SampleCommands.synth.specificationProblems() == [])
        let broken = CommandSpec(
            name: "broken",
            abstract: "",
            arguments: [
                .positional("rest", isRequired: false, repeats: true, help: ""),
                .positional("last", help: ""),
                .option("platform", choices: ["iOS"], defaultValue: "tvOS", help: ""),
                .flag("help", help: ""),
                .flag("force", aliases: ["platform"], shortName: "h", help: ""),
                .option("out", defaultValue: "o", isRequired: true, help: ""),
            ],
            subcommands: [SampleCommands.list, SampleCommands.list])
        #expect(
            broken.specificationProblems() == [
                "broken: default 'tvOS' of '--platform' is not one of its choices",
                "broken: '--help' declared twice",
                "broken: '--platform' declared twice",
                "broken: '-h' declared twice",
                "broken: required '--out' has a default",
                "broken: repeating '<rest>' is not last",
                "broken: required '<last>' follows an optional positional",
                "broken: subcommand 'list' declared twice",
            ])
    }
}
