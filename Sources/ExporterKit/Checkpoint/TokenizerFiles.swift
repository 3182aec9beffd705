import Foundation

/// The tokenizer files of a checkpoint, carried into the bundle, and what they imply
/// for the runtime's defaults.
public struct TokenizerFiles: Equatable, Sendable {
    /// File names carried along when present, in this order.
    public static let knownNames = [
        "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
        "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json", "chat_template.jinja",
    ]
    /// Vocabulary entries that make the runtime budget 2048 response tokens instead of 512.
    public static let reasoningMarkers = ["<think>", "<|reasoning_start|>"]

    /// The files found, in `knownNames` order.
    public let files: [URL]
    /// The first reasoning marker found in the vocabulary, if any.
    public let reasoningMarker: String?

    /// The added token of the highest id the tokenizer files declare, if any: `added_tokens` of
    /// `tokenizer.json`, `added_tokens_decoder` of `tokenizer_config.json`, `added_tokens.json`.
    /// One at or beyond the embedding's rows (`vocab_size`) reads outside the table on a device:
    /// tokens added to a tokenizer without resizing the model's embedding.
    public let highestAddedToken: AddedToken?
    /// The highest id of the base vocabulary, and the file holding it: `model.vocab` of
    /// `tokenizer.json` (token → id, or Unigram's `[piece, score]` pairs, whose ids are their
    /// positions), or `vocab.json`. Like an added token, one at or beyond `vocab_size` reads
    /// outside the embedding on a device: a tokenizer of another, larger model.
    public let highestVocabularyId: VocabularyId?

    /// The highest id of a vocabulary file.
    public struct VocabularyId: Equatable, Sendable {
        /// The id.
        public let id: Int
        /// The file holding it.
        public let file: String
    }

    /// A token the tokenizer files add to the vocabulary.
    public struct AddedToken: Equatable, Sendable {
        /// Its id.
        public let id: Int
        /// Its text.
        public let content: String
        /// The file declaring it.
        public let file: String
    }

    /// The runtime's default response budget: 2048 tokens when the vocabulary holds a
    /// reasoning marker (a vocabulary test, not a behaviour test), 512 otherwise.
    public var defaultResponseTokens: Int { reasoningMarker == nil ? 512 : 2048 }

    /// Looks for tokenizer files in `directory`.
    /// - Throws: `BundleError.readFailed` when a present tokenizer file cannot be read,
    ///   `CheckpointError.fileOutsideCheckpoint` for one that links out of the checkpoint.
    public init(directory: URL) throws {
        // Every entry of those names, a broken link too: refused below rather than left out unsaid.
        files = TokenizerFiles.knownNames.map { directory.appendingPathComponent($0) }
            .filter(CheckpointWeights.entryExists)
        for file in files { try CheckpointWeights.checkContained(file, checkpoint: directory) }
        var found: String?
        var added: [AddedToken] = []
        var vocabulary: VocabularyId?
        for file in files where file.pathExtension == "json" || file.lastPathComponent == "tokenizer.model" {
            let name = file.lastPathComponent
            let data = try BundleError.readingFile(file.path) {
                let opened = try ReadOnlyFile(path: file.path)
                return Data(try opened.bytes(at: 0, count: opened.byteCount))
            }
            if name == "tokenizer.model" {
                let pieces = SentencePieceModel(data)
                found = found ?? TokenizerFiles.reasoningMarkers.first { pieces.markers.contains($0) }
                if pieces.count > 0, pieces.count - 1 > vocabulary?.id ?? -1 {
                    vocabulary = VocabularyId(id: pieces.count - 1, file: name)
                }
                continue
            }
            try TokenizerFiles.checkJSONObject(data, path: file.path)
            // Not a vocabulary: read for its syntax only.
            guard name != "generation_config.json" else { continue }
            if found == nil {
                found = TokenizerFiles.reasoningMarkers.first { TokenizerFiles.holds($0, json: data) }
            }
            added += TokenizerFiles.addedTokens(in: data, file: file.lastPathComponent)
            if let id = TokenizerFiles.highestVocabularyId(in: data, file: file.lastPathComponent),
                id > vocabulary?.id ?? -1
            {
                vocabulary = VocabularyId(id: id, file: file.lastPathComponent)
            }
        }
        reasoningMarker = found
        highestVocabularyId = vocabulary
        highestAddedToken = added.max { ($0.id, $0.file, $0.content) < ($1.id, $1.file, $1.content) }
    }

    /// Refuses a JSON file of the tokenizer that no loader reads: not JSON (truncated, a
    /// byte-order mark, UTF-16, data after the document), or no object.
    /// - Throws: `CheckpointError.invalidTokenizerFile` naming the file and the fault.
    static func checkJSONObject(_ data: Data, path: String) throws {
        do {
            try data.withUnsafeBytes { try JSONParser.checkSyntax($0) }
        } catch let error as JSONParseError {
            throw CheckpointError.invalidTokenizerFile(path: path, reason: "not valid JSON: \(error)")
        }
        guard data.first(where: { !jsonWhitespace.contains($0) }) == UInt8(ascii: "{") else {
            throw CheckpointError.invalidTokenizerFile(path: path, reason: "not a JSON object")
        }
    }

    /// The tokens `data`, the tokenizer file named `file`, adds; none where it declares none or
    /// does not read. Only `tokenizer.json`'s `added_tokens` array is parsed, not its vocabulary.
    static func addedTokens(in data: Data, file: String) -> [AddedToken] {
        let bytes = [UInt8](data)
        switch file {
        case "tokenizer.json":
            guard let slice = arraySlice(after: "added_tokens", in: bytes),
                let items = (try? JSONParser.parse(slice))?.arrayValue
            else { return [] }
            return items.compactMap { item in
                guard let id = item.objectValue?["id"]?.intValue else { return nil }
                return AddedToken(id: id, content: item.objectValue?["content"]?.stringValue ?? "", file: file)
            }
        case "tokenizer_config.json":
            guard let decoder = (try? JSONParser.parse(bytes))?.objectValue?["added_tokens_decoder"]?.objectValue
            else { return [] }
            return decoder.members.compactMap { key, value in
                guard let id = Int(key) else { return nil }
                return AddedToken(id: id, content: value.objectValue?["content"]?.stringValue ?? "", file: file)
            }
        case "added_tokens.json":
            guard let tokens = (try? JSONParser.parse(bytes))?.objectValue else { return [] }
            return tokens.members.compactMap { content, value in
                value.intValue.map { AddedToken(id: $0, content: content, file: file) }
            }
        default:
            return []
        }
    }

    /// The highest id of the base vocabulary `data`, the tokenizer file named `file`, holds:
    /// `tokenizer.json`'s `model.vocab`, `vocab.json`'s whole object; nil for another file, or
    /// one without a vocabulary that reads. Scanned, not parsed: a vocabulary has 150,000 entries.
    static func highestVocabularyId(in data: Data, file: String) -> Int? {
        data.withUnsafeBytes { bytes -> Int? in
            switch file {
            case "tokenizer.json":
                guard let model = valueStart(after: "model", in: bytes, from: 0, opening: UInt8(ascii: "{")),
                    let vocabulary = valueStart(after: "vocab", in: bytes, from: model + 1, opening: nil)
                else { return nil }
                return highestId(in: UnsafeRawBufferPointer(rebasing: bytes[vocabulary...]))
            case "vocab.json":
                guard let start = bytes.firstIndex(where: { !jsonWhitespace.contains($0) }) else { return nil }
                return highestId(in: UnsafeRawBufferPointer(rebasing: bytes[start...]))
            default:
                return nil
            }
        }
    }

    /// The highest id of a vocabulary, the JSON value starting `bytes`: an object's largest
    /// integer member, or for an array (Unigram's pairs), its last position.
    static func highestId(in bytes: UnsafeRawBufferPointer) -> Int? {
        let quote = UInt8(ascii: "\"")
        guard let opening = bytes.first, opening == UInt8(ascii: "{") || opening == UInt8(ascii: "[") else {
            return nil
        }
        let isArray = opening == UInt8(ascii: "[")
        var highest: Int?
        var (depth, commas, sawElement) = (0, 0, false)
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case quote:
                guard let end = stringEnd(openingAt: index - 1, in: bytes) else { return nil }
                index = end + 1
                sawElement = sawElement || depth == 1
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                sawElement = sawElement || depth == 1
                depth += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth -= 1
                if depth == 0 { return isArray ? (sawElement ? commas : nil) : highest }
            case UInt8(ascii: ","):
                if depth == 1 { commas += 1 }
            case UInt8(ascii: ":") where depth == 1 && !isArray:
                while index < bytes.count, jsonWhitespace.contains(bytes[index]) { index += 1 }
                var (value, digits) = (0, 0)
                // 18 digits at most: a larger id is no id (not its first 18 digits), and must not overflow.
                while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
                    if digits < 18 { value = value * 10 + Int(bytes[index] - UInt8(ascii: "0")) }
                    (digits, index) = (digits + 1, index + 1)
                }
                if (1...18).contains(digits) { highest = max(highest ?? value, value) }
            default:
                sawElement = sawElement || (depth == 1 && !jsonWhitespace.contains(byte))
            }
        }
        return nil
    }

    private static let jsonWhitespace: [UInt8] = [0x20, 0x09, 0x0A, 0x0D]

    /// Where `needle` (two bytes or more) first occurs in `bytes`: found from each occurrence of
    /// its second byte, rarer than the first in JSON when that is a quote (Foundation's
    /// `Data.range(of:)` takes 15 ms over a 7 MB tokenizer.json, this well under one).
    static func firstIndex(of needle: [UInt8], in bytes: UnsafeRawBufferPointer) -> Int? {
        guard needle.count >= 2, let base = bytes.baseAddress else { return nil }
        var from = 1
        while from < bytes.count, let found = memchr(base + from, Int32(needle[1]), bytes.count - from) {
            let start = base.distance(to: UnsafeRawPointer(found)) - 1
            from = start + 2
            if start + needle.count <= bytes.count, memcmp(base + start, needle, needle.count) == 0 { return start }
        }
        return nil
    }

    /// The bytes of the array that the first key `key` holds (`"key": [ … ]`), found without
    /// parsing the rest of the document (a tokenizer.json's vocabulary is megabytes).
    private static func arraySlice(after key: String, in bytes: [UInt8]) -> [UInt8]? {
        bytes.withUnsafeBytes { buffer in
            valueStart(after: key, in: buffer, from: 0, opening: UInt8(ascii: "[")).flatMap { start in
                closingBracket(from: start, in: buffer).map { start..<($0 + 1) }
            }
        }.map { Array(bytes[$0]) }
    }

    /// The index of the opening bracket (`opening`, `{` or `[`; nil: either) of the value of the
    /// first key `key` at or after `from` that holds an object or array, found without parsing
    /// the document. Text `"key"` that is no key (a string value) is passed over.
    static func valueStart(after key: String, in bytes: UnsafeRawBufferPointer, from: Int, opening: UInt8?) -> Int? {
        let quoted = Array("\"\(key)\"".utf8)
        let accepted = opening.map { [$0] } ?? [UInt8(ascii: "{"), UInt8(ascii: "[")]
        var searchFrom = from
        while searchFrom < bytes.count,
            let found = firstIndex(of: quoted, in: UnsafeRawBufferPointer(rebasing: bytes[searchFrom...]))
        {
            var index = searchFrom + found + quoted.count
            searchFrom = index
            while index < bytes.count, jsonWhitespace.contains(bytes[index]) { index += 1 }
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { continue }
            index += 1
            while index < bytes.count, jsonWhitespace.contains(bytes[index]) { index += 1 }
            guard index < bytes.count else { return nil }
            if accepted.contains(bytes[index]) { return index }
        }
        return nil
    }

    /// The index of the bracket closing the one at `start`, strings skipped; nil when it is not closed.
    private static func closingBracket(from start: Int, in bytes: UnsafeRawBufferPointer) -> Int? {
        var depth = 0
        var index = start
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\""):
                guard let end = stringEnd(openingAt: index, in: bytes) else { return nil }
                index = end
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                depth -= 1
                if depth == 0 { return index }
            default:
                break
            }
            index += 1
        }
        return nil
    }

    /// The index of the quote closing the string whose opening quote is at `start` (one not
    /// preceded by an odd number of backslashes), found with `memchr`; nil when it is not closed.
    static func stringEnd(openingAt start: Int, in bytes: UnsafeRawBufferPointer) -> Int? {
        guard let base = bytes.baseAddress else { return nil }
        var from = start + 1
        while from < bytes.count, let found = memchr(base + from, Int32(UInt8(ascii: "\"")), bytes.count - from) {
            let end = base.distance(to: UnsafeRawPointer(found))
            var slashes = 0
            while end - slashes - 1 > start, bytes[end - slashes - 1] == UInt8(ascii: "\\") { slashes += 1 }
            if slashes % 2 == 0 { return end }
            from = end + 1
        }
        return nil
    }

    /// Whether a JSON document holds the string `marker`, however it is escaped (`"<think>"`,
    /// `"\u003cthink\u003e"` as some serialisers write `<` and `>`, or any character as `\uXXXX`).
    /// Markers are JSON strings in the vocabulary or added tokens: their bytes are searched for
    /// first; failing that, only the strings holding a `\u` escape and short enough to spell the
    /// marker are decoded, without building a 150,000-entry dictionary or walking every string.
    static func holds(_ marker: String, json data: Data) -> Bool {
        // Each character spelt at most as a surrogate pair of escapes (12 bytes), and the quotes.
        let longest = 12 * marker.unicodeScalars.count + 2
        let quote = UInt8(ascii: "\"")
        let backslash = UInt8(ascii: "\\")
        let quoted = Array("\"\(marker)\"".utf8)
        // The marker's last byte, which ends its spelling unless it is escaped too.
        let last = quoted[quoted.count - 2]
        return data.withUnsafeBytes { bytes in
            guard let base = bytes.baseAddress, bytes.count > 1 else { return false }
            if TokenizerFiles.firstIndex(of: quoted, in: bytes) != nil { return true }
            // A quote opens or closes a string unless an odd number of backslashes precede it.
            func isUnescapedQuote(_ index: Int) -> Bool {
                guard bytes[index] == quote else { return false }
                var slashes = 0
                while index - slashes > 0, bytes[index - slashes - 1] == backslash { slashes += 1 }
                return slashes % 2 == 0
            }
            var position = 0
            while position < bytes.count - 1 {
                guard let found = memchr(base + position, Int32(backslash), bytes.count - position) else { break }
                let escape = base.distance(to: UnsafeRawPointer(found))
                position = escape + 2
                guard escape + 1 < bytes.count, bytes[escape + 1] == UInt8(ascii: "u") else { continue }
                // Backslashes stand only inside strings: this one's opens at the nearest unescaped
                // quote before it and closes at the nearest after it.
                let lowest = max(0, escape - longest)
                guard let open = (lowest..<escape).reversed().first(where: isUnescapedQuote) else { continue }
                let highest = min(bytes.count, open + longest)
                guard let close = (escape + 2..<highest).first(where: isUnescapedQuote) else { continue }
                position = close + 1
                // Most such strings end otherwise than the marker (`"\u0120the"`): no need to decode them.
                let endsLikeMarker = bytes[close - 1] == last || (close >= 6 && bytes[close - 6] == backslash)
                guard endsLikeMarker, close - open + 1 >= quoted.count else { continue }
                if case .string(let text)? = try? JSONParser.parse(
                    UnsafeRawBufferPointer(rebasing: bytes[open...close])),
                    text == marker
                {
                    return true
                }
            }
            return false
        }
    }

    /// The manifest's record of these facts.
    public var manifestRecord: Manifest.Tokenizer {
        Manifest.Tokenizer(
            files: files.map { "tokenizer/" + $0.lastPathComponent }, reasoningMarker: reasoningMarker,
            defaultResponseTokens: defaultResponseTokens)
    }
}
