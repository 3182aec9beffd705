import Foundation

/// Number and size formatting for human output (JSON output stays raw): the command line,
/// the HTML report and error messages all print sizes this way.
public enum Format {
    /// `1543714304` → `1,543,714,304`.
    public static func grouped(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var result = ""
        for (index, character) in digits.enumerated() {
            if index > 0, (digits.count - index) % 3 == 0 { result.append(",") }
            result.append(character)
        }
        return value < 0 ? "-" + result : result
    }

    /// A count with its noun, singular for one: `1 token`, `4,096 tokens`.
    public static func count(_ value: Int, _ noun: String) -> String {
        "\(grouped(value)) \(noun)\(value == 1 ? "" : "s")"
    }

    /// Binary size: `117440512` → `112.0 MiB`.
    public static func mebibytes(_ bytes: Int) -> String {
        scaled(bytes, base: 1024, units: ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"])
    }

    /// Decimal size: `891500000` → `891.5 MB`.
    public static func megabytes(_ bytes: Int) -> String {
        scaled(bytes, base: 1000, units: ["B", "kB", "MB", "GB", "TB", "PB", "EB"])
    }

    private static func scaled(_ bytes: Int, base: Double, units: [String]) -> String {
        var value = Double(bytes)
        var unit = 0
        while value >= base, unit < units.count - 1 {
            value /= base
            unit += 1
        }
        return unit == 0 ? "\(bytes) B" : String(format: "%.1f %@", value, units[unit])
    }

    /// Two decimals.
    public static func decimal(_ value: Double, places: Int = 2) -> String {
        // Rounded first, halves away from zero as the manifest's figures are: printf alone
        // rounds an exact half to even (8.125 → "8.12" where the manifest says 8.13).
        let scale = pow(10, Double(places))
        return String(format: "%.\(places)f", value.isFinite ? (value * scale).rounded() / scale : value)
    }

    /// Rows aligned in columns; `rightAligned` lists the column indices aligned right.
    public static func table(_ rows: [[String]], rightAligned: Set<Int> = [], indent: String = "") -> [String] {
        guard let columns = rows.map(\.count).max() else { return [] }
        var widths = Array(repeating: 0, count: columns)
        for row in rows {
            for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) }
        }
        return rows.map { row in
            let cells = row.enumerated().map { index, cell in
                let padding = String(repeating: " ", count: widths[index] - cell.count)
                return rightAligned.contains(index) ? padding + cell : cell + padding
            }
            let line = indent + cells.joined(separator: "  ")
            return String(line.reversed().drop(while: { $0 == " " }).reversed())
        }
    }
}

extension Format {
    /// `text`, or its first 40 characters and `…` when longer: a name or token quoted in a
    /// message, which a hostile input could make a page long.
    public static func shortened(_ text: String) -> String {
        text.count > 40 ? String(text.prefix(40)) + "…" : text
    }

    /// Text from inputs made safe to print: `text` as one line, every control character (C0
    /// including newline and tab, DEL, C1) shown as `\u{XX}`, so that a hostile config, manifest
    /// or file name can neither drive a terminal nor forge a line of a message or a report.
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: \.isControlCharacter) else { return text }
        var result = ""
        for scalar in text.unicodeScalars {
            if scalar.isControlCharacter { result += scalar.shownEscaped } else { result.unicodeScalars.append(scalar) }
        }
        return result
    }
}

extension Unicode.Scalar {
    /// Whether this is a control character (general category Cc: C0 with newline and tab, DEL,
    /// C1), which names and printed text must not carry raw.
    public var isControlCharacter: Bool { value < 0x20 || (0x7F...0x9F).contains(value) }

    /// How a control character is shown in printed text and reports: `\u{1B}`.
    public var shownEscaped: String { "\\u{" + String(value, radix: 16, uppercase: true) + "}" }
}
