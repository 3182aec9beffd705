/// A command of the tool, described as a value: what it is called, what it does, the
/// arguments it accepts and the subcommands it dispatches to.
///
/// `-h/--help` is accepted by every command and `--version` by those with a `version`
/// and their subcommands; neither is declared in `arguments`.
struct CommandSpec: Sendable, Equatable {
    /// The word that invokes the command (`plan`), or the tool's name for the root.
    var name: String
    /// One sentence shown after `OVERVIEW:` and in the parent's `SUBCOMMANDS` list.
    var abstract: String
    /// Longer explanation shown under the overview; `\n` starts a new line.
    var discussion: String
    /// Printed by `--version`; `nil` means the command answers `--version` with its parent's
    /// version, or refuses it when no ancestor has one.
    var version: String?
    /// Options, flags and positionals, in the order help lists them.
    var arguments: [ArgumentSpec]
    /// Commands selected by a first positional equal to their name.
    var subcommands: [CommandSpec]

    /// Describes a command; only the name and abstract are required.
    init(
        name: String,
        abstract: String,
        discussion: String = "",
        version: String? = nil,
        arguments: [ArgumentSpec] = [],
        subcommands: [CommandSpec] = []
    ) {
        self.name = name
        self.abstract = abstract
        self.discussion = discussion
        self.version = version
        self.arguments = arguments
        self.subcommands = subcommands
    }

    /// The flags and options, in declaration order.
    var options: [ArgumentSpec] { arguments.filter { $0.kind != .positional } }

    /// The positionals, in the order they are filled.
    var positionals: [ArgumentSpec] { arguments.filter { $0.kind == .positional } }

    /// The flag or option whose name or alias is `name` (without dashes).
    func option(named name: String) -> ArgumentSpec? {
        options.first { $0.name == name || $0.aliases.contains(name) }
    }

    /// The flag or option whose short name is `shortName`.
    func option(shortName: Character) -> ArgumentSpec? {
        options.first { $0.shortName == shortName }
    }

    /// Mistakes in this specification and its subcommands (duplicate names, a default that
    /// is not one of the choices, a required positional after an optional one…), one
    /// message each; a test asserts the list is empty. `inheritsVersion`: an ancestor has a
    /// version, so `--version` is taken here too.
    func specificationProblems(inheritsVersion: Bool = false) -> [String] {
        var problems: [String] = []
        let hasVersion = inheritsVersion || version != nil
        var longNames = ["help"] + (hasVersion ? ["version"] : [])
        var shortNames: [Character] = ["h"]
        for option in options {
            for longName in [option.name] + option.aliases {
                if longNames.contains(longName) { problems.append("\(name): '--\(longName)' declared twice") }
                longNames.append(longName)
            }
            if let shortName = option.shortName {
                if shortNames.contains(shortName) { problems.append("\(name): '-\(shortName)' declared twice") }
                shortNames.append(shortName)
            }
            if let defaultValue = option.defaultValue, !option.choices.isEmpty, !option.choices.contains(defaultValue) {
                problems.append("\(name): default '\(defaultValue)' of '--\(option.name)' is not one of its choices")
            }
            if option.isRequired && option.defaultValue != nil {
                problems.append("\(name): required '--\(option.name)' has a default")
            }
        }
        for (index, positional) in positionals.enumerated() {
            let isLast = index == positionals.count - 1
            if positional.repeats && !isLast {
                problems.append("\(name): repeating '<\(positional.name)>' is not last")
            }
            if positional.isRequired && index > 0 && !positionals[index - 1].isRequired {
                problems.append("\(name): required '<\(positional.name)>' follows an optional positional")
            }
        }
        let subcommandNames = subcommands.map(\.name)
        for (index, subcommandName) in subcommandNames.enumerated()
        where subcommandNames[..<index].contains(subcommandName) {
            problems.append("\(name): subcommand '\(subcommandName)' declared twice")
        }
        return problems + subcommands.flatMap { $0.specificationProblems(inheritsVersion: hasVersion) }
    }
}

/// One flag, option or positional of a command.
struct ArgumentSpec: Sendable, Equatable {
    /// What kind of argument this is.
    enum Kind: Sendable, Equatable {
        /// `--overwrite`: present or not, takes no value.
        case flag
        /// `--context 4096` or `--context=4096`.
        case option
        /// A bare word filled in order (`<model>`).
        case positional
    }

    /// What kind of argument this is.
    var kind: Kind
    /// The canonical long name without dashes (`max-context-length`), or the positional's name.
    var name: String
    /// Other long names accepted for the same option (`context`).
    var aliases: [String] = []
    /// A one-letter name used as `-f`.
    var shortName: Character?
    /// The placeholder shown in help (`<n>`); the name when not given.
    var valueName: String
    /// When not empty, the only values accepted (matched exactly, then ignoring case).
    var choices: [String] = []
    /// The value reported when the option is absent; shown in help.
    var defaultValue: String?
    /// Whether the option may be given several times, or the positional takes all the rest.
    var repeats = false
    /// Whether the argument must be given: a positional to fill, or an option the command
    /// cannot run without (`synth --out`), which usage lines show without brackets.
    var isRequired = false
    /// One sentence shown in help.
    var help: String

    /// The value names of options whose value is a path (`<dir>`, `<file>`, …): an empty value
    /// is refused, as it would silently mean the current folder.
    static let pathValueNames: Set<String> = ["dir", "file", "path", "checkpoint", "aimodel"]

    /// Whether the option's value is a path.
    var takesPath: Bool { kind == .option && ArgumentSpec.pathValueNames.contains(valueName) }

    /// A flag such as `--overwrite` (or `-f`).
    static func flag(_ name: String, aliases: [String] = [], shortName: Character? = nil, help: String) -> ArgumentSpec
    {
        ArgumentSpec(kind: .flag, name: name, aliases: aliases, shortName: shortName, valueName: name, help: help)
    }

    /// An option with a value such as `--platform iOS`; `choices` restricts its values,
    /// `repeats` lets it be given several times (`--device h17p --device h16`) and
    /// `isRequired` refuses a command line without it (`synth --out`).
    static func option(
        _ name: String,
        aliases: [String] = [],
        shortName: Character? = nil,
        valueName: String? = nil,
        choices: [String] = [],
        defaultValue: String? = nil,
        repeats: Bool = false,
        isRequired: Bool = false,
        help: String
    ) -> ArgumentSpec {
        ArgumentSpec(
            kind: .option, name: name, aliases: aliases, shortName: shortName, valueName: valueName ?? name,
            choices: choices, defaultValue: defaultValue, repeats: repeats, isRequired: isRequired, help: help)
    }

    /// A positional such as `<model>`; a repeating one takes every remaining positional.
    static func positional(_ name: String, isRequired: Bool = true, repeats: Bool = false, help: String) -> ArgumentSpec
    {
        ArgumentSpec(
            kind: .positional, name: name, valueName: name, repeats: repeats, isRequired: isRequired, help: help)
    }
}
