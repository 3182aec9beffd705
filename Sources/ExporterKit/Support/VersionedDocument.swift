import Foundation

/// A JSON document of ours that starts with a `schema` (a manifest), read strictly: parsed by
/// ``JSONParser`` (which says what is wrong and at which byte), its schema checked before
/// anything else, then decoded with every failure naming its key path in plain words
/// (`'tensors[2].name' is missing`, `'tensors[0].parts[0].offset' should be an integer, found
/// 64.5`), never `DecodingError`'s debug text.
public enum VersionedDocument {
    /// Why a document could not be read.
    public enum Failure: Error, Equatable {
        /// Not JSON, not an object, no schema, or a value that does not fit its key.
        case invalid(reason: String)
        /// A schema other than the one this version reads.
        case unsupportedSchema(found: String)
    }

    /// Decodes `type` from `bytes`, whose `schema` must be `schema`.
    /// - Parameter what: how messages name the document ("the manifest").
    /// - Throws: `VersionedDocument.Failure`.
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8], schema: String, what: String) throws
        -> T
    {
        let document: JSONValue
        do {
            document = try JSONParser.parse(bytes)
        } catch let error as JSONParseError {
            throw Failure.invalid(reason: "\(what) is not valid JSON: \(error.description)")
        }
        guard let object = document.objectValue else {
            throw Failure.invalid(reason: "\(what) is \(document.typeDescription), not an object")
        }
        guard let schemaValue = object["schema"], !schemaValue.isNull else {
            throw Failure.invalid(reason: "\(what) has no schema")
        }
        guard let found = schemaValue.stringValue else {
            throw Failure.invalid(reason: "'schema' should be a string, found \(schemaValue.typeDescription)")
        }
        guard found == schema else { throw Failure.unsupportedSchema(found: found) }
        do {
            return try JSONValueDecoder.decode(type, from: document)
        } catch let error as DecodingError {
            throw Failure.invalid(reason: describe(error, in: document))
        }
    }

    /// A decoding failure in plain words, naming the key path (`tensors[2].parts[0].offset`).
    static func describe(_ error: DecodingError, in document: JSONValue) -> String {
        switch error {
        case .keyNotFound(let key, let context):
            return "'\(keyPath(context.codingPath + [key]))' is missing"
        case .valueNotFound(_, let context), .typeMismatch(_, let context):
            return "'\(keyPath(context.codingPath))' \(context.debugDescription)"
        case .dataCorrupted(let context):
            if context.debugDescription.hasPrefix("should") {
                return "'\(keyPath(context.codingPath))' \(context.debugDescription)"
            }
            let found = value(at: context.codingPath, in: document).map(literal) ?? "a value"
            return "'\(keyPath(context.codingPath))' has an invalid value \(found)"
        @unknown default:
            return "\(error)"
        }
    }

    /// `tensors[2].parts[0].offset`; the root is `(document)`.
    static func keyPath(_ path: [CodingKey]) -> String {
        var text = ""
        for key in path {
            if let index = key.intValue {
                text += "[\(index)]"
            } else {
                text += (text.isEmpty ? "" : ".") + key.stringValue
            }
        }
        return text.isEmpty ? "(document)" : text
    }

    /// The value at `path`, when there is one.
    static func value(at path: [CodingKey], in document: JSONValue) -> JSONValue? {
        var current = document
        for key in path {
            if let index = key.intValue, case .array(let items) = current, items.indices.contains(index) {
                current = items[index]
            } else if case .object(let object) = current, let member = object[key.stringValue] {
                current = member
            } else {
                return nil
            }
        }
        return current
    }

    /// A short rendering of a value for a message: a string quoted, a number as written.
    static func literal(_ value: JSONValue) -> String {
        switch value {
        case .string(let text): return "'\(text)'"
        case .number(let literal): return literal
        case .bool(let flag): return flag ? "true" : "false"
        default: return value.typeDescription
        }
    }
}
