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
        for unusable in [#"{"added_tokens": {"id": 3}}"#, #"{"model": {}}"#] {
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

    @Test(
        "a JSON tokenizer file no loader reads is refused (65), naming it and the fault; duplicate keys pass, as loaders take them"
    )
    func invalidTokenizerJSON() throws {
        let byteOrderMark =
            "not valid JSON: the text starts with a UTF-8 byte-order mark (EF BB BF, invisible in most editors), "
            + "which JSON does not allow at byte 0"
        let cases: [(name: String, bytes: [UInt8], reason: String)] = [
            (
                "tokenizer.json", Array(#"{"added_tokens": [{"id": 3}"#.utf8),
                "not valid JSON: unexpected end of data in an array at byte 27"
            ),
            ("tokenizer.json", [], "not valid JSON: unexpected end of data at byte 0"),
            ("tokenizer_config.json", Array("null".utf8), "not a JSON object"),
            ("vocab.json", [0xEF, 0xBB, 0xBF] + Array("{}".utf8), byteOrderMark),
            (
                "special_tokens_map.json", Array("{} {}".utf8),
                "not valid JSON: unexpected data after the document at byte 3"
            ),
            (
                "generation_config.json", Array(#"{"a": ""#.utf8) + [0x01] + Array(#""}"#.utf8),
                "not valid JSON: control character in a string at byte 7"
            ),
            (
                "added_tokens.json", Array(#"{"a": ""#.utf8) + [0xFF] + Array(#""}"#.utf8),
                "not valid JSON: invalid UTF-8 in a string at byte 6"
            ),
        ]
        for (name, bytes, reason) in cases {
            let directory = try folder([:])
            let file = directory.appendingPathComponent(name)
            try Data(bytes).write(to: file)
            #expect(throws: CheckpointError.invalidTokenizerFile(path: file.path, reason: reason), "\(name)") {
                try TokenizerFiles(directory: directory)
            }
        }
        // Duplicate keys: the last wins in Python's and Rust's loaders, so they pass here too.
        let duplicate = try folder(["vocab.json": #"{"a": 1, "a": 2}"#])
        #expect(try TokenizerFiles(directory: duplicate).highestVocabularyId == .init(id: 2, file: "vocab.json"))
    }

    @Test("a sentencepiece tokenizer.model: its pieces are the vocabulary, a reasoning marker among them counts")
    func sentencePieceModel() throws {
        // ModelProto: field 1 (pieces), each a SentencePiece with field 1 (text) and field 2 (score).
        func piece(_ text: String) -> [UInt8] {
            let body = [0x0A, UInt8(text.utf8.count)] + Array(text.utf8) + [0x15, 0, 0, 0x80, 0xBF]
            return [0x0A, UInt8(body.count)] + body
        }
        let trainer: [UInt8] = [0x12, 0x02, 0x08, 0x01]
        let directory = try folder([:])
        let model = directory.appendingPathComponent("tokenizer.model")
        try Data(["<unk>", "a", "<think>", "</think>"].flatMap(piece) + trainer).write(to: model)
        let files = try TokenizerFiles(directory: directory)
        #expect(files.reasoningMarker == "<think>")
        #expect(files.highestVocabularyId == .init(id: 3, file: "tokenizer.model"))
        // A marker inside a longer piece is none; a cut model keeps the pieces before the cut.
        try Data(["<unk>", "<think>x"].flatMap(piece) + piece("b").dropLast(2)).write(to: model)
        let cut = try TokenizerFiles(directory: directory)
        #expect(cut.reasoningMarker == nil)
        #expect(cut.highestVocabularyId == .init(id: 1, file: "tokenizer.model"))
        // special_tokens_map.json's tokens join the vocabulary when transformers loads it.
        let special = try folder(["special_tokens_map.json": #"{"additional_special_tokens": ["<|reasoning_start|>"]}"#]
        )
        #expect(try TokenizerFiles(directory: special).reasoningMarker == "<|reasoning_start|>")
    }

    @Test("generation_config.json is read for its syntax only: a marker among its stop strings is no vocabulary token")
    func generationConfigIsNoVocabulary() throws {
        let files = try TokenizerFiles(
            directory: folder([
                "generation_config.json": #"{"stop_strings": ["<think>"], "eos_token_id": 151645}"#,
                "tokenizer.json": #"{"model": {"vocab": {"a": 0}}}"#,
            ]))
        #expect(files.files.map(\.lastPathComponent) == ["tokenizer.json", "generation_config.json"])
        #expect(files.reasoningMarker == nil)
        #expect(files.defaultResponseTokens == 512)
        #expect(files.highestVocabularyId == .init(id: 0, file: "tokenizer.json"))
    }

    @Test(
        "the vocabulary scan: vocab under model only, a vocab key of no object passed over, a token ending in a backslash"
    )
    func vocabularyScanEdges() {
        func highest(_ text: String, file: String = "tokenizer.json") -> Int? {
            TokenizerFiles.highestVocabularyId(in: Data(text.utf8), file: file)
        }
        // A "vocab" object before "model" (a decoder's) is not the model's vocabulary.
        #expect(highest(#"{"decoder": {"vocab": {"z": 99999}}, "model": {"vocab": {"a": 3}}}"#) == 3)
        // A "vocab" key holding no object or array is passed over for the next one that does.
        #expect(highest(#"{"model": {"vocab": null, "inner": {"vocab": {"a": 5}}}}"#) == 5)
        // "a\\" is the token a\: its string ends at the quote after the escaped backslash.
        #expect(highest(#"{"model": {"vocab": {"a\\": 4, "b": 9, "\\\"": 2}}}"#) == 9)
        #expect(highest(#"{"a\\": 40, "b": 9}"#, file: "vocab.json") == 40)
    }

    @Test("an id of more than 18 digits is no id, without overflowing; one of 18 digits is")
    func vocabularyIdDigits() {
        func highest(_ text: String) -> Int? {
            TokenizerFiles.highestVocabularyId(in: Data(text.utf8), file: "vocab.json")
        }
        #expect(highest(#"{"a": 3, "b": 12345678901234567890}"#) == 3)
        #expect(highest(#"{"a": 3, "b": 99999999999999999999999999}"#) == 3)
        #expect(highest(#"{"a": 3, "b": 999999999999999999}"#) == 999_999_999_999_999_999)
    }

    @Test("equal highest ids in two files: the first file in knownNames order is named")
    func vocabularyIdTie() throws {
        let files = try TokenizerFiles(
            directory: folder([
                "tokenizer.json": #"{"model": {"vocab": {"a": 0, "b": 5}}}"#, "vocab.json": #"{"a": 0, "b": 5}"#,
            ]))
        #expect(files.highestVocabularyId == .init(id: 5, file: "tokenizer.json"))
    }

    @Test("a sentencepiece piece whose length takes a two-byte varint (128), and one ending the file, are read")
    func sentencePieceVarints() throws {
        // Each piece: field 1 (text) and field 2 (a float score), as sentencepiece writes them.
        func piece(_ text: String) -> [UInt8] {
            let body = [0x0A, UInt8(text.utf8.count)] + Array(text.utf8) + [0x15, 0, 0, 0x80, 0xBF]
            let length =
                body.count < 0x80 ? [UInt8(body.count)] : [UInt8(body.count & 0x7F | 0x80), UInt8(body.count >> 7)]
            return [0x0A] + length + body
        }
        let long = String(repeating: "x", count: 121)
        #expect(piece(long)[1...2] == [0x80, 0x01])
        let directory = try folder([:])
        try Data(["<unk>", long, "<think>"].flatMap(piece)).write(
            to: directory.appendingPathComponent("tokenizer.model"))
        let files = try TokenizerFiles(directory: directory)
        #expect(files.highestVocabularyId == .init(id: 2, file: "tokenizer.model"))
        #expect(files.reasoningMarker == "<think>")
    }

    @Test("a vocabulary and an added token beyond the embedding: two warnings, the vocabulary's first")
    func bothBeyondEmbedding() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        try Data(
            #"{"added_tokens": [{"id": 300, "content": "<|x|>"}], "model": {"vocab": {"a": 0, "b": 256}}}"#.utf8
        ).write(to: checkpoint.appendingPathComponent("tokenizer.json"))
        let warnings = ExportRunner.tokenizerWarnings(
            try Fixtures.plan(checkpoint), tokenizer: try TokenizerFiles(directory: checkpoint))
        #expect(
            warnings == [
                "tokenizer: the vocabulary of tokenizer.json has ids up to 256, beyond the embedding's 256 rows "
                    + "(vocab_size): fed to the model on a device, they read outside the table; ship the checkpoint's "
                    + "own tokenizer",
                "tokenizer: tokenizer.json adds token '<|x|>' with id 300, beyond the embedding's 256 rows "
                    + "(vocab_size): fed to the model on a device, it reads outside the table; resize the embedding or "
                    + "remove the token",
            ])
    }
}
