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
    /// first; failing that, one pass over the document decodes only the strings that hold an
    /// escape and are short enough to spell the marker, without building a 150,000-entry dictionary.
    static func holds(_ marker: String, json data: Data) -> Bool {
        if data.range(of: Data("\"\(marker)\"".utf8)) != nil { return true }
        // Each character spelt at most as a surrogate pair of escapes (12 bytes), and the quotes.
        let longest = 12 * marker.unicodeScalars.count + 2
        let quote = UInt8(ascii: "\"")
        let backslash = UInt8(ascii: "\\")
        return data.withUnsafeBytes { bytes in
            var inString = false
            var escaped = false
            var hasEscape = false
            var start = 0
            for index in 0..<bytes.count {
                let byte = bytes[index]
                if !inString {
                    // Outside strings JSON has no quotes: each one opens a string.
                    if byte == quote { (inString, hasEscape, start) = (true, false, index) }
                } else if escaped {
                    escaped = false
                } else if byte == backslash {
                    (escaped, hasEscape) = (true, true)
                } else if byte == quote {
                    inString = false
                    let literal = UnsafeRawBufferPointer(rebasing: bytes[start...index])
                    if hasEscape, literal.count <= longest,
                        case .string(let text)? = try? JSONParser.parse(literal), text == marker
                    {
                        return true
                    }
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
