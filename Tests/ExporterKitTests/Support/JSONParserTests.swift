import Testing

@testable import ExporterKit

@Suite("Support: strict JSON reading and writing")
struct JSONParserTests {
    /// The error parsing `text` gives, nil when it parses.
    private func parseError(_ text: String) -> String? {
        do {
            _ = try JSONParser.parse(Array(text.utf8))
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test("a key given twice is refused, and one text in two Unicode forms is named as such")
    func duplicateKeys() throws {
        #expect(parseError(#"{"a": 1, "a": 2}"#) == #"duplicate key "a" at byte 9"#)
        // Composed é (U+00E9) and decomposed e + U+0301: different bytes, one key to Swift.
        #expect(
            parseError("{\"a\u{E9}\": 1, \"ae\u{301}\": 2}")
                == "duplicate key \"ae\u{301}\""
                + #" ("a\u{E9}" and "ae\u{301}": one text in two Unicode forms, one key to this "#
                + "tool) at byte 11")
    }

    @Test("a \\u surrogate pair is one scalar beyond the BMP; a lone half of one is refused")
    func surrogatePairs() throws {
        #expect(try JSONParser.parse(Array(#""\ud83d\ude00""#.utf8)) == .string("😀"))
        #expect(try JSONParser.parse(Array(#""a\uD834\uDD1Eb""#.utf8)) == .string("a𝄞b"))
        #expect(parseError(#""\ud83d""#) == "unpaired surrogate in a string at byte 7")
        #expect(parseError(#""\ud83d\u0041""#) == "unpaired surrogate in a string at byte 13")
        #expect(parseError(#""\ude00""#) == "unpaired surrogate in a string at byte 7")
    }

    @Test("numbers follow RFC 8259: no leading zeros, digits after a point or an exponent")
    func numbers() throws {
        #expect(try JSONParser.parse(Array("[0, -0, 10, 0.5, -1e-06, 2E+3]".utf8)).arrayValue?.count == 6)
        #expect(parseError("01") == "unexpected data after the document at byte 1")
        #expect(parseError("-012") == "unexpected data after the document at byte 2")
        #expect(parseError("[1, 007]") == "expected ',' or ']' at byte 5")
        #expect(parseError("1.") == "invalid number at byte 0")
        #expect(parseError("-") == "invalid number at byte 0")
        #expect(parseError("1e+") == "invalid number at byte 0")
    }

    @Test("a UTF-8 byte-order mark before the document is named, not an unexpected character")
    func byteOrderMark() throws {
        let message =
            "the text starts with a UTF-8 byte-order mark (EF BB BF, invisible in most editors), which JSON does not "
            + "allow at byte 0"
        #expect(parseError("\u{FEFF}{}") == message)
        #expect(parseError("\u{FEFF}") == message)
        // Elsewhere it is a character like any other: inside a string, kept; outside, unexpected.
        #expect(try JSONParser.parse(Array("\"\u{FEFF}a\"".utf8)) == .string("\u{FEFF}a"))
        #expect(parseError(" \u{FEFF}{}") == "unexpected character at byte 1")
    }

    @Test("the writer escapes every control character, so what it writes parses back")
    func writerEscapes() throws {
        let text =
            "q\"b\\n\nr\rt\t" + String(String.UnicodeScalarView((0..<0x20).compactMap(Unicode.Scalar.init))) + "\u{7F}é"
        let written = JSONWriter.string(.string(text))
        #expect(written.unicodeScalars.allSatisfy { $0.value >= 0x20 || $0 == "\n" })
        #expect(written.hasPrefix(#""q\"b\\n\nr\rt\t\u0000\u0001"#))
        #expect(written.hasSuffix(#"\u001e\u001f"# + "\u{7F}é\"\n"))
        #expect(try JSONParser.parse(Array(written.utf8)) == .string(text))
    }
}
