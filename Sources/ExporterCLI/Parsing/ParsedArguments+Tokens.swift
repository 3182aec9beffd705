import ExporterKit
import Foundation

extension ParsedArguments {
    /// Refuses `--tokens` together with `--tokens-file`.
    func refuseBothTokenOptions() throws {
        if isGiven("tokens") && isGiven("tokens-file") {
            throw UsageError.validation("--tokens and --tokens-file cannot be used together")
        }
    }

    /// The ids of `--tokens`, else of the file `--tokens-file` names; nil when neither is given.
    func tokenIds(relativeTo directory: URL) throws -> [Int]? {
        if let list = value("tokens") { return try Self.parseTokenIds(list, option: "--tokens") }
        return try tokenIds(inFileOf: "tokens-file", relativeTo: directory)
    }

    /// The ids in the file the option names (relative to `directory`), or nil when it is absent.
    /// - Throws: `InputFileError.notFound` when there is no such file (exit 66),
    ///   `.unreadable` when it is not UTF-8 text (65), `BundleError.readFailed` when it is there
    ///   but cannot be read, a folder included (74, as every file an option names), `UsageError`
    ///   for bad ids.
    func tokenIds(inFileOf name: String, relativeTo directory: URL) throws -> [Int]? {
        guard let file = value(name) else { return nil }
        let url = URL.resolvingFilePath(file, from: directory)
        guard let data = try readNamedFile(url) else { throw InputFileError.notFound(option: "--\(name)", path: file) }
        guard let text = String(data: data, encoding: .utf8) else {
            throw InputFileError.unreadable(option: "--\(name)", path: file, reason: "not readable as UTF-8 text")
        }
        return try Self.parseTokenIds(text, option: "--\(name)")
    }

    /// Non-negative token ids separated by commas, white space or brackets (a JSON list works);
    /// an empty item between commas (`1,,2`, `1,2,`) is refused, not skipped.
    static func parseTokenIds(_ text: String, option: String) throws -> [Int] {
        let items = text.split(whereSeparator: { $0 == "[" || $0 == "]" }).joined(separator: " ")
            .split(separator: ",", omittingEmptySubsequences: false)
        if items.count > 1, items.contains(where: { $0.allSatisfy(\.isWhitespace) }) {
            throw UsageError.invalidValue(value: "", option: option, expected: "non-negative token ids")
        }
        let pieces = items.flatMap { $0.split(whereSeparator: \.isWhitespace) }
        let tokens = try pieces.map { piece -> Int in
            guard let token = Int(piece), token >= 0 else {
                throw UsageError.invalidValue(value: String(piece), option: option, expected: "non-negative token ids")
            }
            return token
        }
        guard !tokens.isEmpty else {
            throw UsageError.invalidValue(value: text, option: option, expected: "at least one token id")
        }
        return tokens
    }
}
