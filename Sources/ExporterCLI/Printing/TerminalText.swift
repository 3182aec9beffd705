/// Text from inputs made safe to print: a hostile config or file name must not be able to
/// drive the terminal (escape sequences, carriage returns) through an error message.
enum TerminalText {
    /// `text` with control characters other than newline and tab shown as `\u{XX}`.
    static func sanitized(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isUnsafe) else { return text }
        var result = ""
        for scalar in text.unicodeScalars {
            if isUnsafe(scalar) {
                result += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    private static func isUnsafe(_ scalar: Unicode.Scalar) -> Bool {
        guard scalar != "\n", scalar != "\t" else { return false }
        return scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }
}
