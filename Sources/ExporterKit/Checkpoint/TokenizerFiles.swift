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

    /// The runtime's default response budget: 2048 tokens when the vocabulary holds a
    /// reasoning marker (a vocabulary test, not a behaviour test), 512 otherwise.
    public var defaultResponseTokens: Int { reasoningMarker == nil ? 512 : 2048 }

    /// Looks for tokenizer files in `directory`.
    /// - Throws: `CheckpointError`-like `BundleError.readFailed` when a present tokenizer file cannot be read.
    public init(directory: URL) throws {
        let manager = FileManager.default
        files = TokenizerFiles.knownNames.map { directory.appendingPathComponent($0) }
            .filter { manager.fileExists(atPath: $0.path) }
        var found: String?
        for file in files
        where ["tokenizer.json", "tokenizer_config.json", "added_tokens.json", "vocab.json"]
            .contains(file.lastPathComponent)
        {
            guard let data = try? Data(contentsOf: file) else {
                throw BundleError.readFailed(path: file.path, reason: "unreadable tokenizer file")
            }
            if let marker = TokenizerFiles.reasoningMarkers.first(where: { TokenizerFiles.holds($0, json: data) }) {
                found = marker
                break
            }
        }
        reasoningMarker = found
    }

    /// Whether a JSON document holds the string `marker`, however it is escaped (`"<think>"`, or
    /// `"\u003cthink\u003e"` as some serialisers write `<` and `>`). Markers are JSON strings in the
    /// vocabulary or added tokens; searching for their bytes, and decoding only the few strings where
    /// an escaped form could start, finds them without building a 150,000-entry dictionary.
    static func holds(_ marker: String, json data: Data) -> Bool {
        if data.range(of: Data("\"\(marker)\"".utf8)) != nil { return true }
        // The marker's letters and the character before them (`<think>`: `think` after `<`), which
        // stands as itself or as a \u escape, in lower or upper case hex.
        let scalars = Array(marker.unicodeScalars)
        guard let first = scalars.firstIndex(where: { $0.properties.isAlphabetic }), first > 0 else { return false }
        let letters = String(String.UnicodeScalarView(scalars[first...].prefix { $0 != "|" && $0 != ">" }))
        let before = scalars[first - 1]
        let hex = String(before.value, radix: 16)
        let code = String(repeating: "0", count: max(0, 4 - hex.count)) + hex
        let anchors = Set([String(before), "\\u" + code, "\\u" + code.uppercased()]).map { Data(($0 + letters).utf8) }
        let quote = UInt8(ascii: "\"")
        let backslash = UInt8(ascii: "\\")
        // A quote ends or starts a string unless an odd number of backslashes precede it.
        func isUnescapedQuote(_ index: Data.Index) -> Bool {
            guard data[index] == quote else { return false }
            var slashes = 0
            var previous = index
            while previous > data.startIndex, data[data.index(before: previous)] == backslash {
                slashes += 1
                previous = data.index(before: previous)
            }
            return slashes % 2 == 0
        }
        let reach = 8 * marker.utf8.count  // the longest escaping of the marker, and more
        for anchor in anchors {
            var searchFrom = data.startIndex
            while let hit = data.range(of: anchor, in: searchFrom..<data.endIndex) {
                searchFrom = hit.upperBound
                // The anchor is inside a string (JSON has no bare words but true, false and null):
                // its opening quote is the nearest unescaped one before it, its closing one after.
                let lowest = max(data.startIndex, hit.lowerBound - reach)
                guard let open = (lowest..<hit.lowerBound).reversed().first(where: isUnescapedQuote) else { continue }
                let highest = min(data.endIndex, hit.upperBound + reach)
                guard let close = (hit.upperBound..<highest).first(where: isUnescapedQuote) else { continue }
                let literal = data[open...close]
                if (try? JSONSerialization.jsonObject(with: literal, options: .fragmentsAllowed)) as? String == marker {
                    return true
                }
            }
        }
        return false
    }

    /// The manifest's record of these facts.
    public var manifestRecord: Manifest.Tokenizer {
        Manifest.Tokenizer(
            files: files.map { "tokenizer/" + $0.lastPathComponent }, reasoningMarker: reasoningMarker,
            defaultResponseTokens: defaultResponseTokens)
    }
}
