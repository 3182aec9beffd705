import Foundation

extension FarmRunner {
    /// `error` as a report records it: its lines (``ExporterError/descriptionLines``, one for
    /// another error), each with its control characters escaped as `\u{XX}`, a newline too, then
    /// joined by newlines. Text taken from inputs (a model's name, a path) can neither forge a
    /// line nor drive a terminal, as in every message of the tool; a message meant to span lines
    /// keeps them.
    static func reportText(_ error: Error) -> String {
        reportText(lines: (error as? ExporterError)?.descriptionLines ?? ["\(error)"])
    }

    /// `lines`, each escaped as ``reportText(_:)`` escapes them, joined by newlines.
    static func reportText(lines: [String]) -> String {
        lines.map(escaped).joined(separator: "\n")
    }

    /// The message a child `exporter` printed on standard error, as a report records it: its
    /// lines but warnings, without the first one's `Error: ` and without the usage lines a
    /// usage error ends with (a farm job has no command line to fix), each escaped (the child
    /// escapes its messages already: this is for what it did not write itself).
    static func childMessage(_ errorBytes: [UInt8]) -> String {
        var lines = String(decoding: errorBytes, as: UTF8.self).split(separator: "\n").map(String.init)
            .filter { !$0.hasPrefix("warning: ") }
        if lines.count >= 2, lines[lines.count - 2].hasPrefix("Usage: exporter"),
            lines[lines.count - 1].hasPrefix("  See 'exporter")
        {
            lines.removeLast(2)
        }
        if let first = lines.first, first.hasPrefix("Error: ") { lines[0] = String(first.dropFirst("Error: ".count)) }
        return reportText(lines: lines)
    }

    /// `text` on one line: every control character (newline and tab too, DEL, C1) as `\u{XX}`.
    static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: \.isControlCharacter) else { return text }
        var result = ""
        for scalar in text.unicodeScalars {
            if scalar.isControlCharacter { result += scalar.shownEscaped } else { result.unicodeScalars.append(scalar) }
        }
        return result
    }
}
