import ExporterKit

extension ParsedArguments {
    /// The option's value as a finite number of at least `minimum` (and at most `maximum`), or
    /// `nil` when absent.
    /// - Throws: `UsageError.invalidValue` ("--min-sqnr expects a number, got 'x'").
    func number(_ name: String, minimum: Double? = nil, maximum: Double? = nil) throws -> Double? {
        guard let text = value(name) else { return nil }
        // Decimal only: Double("0x10") is 16, a reading nobody typing a threshold means.
        let decimal = text.allSatisfy { $0.isASCII && ($0.isNumber || "+-.eE".contains($0)) }
        guard decimal, let number = Double(text), number.isFinite, minimum.map({ number >= $0 }) ?? true,
            maximum.map({ number <= $0 }) ?? true
        else {
            let expected: String
            switch (minimum, maximum) {
            case (let low?, let high?):
                expected = "a number from \(Format.decimal(low, places: 0)) to \(Format.decimal(high, places: 0))"
            case (let low?, nil): expected = low == 0 ? "a non-negative number" : "a number of at least \(low)"
            default: expected = "a number"
            }
            throw UsageError.invalidValue(
                value: text,
                option: occurrences[command.option(named: name)?.name ?? name]?.last?.spelling ?? "--\(name)",
                expected: expected)
        }
        return number
    }
}
