import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("tokenizer files: the generation budget the vocabulary implies")
struct TokenizerFilesTests {
    /// A folder holding `files` (name → contents).
    private func folder(_ files: [String: String]) throws -> URL {
        let directory = try Fixtures.temporaryDirectory()
        for (name, contents) in files {
            try Data(contents.utf8).write(to: directory.appendingPathComponent(name))
        }
        return directory
    }

    @Test("<think> or <|reasoning_start|> in the vocabulary: 2048 response tokens; neither: 512")
    func markers() throws {
        let think = try TokenizerFiles(
            directory: folder(["tokenizer.json": #"{"model": {"vocab": {"a": 0, "<think>": 1}}}"#]))
        #expect(think.reasoningMarker == "<think>")
        #expect(think.defaultResponseTokens == 2048)
        let reasoning = try TokenizerFiles(
            directory: folder([
                "tokenizer_config.json": #"{"added_tokens_decoder": {"5": {"content": "<|reasoning_start|>"}}}"#
            ]))
        #expect(reasoning.reasoningMarker == "<|reasoning_start|>")
        #expect(reasoning.defaultResponseTokens == 2048)
        // Neither a closing tag, nor the word, nor a chat template quoting the tag is the token.
        let none = try TokenizerFiles(
            directory: folder([
                "tokenizer.json": #"{"model": {"vocab": {"</think>": 0, "think": 1, "Ġthinking": 2}}}"#,
                "tokenizer_config.json": #"{"chat_template": "{% if t %}\"<think>\"{% endif %}"}"#,
            ]))
        #expect(none.reasoningMarker == nil)
        #expect(none.defaultResponseTokens == 512)
        #expect(try TokenizerFiles(directory: folder([:])).defaultResponseTokens == 512)
    }

    @Test("a marker written with JSON escapes is the same token")
    func escapedMarkers() throws {
        let escaped = try TokenizerFiles(
            directory: folder(["tokenizer.json": #"{"model": {"vocab": {"a": 0, "\u003cthink\u003E": 1}}}"#]))
        #expect(escaped.reasoningMarker == "<think>")
        #expect(escaped.defaultResponseTokens == 2048)
        let reasoning = try TokenizerFiles(
            directory: folder(["vocab.json": #"{"\u003c\u007creasoning_start|>": 7, "x": 8}"#]))
        #expect(reasoning.reasoningMarker == "<|reasoning_start|>")
        let longer = try TokenizerFiles(
            directory: folder(["tokenizer.json": #"{"model": {"vocab": {"\u003cthink\u003e\u003c": 1}}}"#]))
        #expect(longer.reasoningMarker == nil)
        // Any character may be escaped, letters too; an escaped quote inside another string is no marker.
        for spelling in [#""<\u0074hink>""#, #""\u003C\u0074hink>""#, #""\u003c\u0074\u0068\u0069\u006e\u006b\u003e""#]
        {
            let letters = try TokenizerFiles(
                directory: folder(["vocab.json": #"{"\"<think>\"": 0, "# + spelling + ": 1}"]))
            #expect(letters.reasoningMarker == "<think>", "\(spelling)")
        }
        let quoted = try TokenizerFiles(directory: folder(["vocab.json": #"{"\"<think>\"": 0, "<\u0074hink": 1}"#]))
        #expect(quoted.reasoningMarker == nil)
    }

    @Test("the marker search agrees with decoding every string, over 2,000 seeded documents, cut short too")
    func markerSearchAgreesWithFullDecoding() throws {
        var random = SplitMix64(seed: 27)
        let words = ["<think>", "<thinking>", "think>", "<think", "\"<think>\"", "</think>", "Ġthe", "a\\", "<|x|>"]
        /// `text` as a JSON string literal, each character as itself or a `\u` escape (lower or upper hex).
        func spelling(_ text: String) -> String {
            "\""
                + text.unicodeScalars.map { scalar -> String in
                    let mustEscape = scalar == "\"" || scalar == "\\" || scalar.value > 0x7F
                    guard mustEscape || random.next() % 3 == 0 else { return String(scalar) }
                    let hex = String(format: random.next() % 2 == 0 ? "%04x" : "%04X", scalar.value)
                    return scalar.value > 0xFFFF ? String(scalar) : "\\u" + hex
                }.joined() + "\""
        }
        for _ in 0..<2000 {
            let count = Int(random.next() % 6)
            let strings = (0..<count * 2).map { _ in words[Int(random.next() % UInt64(words.count))] }
            let members = stride(from: 0, to: strings.count, by: 2).map {
                spelling(strings[$0]) + ": " + spelling(strings[$0 + 1])
            }
            let document = Array(("{" + members.joined(separator: ", ") + "}").utf8)
            let expected = strings.contains("<think>")
            #expect(
                TokenizerFiles.holds("<think>", json: Data(document)) == expected,
                "\(String(decoding: document, as: UTF8.self))")
            // Cut anywhere: never a crash, and never a marker that is not whole in what remains.
            let cut = Int(random.next() % UInt64(document.count + 1))
            if TokenizerFiles.holds("<think>", json: Data(document.prefix(cut))) { #expect(expected) }
        }
    }

    @Test(
        "the added token of the highest id, from tokenizer.json's added_tokens, tokenizer_config.json, added_tokens.json"
    )
    func highestAddedToken() throws {
        let files = try TokenizerFiles(
            directory: folder([
                "tokenizer.json":
                    #"{"version": "1.0", "added_tokens": [{"id": 300, "content": "<|a|>", "special": true}, "#
                    + #"{"id": 7, "content": "]\"["}], "model": {"vocab": {"added_tokens": 999999}}}"#,
                "tokenizer_config.json": #"{"added_tokens_decoder": {"301": {"content": "<|b|>"}, "x": {}}}"#,
                "added_tokens.json": #"{"<|c|>": 299}"#,
                "vocab.json": #"{"<|v|>": 5000}"#,
            ]))
        #expect(files.highestAddedToken == .init(id: 301, content: "<|b|>", file: "tokenizer_config.json"))
        let one = try TokenizerFiles(
            directory: folder(["tokenizer.json": #"{"added_tokens" : [ {"id": 3, "content": "x"} ] }"#]))
        #expect(one.highestAddedToken == .init(id: 3, content: "x", file: "tokenizer.json"))
        for unusable in [#"{"added_tokens": {"id": 3}}"#, #"{"added_tokens": [{"id": 3}"#, #"{"model": {}}"#, "["] {
            #expect(try TokenizerFiles(directory: folder(["tokenizer.json": unusable])).highestAddedToken == nil)
        }
    }

    @Test(
        "the highest id of the base vocabulary: token → id objects, Unigram's pairs by position, keys as text skipped")
    func highestVocabularyId() {
        func highest(_ text: String, file: String = "tokenizer.json") -> Int? {
            TokenizerFiles.highestVocabularyId(in: Data(text.utf8), file: file)
        }
        // "model" and "vocab" as string values before the keys; a quote and brackets inside tokens.
        let bpe =
            #"{"added_tokens": [{"id": 9, "content": "vocab"}], "normalizer": {"type": "model"}, "model": "#
            + #"{"type": "BPE", "vocab": {"a\"b": 4, "[{": 12, "c": 7}, "merges": ["a b"]}}"#
        #expect(highest(bpe) == 12)
        #expect(highest(#"{"model": {"type": "Unigram", "vocab": [["<unk>", 0.0], ["a", -1.5], ["]", -2]]}}"#) == 2)
        #expect(highest(#"{"model": {"type": "WordPiece", "vocab": {"x": 0}}}"#) == 0)
        #expect(highest(" \n{\"x\": 0, \"y\": 17}", file: "vocab.json") == 17)
        for none in [
            #"{"model": {"vocab": {}}}"#, #"{"model": {"vocab": []}}"#, #"{"model": {"vocab": {"a": 1"#,
            #"{"vocab": {"a": 1}}"#,
            #"{"model": {"vocab": 3}}"#,
        ] {
            #expect(highest(none) == nil, "\(none)")
        }
        #expect(highest(#"{"a": 5}"#, file: "tokenizer_config.json") == nil)
    }
}
