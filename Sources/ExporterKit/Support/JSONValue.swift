/// A parsed JSON document, kept close to its text: object keys in their order,
/// numbers with their literal so integers stay exact.
///
/// Foundation's parsers either lose that (`JSONSerialization` turns `true` into `1`)
/// or cannot say which key of which file is wrong; configs and safetensors headers
/// need both.
public indirect enum JSONValue: Equatable, Sendable {
    /// `null`, kept distinct from an absent key.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number with its literal text, e.g. `"1e-06"` or `"151936"`.
    case number(String)
    /// A string, its escapes resolved.
    case string(String)
    /// An array, in document order.
    case array([JSONValue])
    /// An object, its keys in document order.
    case object(JSONObject)

    /// The value as an exact integer, when it is a number written without fraction or exponent
    /// (or with a zero fraction) that fits in `Int`.
    public var intValue: Int? {
        guard case .number(let literal) = self else { return nil }
        if let exact = Int(literal) { return exact }
        guard let double = Double(literal), double.rounded() == double,
            double >= -9.0e15, double <= 9.0e15
        else { return nil }
        return Int(double)
    }

    /// The value as an integer when it is written as one (`64`, not `64.0` or `6.4e1`), as formats
    /// with unsigned integer fields (safetensors' `shape` and `data_offsets`) require.
    public var integerLiteralValue: Int? {
        guard case .number(let literal) = self else { return nil }
        return Int(literal)
    }

    /// The value as a double, when it is a number.
    public var doubleValue: Double? {
        guard case .number(let literal) = self else { return nil }
        return Double(literal)
    }

    /// The value as a string, when it is one.
    public var stringValue: String? {
        guard case .string(let text) = self else { return nil }
        return text
    }

    /// The value as a boolean, when it is one.
    public var boolValue: Bool? {
        guard case .bool(let flag) = self else { return nil }
        return flag
    }

    /// The value as an array, when it is one.
    public var arrayValue: [JSONValue]? {
        guard case .array(let items) = self else { return nil }
        return items
    }

    /// The value as an object, when it is one.
    public var objectValue: JSONObject? {
        guard case .object(let object) = self else { return nil }
        return object
    }

    /// Whether the value is `null`.
    public var isNull: Bool { self == .null }

    /// Whether the two mean the same data: numbers equal by value (`2` and `2.0`), object
    /// members in any order. (`==` compares documents: literals and key order too.)
    public func isEquivalent(to other: JSONValue) -> Bool {
        switch (self, other) {
        case (.number, .number):
            return doubleValue == other.doubleValue
        case (.array(let items), .array(let otherItems)):
            return items.count == otherItems.count
                && zip(items, otherItems).allSatisfy { $0.isEquivalent(to: $1) }
        case (.object(let object), .object(let otherObject)):
            return object.members.count == otherObject.members.count
                && object.members.allSatisfy { member in
                    otherObject[member.key].map { member.value.isEquivalent(to: $0) } ?? false
                }
        default:
            return self == other
        }
    }

    /// A short name of the value's JSON type, for error messages ("a string", "an object").
    public var typeDescription: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .number: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }
}

/// A JSON object with its keys in document order; duplicate keys are rejected by the parser.
public struct JSONObject: Equatable, Sendable {
    /// The members in document order.
    public private(set) var members: [(key: String, value: JSONValue)]
    private var indexByKey: [String: Int]

    /// An object with the given members; a later duplicate key replaces the earlier value.
    public init(_ members: [(key: String, value: JSONValue)] = []) {
        self.members = []
        self.indexByKey = [:]
        for member in members { self[member.key] = member.value }
    }

    /// The keys in document order.
    public var keys: [String] { members.map(\.key) }

    /// Whether the object has `key`.
    public func contains(_ key: String) -> Bool { indexByKey[key] != nil }

    /// The value at `key`, or nil when absent.
    public subscript(key: String) -> JSONValue? {
        get { indexByKey[key].map { members[$0].value } }
        set {
            if let index = indexByKey[key] {
                if let newValue {
                    members[index].value = newValue
                } else {
                    members.remove(at: index)
                    indexByKey = Dictionary(
                        uniqueKeysWithValues: members.enumerated().map { ($1.key, $0) })
                }
            } else if let newValue {
                indexByKey[key] = members.count
                members.append((key, newValue))
            }
        }
    }

    /// Equal when the members are equal in the same order: key order is part of a document.
    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        lhs.members.count == rhs.members.count
            && zip(lhs.members, rhs.members).allSatisfy { $0.key == $1.key && $0.value == $1.value }
    }
}

/// Why a JSON text could not be parsed, with the byte offset where it went wrong.
public struct JSONParseError: Error, Equatable, CustomStringConvertible, Sendable {
    /// What is wrong, lowercase, e.g. "duplicate key \"a\"".
    public let reason: String
    /// Byte offset in the text.
    public let offset: Int

    /// `<reason> at byte <offset>`, for a message naming the file.
    public var description: String { "\(reason) at byte \(offset)" }
}

/// A strict RFC 8259 parser over UTF-8 bytes: no trailing commas, no comments,
/// duplicate keys refused, nesting bounded so hostile input cannot exhaust the stack.
public struct JSONParser {
    /// The deepest nesting accepted.
    public static let maximumDepth = 128

    private let bytes: UnsafeBufferPointer<UInt8>
    private var position = 0
    private var depth = 0
    /// False to check the syntax only (``checkSyntax(_:)``): no value is built.
    private let building: Bool

    private init(bytes: UnsafeBufferPointer<UInt8>, building: Bool = true) {
        self.bytes = bytes
        self.building = building
    }

    /// Parses one JSON document that fills `bytes` (surrounding white space allowed).
    /// - Throws: `JSONParseError` naming what is wrong and where.
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws -> JSONValue {
        try parse(bytes, building: true)
    }

    /// Checks that `bytes` hold one JSON document, by the same grammar as `parse(_:)`
    /// but building no value, several times faster: for files read as text elsewhere (a
    /// tokenizer's 150,000-entry vocabulary). Duplicate keys are let through, as the
    /// libraries that load such files let them (the last one wins).
    /// - Throws: `JSONParseError` naming what is wrong and where.
    public static func checkSyntax(_ bytes: UnsafeRawBufferPointer) throws {
        guard String(validating: bytes.bindMemory(to: UInt8.self), as: UTF8.self) != nil else {
            let typed = bytes.bindMemory(to: UInt8.self)
            // Where: the first string whose bytes are not UTF-8, as the full parse would say.
            _ = try parse(bytes, building: true)
            throw JSONParseError(reason: "invalid UTF-8", offset: typed.count)
        }
        _ = try parse(bytes, building: false)
    }

    private static func parse(_ bytes: UnsafeRawBufferPointer, building: Bool) throws -> JSONValue {
        let typed = bytes.bindMemory(to: UInt8.self)
        // RFC 8259 forbids it, and editors that write it do not show it: named, not "unexpected character".
        if typed.starts(with: [0xEF, 0xBB, 0xBF]) {
            throw JSONParseError(
                reason: "the text starts with a UTF-8 byte-order mark (EF BB BF, invisible in most editors), "
                    + "which JSON does not allow",
                offset: 0)
        }
        var parser = JSONParser(bytes: typed, building: building)
        parser.skipWhiteSpace()
        let value = try parser.parseValue()
        parser.skipWhiteSpace()
        guard parser.position == typed.count else {
            throw JSONParseError(reason: "unexpected data after the document", offset: parser.position)
        }
        return value
    }

    /// Parses one JSON document from a byte array.
    /// - Throws: `JSONParseError` naming what is wrong and where.
    public static func parse(_ bytes: [UInt8]) throws -> JSONValue {
        try bytes.withUnsafeBytes { try parse($0) }
    }

    private func failure(_ reason: String, at offset: Int? = nil) -> JSONParseError {
        JSONParseError(reason: reason, offset: offset ?? position)
    }

    private mutating func skipWhiteSpace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private mutating func parseValue() throws -> JSONValue {
        guard position < bytes.count else { throw failure("unexpected end of data") }
        switch bytes[position] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw failure("unexpected character")
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws {
        let start = position
        let count = literal.utf8CodeUnitCount
        guard bytes.count - position >= count else { throw failure("invalid literal", at: start) }
        let text = literal.utf8Start
        for index in 0..<count where bytes[position + index] != text[index] {
            throw failure("invalid literal", at: start)
        }
        position += count
    }

    private mutating func enter() throws {
        depth += 1
        guard depth <= JSONParser.maximumDepth else {
            throw failure("nesting deeper than \(JSONParser.maximumDepth) levels")
        }
    }

    private mutating func parseObject() throws -> JSONValue {
        try enter()
        position += 1
        var object = JSONObject()
        skipWhiteSpace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
            position += 1
            depth -= 1
            return .object(object)
        }
        while true {
            skipWhiteSpace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else {
                throw failure("expected a string key")
            }
            let keyOffset = position
            let key = try parseString()
            // By the object's index (a list of every key, per key, made a safetensors header of
            // 44,000 tensors take seconds to parse); the earlier spelling only for the message.
            if building, object[key] != nil, let earlier = object.keys.first(where: { $0 == key }) {
                // Swift's string equality takes one text in two Unicode forms as one key.
                let forms =
                    earlier.utf8.elementsEqual(key.utf8)
                    ? ""
                    : " (\"\(FileSystemName.shownByScalars(earlier))\" and \"\(FileSystemName.shownByScalars(key))\": "
                        + "one text in two Unicode forms, one key to this tool)"
                throw failure("duplicate key \"\(key)\"" + forms, at: keyOffset)
            }
            skipWhiteSpace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else {
                throw failure(building ? "expected ':' after key \"\(key)\"" : "expected ':' after a key")
            }
            position += 1
            skipWhiteSpace()
            let value = try parseValue()
            if building { object[key] = value }
            skipWhiteSpace()
            guard position < bytes.count else { throw failure("unexpected end of data in an object") }
            if bytes[position] == UInt8(ascii: ",") {
                position += 1
                continue
            }
            guard bytes[position] == UInt8(ascii: "}") else { throw failure("expected ',' or '}'") }
            position += 1
            depth -= 1
            return building ? .object(object) : .null
        }
    }

    private mutating func parseArray() throws -> JSONValue {
        try enter()
        position += 1
        var items: [JSONValue] = []
        skipWhiteSpace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
            position += 1
            depth -= 1
            return .array(items)
        }
        while true {
            skipWhiteSpace()
            let item = try parseValue()
            if building { items.append(item) }
            skipWhiteSpace()
            guard position < bytes.count else { throw failure("unexpected end of data in an array") }
            if bytes[position] == UInt8(ascii: ",") {
                position += 1
                continue
            }
            guard bytes[position] == UInt8(ascii: "]") else { throw failure("expected ',' or ']'") }
            position += 1
            depth -= 1
            return .array(items)
        }
    }

    private mutating func parseNumber() throws -> JSONValue {
        let start = position
        func digits() -> Int {
            let begin = position
            while position < bytes.count, bytes[position] >= 0x30, bytes[position] <= 0x39 { position += 1 }
            return position - begin
        }
        if bytes[position] == UInt8(ascii: "-") { position += 1 }
        guard position < bytes.count else { throw failure("invalid number", at: start) }
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
        } else if digits() == 0 {
            throw failure("invalid number", at: start)
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            position += 1
            guard digits() > 0 else { throw failure("invalid number", at: start) }
        }
        if position < bytes.count, bytes[position] | 0x20 == UInt8(ascii: "e") {
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") {
                position += 1
            }
            guard digits() > 0 else { throw failure("invalid number", at: start) }
        }
        guard building else { return .null }
        let literal = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
        return .number(literal)
    }

    private mutating func parseHex4() throws -> UInt32 {
        guard bytes.count - position >= 4 else { throw failure("truncated \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[position]
            let digit: UInt32
            switch byte {
            case 0x30...0x39: digit = UInt32(byte - 0x30)
            case 0x41...0x46: digit = UInt32(byte - 0x41 + 10)
            case 0x61...0x66: digit = UInt32(byte - 0x61 + 10)
            default: throw failure("invalid \\u escape")
            }
            value = value << 4 | digit
            position += 1
        }
        return value
    }

    private mutating func parseString() throws -> String {
        let start = position
        position += 1
        var utf8: [UInt8] = []
        var runStart = position
        while true {
            guard position < bytes.count else { throw failure("unterminated string", at: start) }
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                if building { utf8.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<position])) }
                position += 1
                break
            }
            if byte < 0x20 { throw failure("control character in a string") }
            if byte != UInt8(ascii: "\\") {
                position += 1
                continue
            }
            if building { utf8.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<position])) }
            position += 1
            guard position < bytes.count else { throw failure("unterminated string", at: start) }
            let escape = bytes[position]
            position += 1
            switch escape {
            case UInt8(ascii: "\""): utf8.append(0x22)
            case UInt8(ascii: "\\"): utf8.append(0x5C)
            case UInt8(ascii: "/"): utf8.append(0x2F)
            case UInt8(ascii: "b"): utf8.append(0x08)
            case UInt8(ascii: "f"): utf8.append(0x0C)
            case UInt8(ascii: "n"): utf8.append(0x0A)
            case UInt8(ascii: "r"): utf8.append(0x0D)
            case UInt8(ascii: "t"): utf8.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try parseHex4()
                if (0xD800..<0xDC00).contains(scalar) {
                    guard bytes.count - position >= 2, bytes[position] == UInt8(ascii: "\\"),
                        bytes[position + 1] == UInt8(ascii: "u")
                    else { throw failure("unpaired surrogate in a string") }
                    position += 2
                    let low = try parseHex4()
                    guard (0xDC00..<0xE000).contains(low) else { throw failure("unpaired surrogate in a string") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00..<0xE000).contains(scalar) {
                    throw failure("unpaired surrogate in a string")
                }
                guard let unicode = Unicode.Scalar(scalar) else { throw failure("invalid \\u escape") }
                utf8.append(contentsOf: Array(String(Character(unicode)).utf8))
            default:
                throw failure("invalid escape in a string")
            }
            runStart = position
        }
        // Checking the syntax only, the whole text was checked to be UTF-8 first; escapes decode
        // to whole scalars, checked above.
        guard building else { return "" }
        guard let text = String(validating: utf8, as: UTF8.self) else {
            throw failure("invalid UTF-8 in a string", at: start)
        }
        return text
    }
}
