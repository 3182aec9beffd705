import ExporterKit

/// Help, usage line and usage-error text, wrapped to `CommandInvocation.lineWidth` columns.
extension CommandInvocation {
    /// The terminal width help is wrapped to.
    static let lineWidth = 80
    /// The column where help text starts in the ARGUMENTS, OPTIONS and SUBCOMMANDS lists.
    static let helpColumn = 26

    /// The usage line for error messages: the command name, its positionals, then its
    /// options, which are shortened to the required ones and `[<options>]` when the line
    /// would not fit.
    var usageLine: String {
        let positionals = command.positionals.map(Self.usageItem)
        if positionals.isEmpty && command.options.isEmpty && !command.subcommands.isEmpty {
            return "\(commandName) <subcommand>"
        }
        let full = ([commandName] + positionals + command.options.map(Self.usageItem)).joined(separator: " ")
        guard "Usage: ".count + full.count > Self.lineWidth else { return full }
        let required = command.options.filter(\.isRequired).map(Self.usageItem)
        return ([commandName] + positionals + required + ["[<options>]"]).joined(separator: " ")
    }

    /// The text printed on stderr for `error`: the message, the usage line and where to
    /// find help.
    func usageErrorText(for error: UsageError) -> String {
        "Error: \(Format.escaped(error.description))\n" + usagePointer
    }

    /// What follows the message of any usage error (exit status 64): the usage line and
    /// where to find help, without a trailing newline.
    var usagePointer: String {
        """
        Usage: \(usageLine)
          See '\(commandName) --help' for more information.
        """
    }

    /// The text printed by `--help`: OVERVIEW, USAGE, ARGUMENTS, OPTIONS and SUBCOMMANDS
    /// (the sections that apply), without a trailing newline.
    var helpText: String {
        var sections: [[String]] = []
        sections.append(Self.wrap(Self.words(command.abstract), prefix: "OVERVIEW: ", indent: 0))
        if !command.discussion.isEmpty {
            sections.append(
                command.discussion.split(separator: "\n", omittingEmptySubsequences: false).flatMap {
                    Self.wrap(Self.words(String($0)), prefix: "", indent: 0)
                })
        }
        let usageItems = command.positionals.map(Self.usageItem) + command.options.map(Self.usageItem)
        var usage: [String] = []
        if !usageItems.isEmpty || command.subcommands.isEmpty {
            usage = Self.wrap([commandName] + usageItems, prefix: "USAGE: ", indent: "USAGE: ".count)
        }
        if !command.subcommands.isEmpty {
            usage.append((usage.isEmpty ? "USAGE: " : "       ") + "\(commandName) <subcommand>")
        }
        sections.append(usage)
        if !command.positionals.isEmpty {
            sections.append(["ARGUMENTS:"] + command.positionals.flatMap { Self.row(Self.label($0), $0.help) })
        }
        let builtInRows =
            (version == nil ? [] : Self.row("--version", "Show the version."))
            + Self.row("-h, --help", "Show help information.")
        sections.append(
            ["OPTIONS:"] + command.options.flatMap { Self.row(Self.label($0), Self.helpWithValues($0)) } + builtInRows)
        if !command.subcommands.isEmpty {
            sections.append(
                ["SUBCOMMANDS:"] + command.subcommands.flatMap { Self.row($0.name, $0.abstract) }
                    + ["", "  See '\(commandName) <subcommand> --help' for detailed help."])
        }
        return sections.map { $0.joined(separator: "\n") }.joined(separator: "\n\n")
    }

    /// How an argument appears in a usage line: `<model>`, `[<model>]`, `<files> ...`,
    /// `[--overwrite]`, `[--platform <platform>]`, `[--device <device> ...]`, and a required
    /// option without brackets: `--out <dir>`.
    private static func usageItem(_ argument: ArgumentSpec) -> String {
        let repetition = argument.repeats ? " ..." : ""
        switch argument.kind {
        case .positional:
            let item = "<\(argument.name)>\(repetition)"
            return argument.isRequired ? item : "[\(item)]"
        case .flag:
            return "[--\(argument.name)]"
        case .option:
            let item = "--\(argument.name) <\(argument.valueName)>\(repetition)"
            return argument.isRequired ? item : "[\(item)]"
        }
    }

    /// How an argument is named in its help list: `<model>`, `-f, --overwrite`,
    /// `--max-context-length, --context <n>`, `--device <device> ...`.
    private static func label(_ argument: ArgumentSpec) -> String {
        let repetition = argument.repeats ? " ..." : ""
        if argument.kind == .positional { return "<\(argument.name)>\(repetition)" }
        let names =
            (argument.shortName.map { ["-\($0)"] } ?? []) + ([argument.name] + argument.aliases).map { "--\($0)" }
        let value = argument.kind == .option ? " <\(argument.valueName)>" : ""
        return names.joined(separator: ", ") + value + repetition
    }

    /// An option's help followed by its choices and default: `(values: iOS, macOS; default: iOS)`.
    private static func helpWithValues(_ argument: ArgumentSpec) -> String {
        var notes: [String] = []
        if !argument.choices.isEmpty { notes.append("values: " + argument.choices.joined(separator: ", ")) }
        if let defaultValue = argument.defaultValue { notes.append("default: \(defaultValue)") }
        guard !notes.isEmpty else { return argument.help }
        return (argument.help.isEmpty ? "" : argument.help + " ") + "(\(notes.joined(separator: "; ")))"
    }

    /// A list entry: the label indented by two, the help from `helpColumn`, wrapped; a
    /// label too long for its column puts the help on the next line.
    private static func row(_ label: String, _ help: String) -> [String] {
        let indentedLabel = "  " + label
        guard !help.isEmpty else { return [indentedLabel] }
        let helpWords = words(help)
        if indentedLabel.count + 2 <= helpColumn {
            let paddedLabel = indentedLabel + String(repeating: " ", count: helpColumn - indentedLabel.count)
            return wrap(helpWords, prefix: paddedLabel, indent: helpColumn)
        }
        return [indentedLabel] + wrap(helpWords, prefix: String(repeating: " ", count: helpColumn), indent: helpColumn)
    }

    /// The words of a line of prose.
    private static func words(_ text: String) -> [String] {
        text.split(separator: " ").map(String.init)
    }

    /// Fills lines greedily with `words` separated by a space: the first line starts with
    /// `prefix`, the next ones with `indent` spaces; a word longer than a line stands alone.
    private static func wrap(_ words: [String], prefix: String, indent: Int) -> [String] {
        var lines: [String] = []
        var line = prefix
        var lineHasWord = false
        for word in words {
            if lineHasWord && line.count + 1 + word.count > lineWidth {
                lines.append(line)
                line = String(repeating: " ", count: indent) + word
            } else {
                line += (lineHasWord ? " " : "") + word
            }
            lineHasWord = true
        }
        while !lineHasWord && line.last == " " { line.removeLast() }
        lines.append(line)
        return lines
    }
}
