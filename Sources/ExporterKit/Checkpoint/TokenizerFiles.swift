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
            // As written: found from each occurrence of its first character (Foundation's
            // `Data.range(of:)` takes 15 ms over a 7 MB tokenizer.json, this well under one).
            var from = 1
            while from < bytes.count,
                let found = memchr(base + from, Int32(quoted[1]), bytes.count - from)
            {
                let start = base.distance(to: UnsafeRawPointer(found)) - 1
                from = start + 2
                if start + quoted.count <= bytes.count, memcmp(base + start, quoted, quoted.count) == 0 { return true }
            }
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
