/// The command a command line selects — the chain from the root to the matched
/// subcommand — and the arguments left for that command to parse.
struct CommandInvocation: Equatable {
    /// The root first, the command to run last; never empty.
    fileprivate(set) var commandPath: [CommandSpec]
    /// The arguments after removing the subcommand names.
    fileprivate(set) var arguments: [String]

    /// Starts at `root`; only `CommandSpec.resolve(_:)` makes invocations.
    fileprivate init(root: CommandSpec, arguments: [String]) {
        self.commandPath = [root]
        self.arguments = arguments
    }

    /// The command to run.
    var command: CommandSpec { commandPath[commandPath.count - 1] }

    /// The words that invoke the command (`exporter plan`).
    var commandName: String { commandPath.map(\.name).joined(separator: " ") }

    /// What `--version` prints: the command's own version, else its nearest ancestor's (as
    /// swift-argument-parser does), so `exporter plan --version` answers like `exporter --version`.
    var version: String? { commandPath.reversed().lazy.compactMap(\.version).first }

    /// What a command line asks for once parsed.
    enum Outcome {
        /// Run the command with these arguments.
        case run(ParsedArguments)
        /// `-h` or `--help` was given: print `helpText`.
        case showHelp
        /// `--version` was given: print this version.
        case showVersion(String)
    }

    /// Parses `arguments` against `command`. `-h/--help` (and `--version` where the command
    /// or an ancestor declares one) anywhere before `--` wins over everything else.
    /// - Throws: `UsageError` for the first unknown option, missing or invalid value,
    ///   repeated option, unexpected positional, or missing required positional or option.
    func parse() throws -> Outcome {
        let optionTokens = arguments.prefix { $0 != "--" }
        if optionTokens.contains("-h") || optionTokens.contains("--help") { return .showHelp }
        if let version, optionTokens.contains("--version") { return .showVersion(version) }

        let positionalSpecs = command.positionals
        let positionalCapacity = positionalSpecs.last?.repeats == true ? Int.max : positionalSpecs.count
        var occurrences: [String: [ParsedArguments.Occurrence]] = [:]
        var positionals: [String] = []
        var optionsEnded = false
        var index = 0
        while index < arguments.count {
            let token = arguments[index]
            index += 1
            if !optionsEnded && token == "--" {
                optionsEnded = true
                continue
            }
            if optionsEnded || !Self.looksLikeOption(token) {
                guard positionals.count < positionalCapacity else { throw UsageError.unexpectedArgument(token) }
                guard !token.isEmpty else {
                    let spec = positionalSpecs[min(positionals.count, positionalSpecs.count - 1)]
                    throw UsageError.emptyArgument(spec.name)
                }
                positionals.append(token)
                continue
            }
            let (spelling, inlineValue) = Self.splitInlineValue(token)
            guard let option = Self.option(spelled: spelling, in: command) else {
                throw UsageError.unknownOption(
                    spelling, suggestion: Self.closestOption(to: spelling, in: command, hasVersion: version != nil))
            }
            guard option.repeats || occurrences[option.name] == nil else { throw UsageError.repeatedOption(spelling) }
            var value: String?
            if option.kind == .flag {
                guard inlineValue == nil else { throw UsageError.unexpectedValue(option: spelling) }
            } else if let inlineValue {
                value = inlineValue
            } else if index < arguments.count, Self.isValue(arguments[index]) {
                value = arguments[index]
                index += 1
            } else {
                throw UsageError.missingValue(option: spelling)
            }
            if let given = value, given.isEmpty, option.takesPath {
                throw UsageError.invalidValue(value: given, option: spelling, expected: "a path")
            }
            if let given = value, !option.choices.isEmpty {
                guard let canonical = Self.matchChoice(given, in: option.choices) else {
                    throw UsageError.invalidChoice(value: given, option: spelling, choices: option.choices)
                }
                value = canonical
            }
            occurrences[option.name, default: []].append(.init(spelling: spelling, value: value))
        }
        for (position, spec) in positionalSpecs.enumerated() where spec.isRequired && positionals.count <= position {
            throw UsageError.missingArgument(spec.name)
        }
        for spec in command.options where spec.isRequired && occurrences[spec.name] == nil {
            throw UsageError.missingOption("--\(spec.name) <\(spec.valueName)>")
        }
        return .run(ParsedArguments(command: command, occurrences: occurrences, positionals: positionals))
    }

    /// Whether `token` is meant as an option: it starts with `-` and is not `-` alone
    /// (the usual name for standard input) nor `--`.
    static func looksLikeOption(_ token: String) -> Bool {
        token.hasPrefix("-") && token != "-" && token != "--"
    }

    /// Whether the token after an option is its value: not `--`, and not an option
    /// unless it is a negative number (`--offset -1`).
    static func isValue(_ token: String) -> Bool {
        token != "--" && (!looksLikeOption(token) || Double(token) != nil)
    }

    /// `--name=value` as (`--name`, `value`); any other token with no inline value.
    static func splitInlineValue(_ token: String) -> (spelling: String, value: String?) {
        guard token.hasPrefix("--"), let equals = token.firstIndex(of: "=") else { return (token, nil) }
        return (String(token[..<equals]), String(token[token.index(after: equals)...]))
    }

    /// The declared option a token names: `--name`, `--alias` or `-x`; nothing else
    /// (no combined short flags).
    static func option(spelled spelling: String, in command: CommandSpec) -> ArgumentSpec? {
        if spelling.hasPrefix("--") { return command.option(named: String(spelling.dropFirst(2))) }
        guard spelling.count == 2, let shortName = spelling.last else { return nil }
        return command.option(shortName: shortName)
    }

    /// The choice equal to `value`, or else the only one equal ignoring case.
    static func matchChoice(_ value: String, in choices: [String]) -> String? {
        if choices.contains(value) { return value }
        let caseInsensitiveMatches = choices.filter { $0.lowercased() == value.lowercased() }
        return caseInsensitiveMatches.count == 1 ? caseInsensitiveMatches[0] : nil
    }

    /// The declared long spelling closest to a mistyped option, when at most two edits
    /// away and less than half its length; the first declared wins a tie. `hasVersion`:
    /// `--version` is accepted (declared by the command or an ancestor).
    static func closestOption(to spelling: String, in command: CommandSpec, hasVersion: Bool) -> String? {
        let typed = Array(spelling.drop { $0 == "-" })
        let candidates =
            command.options.flatMap { [$0.name] + $0.aliases } + (hasVersion ? ["version", "help"] : ["help"])
        var best: (name: String, distance: Int)?
        for candidate in candidates {
            let distance = editDistance(typed, Array(candidate))
            if distance <= 2, distance * 2 < candidate.count, distance < (best?.distance ?? Int.max) {
                best = (candidate, distance)
            }
        }
        return best.map { "--\($0.name)" }
    }

    /// The Levenshtein distance: insertions, deletions and substitutions turning `a` into `b`.
    static func editDistance(_ a: [Character], _ b: [Character]) -> Int {
        var previousRow = Array(0...b.count)
        for (i, aCharacter) in a.enumerated() {
            var row = [i + 1]
            for (j, bCharacter) in b.enumerated() {
                row.append(min(previousRow[j + 1] + 1, row[j] + 1, previousRow[j] + (aCharacter == bCharacter ? 0 : 1)))
            }
            previousRow = row
        }
        return previousRow[b.count]
    }
}

extension CommandSpec {
    /// Selects the command `arguments` invoke: while the first positional (skipping
    /// options and their values, stopping at `--`) names a subcommand, descend into it
    /// and drop that word. Otherwise the positional belongs to the command itself, so
    /// `exporter Qwen2.5-1.5B` runs the root and `exporter plan Qwen2.5-1.5B` runs `plan`.
    func resolve(_ arguments: [String]) -> CommandInvocation {
        var invocation = CommandInvocation(root: self, arguments: arguments)
        while let (index, subcommand) = invocation.command.subcommandNamed(in: invocation.arguments) {
            invocation.commandPath.append(subcommand)
            invocation.arguments.remove(at: index)
        }
        return invocation
    }

    /// The index and spec of the subcommand named by the first positional of `arguments`.
    private func subcommandNamed(in arguments: [String]) -> (index: Int, subcommand: CommandSpec)? {
        var index = 0
        while index < arguments.count {
            let token = arguments[index]
            if token == "--" { return nil }
            if !CommandInvocation.looksLikeOption(token) {
                return subcommands.first { $0.name == token }.map { (index, $0) }
            }
            let (spelling, inlineValue) = CommandInvocation.splitInlineValue(token)
            let takesNextToken =
                inlineValue == nil && CommandInvocation.option(spelled: spelling, in: self)?.kind == .option
            index += takesNextToken ? 2 : 1
        }
        return nil
    }
}
