/// Writes a `JSONValue` as pretty JSON (two-space indentation, members in their order, final newline),
/// for command output built from values rather than `Codable` types.
public enum JSONWriter {
    /// The text of `value`.
    public static func string(_ value: JSONValue) -> String {
        var output = ""
        write(value, indent: 0, into: &output)
        return output + "\n"
    }

    private static func write(_ value: JSONValue, indent: Int, into output: inout String) {
        let padding = String(repeating: "  ", count: indent + 1)
        switch value {
        case .null: output += "null"
        case .bool(let flag): output += flag ? "true" : "false"
        case .number(let literal): output += literal
        case .string(let text): output += quoted(text)
        case .array(let items):
            guard !items.isEmpty else {
                output += "[]"
                return
            }
            output += "[\n"
            for (index, item) in items.enumerated() {
                output += padding
                write(item, indent: indent + 1, into: &output)
                output += index == items.count - 1 ? "\n" : ",\n"
            }
            output += String(repeating: "  ", count: indent) + "]"
        case .object(let object):
            guard !object.members.isEmpty else {
                output += "{}"
                return
            }
            output += "{\n"
            for (index, member) in object.members.enumerated() {
                output += padding + quoted(member.key) + " : "
                write(member.value, indent: indent + 1, into: &output)
                output += index == object.members.count - 1 ? "\n" : ",\n"
            }
            output += String(repeating: "  ", count: indent) + "}"
        }
    }

    /// `text` as a JSON string literal: quotes, backslashes and control characters escaped,
    /// everything else as UTF-8.
    static func quoted(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    result += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result + "\""
    }
}
