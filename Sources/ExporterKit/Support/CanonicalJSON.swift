import Foundation

/// The one JSON form every file and `--json` output of the tool uses: sorted keys, two-space
/// indentation, unescaped slashes, a final newline — so artifacts diff cleanly and reproduce.
public enum CanonicalJSON {
    /// The canonical bytes of `value`.
    /// - Throws: an `EncodingError` only for non-finite doubles, which the tool never stores.
    public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        return [UInt8](try encoder.encode(value)) + [0x0A]
    }

    /// The canonical text of `value`.
    /// - Throws: as `encode(_:)`.
    public static func string<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try encode(value), as: UTF8.self)
    }
}
