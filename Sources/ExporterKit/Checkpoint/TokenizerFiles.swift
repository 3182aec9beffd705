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
            // Markers are JSON strings in the vocabulary or added tokens; a quoted search finds
            // them without building a 150,000-entry dictionary.
            if let marker = TokenizerFiles.reasoningMarkers.first(where: {
                data.range(of: Data("\"\($0)\"".utf8)) != nil
            }) {
                found = marker
                break
            }
        }
        reasoningMarker = found
    }

    /// The manifest's record of these facts.
    public var manifestRecord: Manifest.Tokenizer {
        Manifest.Tokenizer(
            files: files.map { "tokenizer/" + $0.lastPathComponent }, reasoningMarker: reasoningMarker,
            defaultResponseTokens: defaultResponseTokens)
    }
}
