/// Decodes a `Decodable` value from a parsed ``JSONValue``, as `JSONDecoder` would from its
/// text, but every failure carries the full coding path: `JSONDecoder` reports a number that
/// does not fit its field (`"offset": 64.5`) as "the given data was not valid JSON", with no
/// path at all. Keys are used as written (no key strategy); integers must be exact.
struct JSONValueDecoder {
    /// Decodes `type` from `value`.
    /// - Throws: `DecodingError` whose context's coding path names the offending key.
    static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try T(from: Node(value: value, codingPath: []))
    }

    /// A key of an array element, as `JSONDecoder` names it (`Index 3`, int value 3).
    struct IndexKey: CodingKey {
        let intValue: Int?
        var stringValue: String { "Index \(intValue ?? 0)" }
        init(_ index: Int) { intValue = index }
        init?(stringValue: String) { nil }
        init?(intValue: Int) { self.intValue = intValue }
    }

    /// A key of an object member, for the decoder's own use.
    struct MemberKey: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(_ key: String) { stringValue = key }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    /// One value and where it is: the decoder, and the single-value container, of that value.
    struct Node: Decoder, SingleValueDecodingContainer {
        let value: JSONValue
        let codingPath: [CodingKey]
        var userInfo: [CodingUserInfoKey: Any] { [:] }

        func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
            guard case .object(let object) = value else {
                throw mismatch([String: Any].self, "an object")
            }
            return KeyedDecodingContainer(Keyed<Key>(object: object, codingPath: codingPath))
        }

        func unkeyedContainer() throws -> UnkeyedDecodingContainer {
            guard case .array(let items) = value else { throw mismatch([Any].self, "an array") }
            return Unkeyed(items: items, codingPath: codingPath)
        }

        func singleValueContainer() throws -> SingleValueDecodingContainer { self }

        func decodeNil() -> Bool { value.isNull }

        func decode(_ type: Bool.Type) throws -> Bool {
            guard case .bool(let flag) = value else { throw mismatch(type, "a boolean") }
            return flag
        }

        func decode(_ type: String.Type) throws -> String {
            guard case .string(let text) = value else { throw mismatch(type, "a string") }
            return text
        }

        func decode(_ type: Double.Type) throws -> Double {
            guard case .number(let literal) = value else { throw mismatch(type, "a number") }
            guard let number = Double(literal), number.isFinite else {
                throw corrupted("should be a finite number, found \(literal)")
            }
            return number
        }

        func decode(_ type: Float.Type) throws -> Float {
            let number = try decode(Double.self)
            let single = Float(number)
            guard single.isFinite else { throw corrupted("should be a number within Float's range, found \(number)") }
            return single
        }

        func decode(_ type: Int.Type) throws -> Int { try integer(type) }
        func decode(_ type: Int8.Type) throws -> Int8 { try integer(type) }
        func decode(_ type: Int16.Type) throws -> Int16 { try integer(type) }
        func decode(_ type: Int32.Type) throws -> Int32 { try integer(type) }
        func decode(_ type: Int64.Type) throws -> Int64 { try integer(type) }
        func decode(_ type: UInt.Type) throws -> UInt { try integer(type) }
        func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type) }
        func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type) }
        func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type) }
        func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type) }

        func decode<T: Decodable>(_ type: T.Type) throws -> T { try T(from: self) }

        /// An integer of `type`: written as one, or as an exact integral number, and in range.
        private func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
            guard case .number(let literal) = value else { throw mismatch(type, "an integer") }
            if let exact = T(literal) { return exact }
            guard let number = Double(literal), number.rounded() == number, number.isFinite else {
                throw corrupted("should be an integer, found \(literal)")
            }
            guard let exact = T(exactly: number) else {
                throw corrupted("should be an integer from \(T.min) to \(T.max), found \(literal)")
            }
            return exact
        }

        private func mismatch(_ type: Any.Type, _ expected: String) -> DecodingError {
            let found = value.isNull ? "null" : value.typeDescription
            let context = DecodingError.Context(
                codingPath: codingPath, debugDescription: "should be \(expected), found \(found)")
            return value.isNull ? .valueNotFound(type, context) : .typeMismatch(type, context)
        }

        private func corrupted(_ description: String) -> DecodingError {
            .dataCorrupted(DecodingError.Context(codingPath: codingPath, debugDescription: description))
        }
    }

    struct Keyed<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let object: JSONObject
        let codingPath: [CodingKey]

        var allKeys: [Key] { object.keys.compactMap { Key(stringValue: $0) } }

        func contains(_ key: Key) -> Bool { object.contains(key.stringValue) }

        private func node(_ key: Key) throws -> Node {
            guard let value = object[key.stringValue] else {
                throw DecodingError.keyNotFound(
                    key, DecodingError.Context(codingPath: codingPath, debugDescription: "is missing"))
            }
            return Node(value: value, codingPath: codingPath + [key])
        }

        func decodeNil(forKey key: Key) throws -> Bool { try node(key).decodeNil() }
        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try node(key).decode(type) }
        func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try node(key).decode(type) }
        func decode(_ type: String.Type, forKey key: Key) throws -> String { try node(key).decode(type) }
        func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try node(key).decode(type) }
        func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try node(key).decode(type) }
        func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try node(key).decode(type) }
        func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try node(key).decode(type) }
        func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try node(key).decode(type) }
        func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try node(key).decode(type) }
        func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try node(key).decode(type) }
        func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try node(key).decode(type) }
        func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try node(key).decode(type) }
        func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try node(key).decode(type) }
        func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try node(key).decode(type) }
        func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try node(key).decode(type) }

        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
            -> KeyedDecodingContainer<NestedKey>
        {
            try node(key).container(keyedBy: type)
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> UnkeyedDecodingContainer {
            try node(key).unkeyedContainer()
        }

        func superDecoder() throws -> Decoder {
            Node(value: object["super"] ?? .null, codingPath: codingPath + [MemberKey("super")])
        }

        func superDecoder(forKey key: Key) throws -> Decoder {
            Node(value: object[key.stringValue] ?? .null, codingPath: codingPath + [key])
        }
    }

    struct Unkeyed: UnkeyedDecodingContainer {
        let items: [JSONValue]
        let codingPath: [CodingKey]
        var currentIndex = 0

        init(items: [JSONValue], codingPath: [CodingKey]) {
            self.items = items
            self.codingPath = codingPath
        }

        var count: Int? { items.count }
        var isAtEnd: Bool { currentIndex >= items.count }

        private mutating func next(_ type: Any.Type) throws -> Node {
            guard !isAtEnd else {
                throw DecodingError.valueNotFound(
                    type,
                    DecodingError.Context(
                        codingPath: codingPath + [IndexKey(currentIndex)],
                        debugDescription: "is past the end of the array"))
            }
            defer { currentIndex += 1 }
            return Node(value: items[currentIndex], codingPath: codingPath + [IndexKey(currentIndex)])
        }

        mutating func decodeNil() throws -> Bool {
            guard !isAtEnd, items[currentIndex].isNull else { return false }
            currentIndex += 1
            return true
        }

        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next(type).decode(type) }
        mutating func decode(_ type: Bool.Type) throws -> Bool { try next(type).decode(type) }
        mutating func decode(_ type: String.Type) throws -> String { try next(type).decode(type) }
        mutating func decode(_ type: Double.Type) throws -> Double { try next(type).decode(type) }
        mutating func decode(_ type: Float.Type) throws -> Float { try next(type).decode(type) }
        mutating func decode(_ type: Int.Type) throws -> Int { try next(type).decode(type) }
        mutating func decode(_ type: Int8.Type) throws -> Int8 { try next(type).decode(type) }
        mutating func decode(_ type: Int16.Type) throws -> Int16 { try next(type).decode(type) }
        mutating func decode(_ type: Int32.Type) throws -> Int32 { try next(type).decode(type) }
        mutating func decode(_ type: Int64.Type) throws -> Int64 { try next(type).decode(type) }
        mutating func decode(_ type: UInt.Type) throws -> UInt { try next(type).decode(type) }
        mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try next(type).decode(type) }
        mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try next(type).decode(type) }
        mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try next(type).decode(type) }
        mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try next(type).decode(type) }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
            -> KeyedDecodingContainer<NestedKey>
        {
            try next([String: Any].self).container(keyedBy: type)
        }

        mutating func nestedUnkeyedContainer() throws -> UnkeyedDecodingContainer {
            try next([Any].self).unkeyedContainer()
        }

        mutating func superDecoder() throws -> Decoder { try next(Any.self) }
    }
}
