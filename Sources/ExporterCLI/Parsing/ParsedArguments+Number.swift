extension ParsedArguments {
    /// The option's value as a finite number of at least `minimum`, or `nil` when absent.
    /// - Throws: `UsageError.invalidValue` ("--min-sqnr expects a number, got 'x'").
    func number(_ name: String, minimum: Double? = nil) throws -> Double? {
        guard let text = value(name) else { return nil }
        guard let number = Double(text), number.isFinite, minimum.map({ number >= $0 }) ?? true else {
            let expected = minimum.map { $0 == 0 ? "a non-negative number" : "a number of at least \($0)" } ?? "a number"
            throw UsageError.invalidValue(
                value: text, option: occurrences[command.option(named: name)?.name ?? name]?.last?.spelling ?? "--\(name)",
                expected: expected)
        }
        return number
    }
}
