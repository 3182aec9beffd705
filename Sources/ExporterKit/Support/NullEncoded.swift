/// An optional that JSON writes as `null` when absent, instead of leaving its key out:
/// our formats never omit a field (docs/MANIFEST.md), so a reader can tell "none" from
/// "written by an older version". Synthesised `Codable` does the rest.
@propertyWrapper
public struct NullEncoded<Value: Codable & Equatable & Sendable>: Codable, Equatable, Sendable {
    /// The value, nil when none.
    public var wrappedValue: Value?

    /// Wraps `wrappedValue`.
    public init(wrappedValue: Value?) { self.wrappedValue = wrappedValue }

    /// Decodes `null` as nil, anything else as `Value`.
    /// - Throws: `DecodingError` when the value is neither `null` nor a `Value`.
    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        wrappedValue = container.decodeNil() ? nil : try container.decode(Value.self)
    }

    /// Encodes nil as `null`, so the key is always written.
    /// - Throws: the encoder's error for a value it cannot encode.
    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue { try container.encode(wrappedValue) } else { try container.encodeNil() }
    }
}

extension KeyedDecodingContainer {
    /// A missing key decodes as nil, as an optional does.
    /// - Throws: `DecodingError` when the key is present with a value that is neither `null` nor a `Value`.
    public func decode<Value>(_ type: NullEncoded<Value>.Type, forKey key: Key) throws -> NullEncoded<Value> {
        try decodeIfPresent(type, forKey: key) ?? NullEncoded(wrappedValue: nil)
    }
}
