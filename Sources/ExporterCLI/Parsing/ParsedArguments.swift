/// The values a command line gave a command, looked up by any of an option's long names
/// (`value("context")` and `value("max-context-length")` are the same). Choices are
/// already in their canonical spelling; absent options report their declared default.
struct ParsedArguments {
    /// One appearance of an option on the command line.
    struct Occurrence: Equatable {
        /// The spelling typed (`--context`, `-f`), used to name the option in errors.
        var spelling: String
        /// The value given; `nil` for a flag.
        var value: String?
    }

    /// The command these arguments were parsed for.
    let command: CommandSpec
    /// The appearances of each option given, keyed by canonical name, in order.
    let occurrences: [String: [Occurrence]]
    /// The positionals given, in order.
    let positionals: [String]

    /// Whether the flag was given.
    func flag(_ name: String) -> Bool {
        isGiven(name)
    }

    /// Whether the option or flag was given (as opposed to reporting its default).
    func isGiven(_ name: String) -> Bool {
        guard let spec = spec(name) else { return false }
        return occurrences[spec.name] != nil
    }

    /// The option's value (the last one for a repeating option), or its default.
    func value(_ name: String) -> String? {
        values(name).last
    }

    /// Every value given for the option, or its default alone, or nothing.
    func values(_ name: String) -> [String] {
        guard let spec = spec(name) else { return [] }
        let given = occurrences[spec.name, default: []].compactMap(\.value)
        return given.isEmpty ? (spec.defaultValue.map { [$0] } ?? []) : given
    }

    /// The positional at `index`, counting from 0.
    func positional(_ index: Int) -> String? {
        positionals.indices.contains(index) ? positionals[index] : nil
    }

    /// The option's value as an integer, or `nil` when absent without a default.
    /// - Throws: `UsageError.invalidValue` ("--x expects an integer, got 'abc'").
    func int(_ name: String) throws -> Int? {
        try integer(name, expected: "an integer") { _ in true }
    }

    /// The option's value as an integer of at least `range.lowerBound`.
    /// - Throws: `UsageError.invalidValue` ("--x expects a positive integer, got '0'").
    func int(_ name: String, range: PartialRangeFrom<Int>) throws -> Int? {
        let expected: String
        switch range.lowerBound {
        case 1: expected = "a positive integer"
        case 0: expected = "a non-negative integer"
        default: expected = "an integer of at least \(range.lowerBound)"
        }
        return try integer(name, expected: expected, isAccepted: range.contains)
    }

    /// The option's value as an integer within `range`.
    /// - Throws: `UsageError.invalidValue` ("--x expects an integer from 1 to 8, got '9'").
    func int(_ name: String, range: ClosedRange<Int>) throws -> Int? {
        let expected = "an integer from \(range.lowerBound) to \(range.upperBound)"
        return try integer(name, expected: expected, isAccepted: range.contains)
    }

    /// The option's value as a case of `type`, whose raw values should be the option's
    /// choices; matched exactly, then ignoring case.
    /// - Throws: `UsageError.invalidChoice` listing the cases when none matches.
    func choice<Choice: RawRepresentable & CaseIterable>(_ name: String, as type: Choice.Type) throws -> Choice?
    where Choice.RawValue == String {
        guard let text = value(name) else { return nil }
        let rawValues = Choice.allCases.map(\.rawValue)
        guard let rawValue = CommandInvocation.matchChoice(text, in: rawValues), let choice = Choice(rawValue: rawValue)
        else {
            throw UsageError.invalidChoice(value: text, option: displayName(name), choices: rawValues)
        }
        return choice
    }

    /// Shared body of the `int` accessors.
    private func integer(_ name: String, expected: String, isAccepted: (Int) -> Bool) throws -> Int? {
        guard let text = value(name) else { return nil }
        guard let number = Int(text), isAccepted(number) else {
            throw UsageError.invalidValue(value: text, option: displayName(name), expected: expected)
        }
        return number
    }

    /// The declared option for any of its long names; a name the command does not
    /// declare is a programming mistake, caught by `assert` in debug builds.
    private func spec(_ name: String) -> ArgumentSpec? {
        let spec = command.option(named: name)
        assert(spec != nil, "'\(command.name)' declares no option '--\(name)'")
        return spec
    }

    /// How errors name the option: as last typed, or by its canonical name when absent.
    private func displayName(_ name: String) -> String {
        guard let spec = spec(name) else { return "--\(name)" }
        return occurrences[spec.name]?.last?.spelling ?? "--\(spec.name)"
    }
}
