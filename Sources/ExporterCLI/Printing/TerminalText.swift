import ExporterKit

/// Text from inputs made safe to print: a hostile config, manifest or file name must not be
/// able to drive the terminal (escape sequences, carriage returns) or forge lines (newlines)
/// through a message or a report.
enum TerminalText {
    /// `text` as one line: every control character (C0 including newline and tab, DEL, C1)
    /// shown as `\u{XX}`.
    static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: \.isControlCharacter) else { return text }
        var result = ""
        for scalar in text.unicodeScalars {
            if scalar.isControlCharacter {
                result += scalar.shownEscaped
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

}
