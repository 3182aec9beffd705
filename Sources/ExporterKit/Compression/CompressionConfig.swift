import Foundation

/// Why a compression config cannot be used.
public enum CompressionConfigError: ExporterError, Equatable {
    /// The file is absent or unreadable.
    case unreadable(path: String)
    /// The file is not valid JSON or not of the expected shape.
    case invalid(path: String, reason: String)
    /// The file was written for a newer schema than this tool reads.
    case unsupportedSchema(path: String, found: String, supported: String)
    /// No config of that name ships in `Presets/compression/`.
    case unknownName(String, available: [String])
    /// A tensor matches no rule and the config has no default.
    case uncovered(tensor: String, config: String)
    /// A rule refuses uneven groups and the tensor's channels are not a multiple of the group size.
    case unevenGroups(tensor: String, channels: Int, groupSize: Int)

    /// The message, naming the config file or the tensor at fault.
    public var description: String {
        switch self {
        case .unreadable(let path):
            return "cannot read compression config '\(path)'"
        case .invalid(let path, let reason):
            return "compression config '\(path)': \(reason)"
        case .unsupportedSchema(let path, let found, let supported):
            return "compression config '\(path)' has schema '\(found)'; this version reads '\(supported)'"
        case .unknownName(let name, let available):
            return "unknown compression config '\(name)'; available: \(available.joined(separator: ", ")), none"
        case .uncovered(let tensor, let config):
            return "tensor '\(tensor)' matches no rule of compression config '\(config)' and it has no default"
        case .unevenGroups(let tensor, let channels, let groupSize):
            return "tensor '\(tensor)': \(channels) output channels are not a multiple of group size \(groupSize)"
                + " and the rule refuses uneven groups"
        }
    }

    /// `notFound` (66) for an unreadable file, `usage` (64) for an unknown name, `badInput` (65)
    /// otherwise.
    public var exitStatus: ExitStatus {
        if case .unreadable = self { return .notFound }
        if case .unknownName = self { return .usage }
        return .badInput
    }
}

/// A compression config: rules tried in order against tensor names, the first match wins,
/// then the default. Specified in `docs/FORMAT.md` ("Compression configs").
public struct CompressionConfig: Equatable, Sendable {
    /// The schema this version reads.
    public static let schema = "exporter.compression/1"

    /// One rule: a pattern and the scheme for the tensors it matches.
    public struct Rule: Equatable, Sendable {
        /// The pattern as written (`match` glob, or `regex`).
        public let pattern: String
        /// Whether `pattern` is a regular expression rather than a glob.
        public let isRegex: Bool
        /// The scheme for matching tensors.
        public let scheme: CompressionScheme
        /// `"optional": true`: a rule for tensors only some families have (biases), so matching
        /// none is no reason for a warning.
        public var isOptional = false

        /// Whether `name` matches the rule.
        public func matches(_ name: String) -> Bool {
            if isRegex {
                guard let regex = try? Regex(pattern) else { return false }
                return (try? regex.wholeMatch(in: name)) != nil
            }
            return GlobPattern.matches(pattern, name)
        }
    }

    /// The config's name (`none` for no compression).
    public let name: String
    /// What it is for.
    public let description: String
    /// The rules, in order.
    public let rules: [Rule]
    /// The scheme for tensors no rule matches (nil: such a tensor is an error).
    public let defaultScheme: CompressionScheme?

    /// A config from its parts.
    public init(name: String, description: String, rules: [Rule], defaultScheme: CompressionScheme?) {
        self.name = name
        self.description = description
        self.rules = rules
        self.defaultScheme = defaultScheme
    }

    /// No compression: every tensor kept in the compute precision (on iOS the token embedding is
    /// still int8 per tensor unless `--disable-embedding-quantization-ios`, as in the reference tool).
    public static let none = CompressionConfig(
        name: "none",
        description: "no compression: every tensor in the compute precision "
            + "(the iOS embedding int8 unless --disable-embedding-quantization-ios)",
        rules: [], defaultScheme: .keep)

    /// What a document that does not parse as JSON is, when it reads as YAML (a `---` or `key:`
    /// first line, after blank and comment lines): a recipe of the reference tool (its or
    /// coremltools' keys in the first 4 KiB), or another YAML document; nil otherwise.
    static func yamlKind(_ bytes: [UInt8]) -> String? {
        let text = String(decoding: bytes.prefix(4096), as: UTF8.self)
        let firstLine = text.split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces).drop { $0 == "\u{FEFF}" } }
            .first { !$0.isEmpty && !$0.hasPrefix("#") }
        guard let line = firstLine else { return nil }
        let key = line.prefix { $0.isLetter || $0.isNumber || "_-.".contains($0) }
        guard line.hasPrefix("---") || (!key.isEmpty && line.dropFirst(key.count).first == ":") else { return nil }
        let recipeKeys = [
            "kmeans_palettization_config", "quantization_config", "config_type", "global_config", "op_type_configs",
            "op_name_configs",
        ]
        return recipeKeys.contains(where: text.contains)
            ? "a coreai-opt YAML recipe of the reference tool" : "a YAML document"
    }

    /// Parses a config file's bytes.
    /// - Throws: `CompressionConfigError` naming the file and the rule that is wrong.
    public init(bytes: [UInt8], path: String) throws {
        func invalid(_ reason: String) -> CompressionConfigError { .invalid(path: path, reason: reason) }
        let document: JSONValue
        do { document = try JSONParser.parse(bytes) } catch {
            // Users of the reference tool arrive with its coreai-opt YAML recipes.
            if let kind = CompressionConfig.yamlKind(bytes) {
                throw invalid(
                    "\(kind), which this tool does not read; write the same "
                        + "rules as an exporter.compression/1 JSON file (docs/FORMAT.md, \"Compression configs\"; "
                        + "the shipped ones: 'exporter list')")
            }
            throw invalid("\(error)")
        }
        guard let object = document.objectValue else { throw invalid("the document is not an object") }
        let known: Set<String> = ["schema", "name", "description", "rules", "default"]
        if let unknown = object.keys.first(where: { !known.contains($0) }) { throw invalid("unknown key '\(unknown)'") }
        guard let schema = object["schema"]?.stringValue else { throw invalid("no 'schema'") }
        guard schema == CompressionConfig.schema else {
            throw CompressionConfigError.unsupportedSchema(
                path: path, found: schema, supported: CompressionConfig.schema)
        }
        guard let name = object["name"]?.stringValue, !name.isEmpty else { throw invalid("no 'name'") }
        self.name = name
        self.description = object["description"]?.stringValue ?? ""
        guard let ruleValues = (object["rules"] ?? .array([])).arrayValue else {
            throw invalid("'rules' is not an array")
        }
        self.rules = try ruleValues.enumerated().map { index, value in
            guard let rule = value.objectValue else { throw invalid("rule \(index + 1) is not an object") }
            return try CompressionConfig.parseRule(rule, label: "rule \(index + 1)", path: path)
        }
        if let value = object["default"], !value.isNull {
            guard let scheme = value.objectValue else { throw invalid("'default' is not an object") }
            self.defaultScheme = try CompressionConfig.parseScheme(
                scheme, label: "default", path: path, allowPattern: false)
        } else {
            self.defaultScheme = nil
        }
    }

    /// Reads a config file.
    /// - Throws: `CompressionConfigError` when it is not there or invalid, `BundleError.readFailed`
    ///   when it is there but cannot be read.
    public init(contentsOf url: URL) throws {
        guard let data = try readNamedFile(url) else { throw CompressionConfigError.unreadable(path: url.path) }
        try self.init(bytes: [UInt8](data), path: url.path)
    }

    private static func parseRule(_ rule: JSONObject, label: String, path: String) throws -> Rule {
        let scheme = try parseScheme(rule, label: label, path: path, allowPattern: true)
        let glob = rule["match"]?.stringValue
        let regex = rule["regex"]?.stringValue
        guard (glob == nil) != (regex == nil) else {
            throw CompressionConfigError.invalid(path: path, reason: "\(label) needs exactly one of 'match' or 'regex'")
        }
        if let regex, (try? Regex(regex)) == nil {
            throw CompressionConfigError.invalid(path: path, reason: "\(label): invalid regular expression '\(regex)'")
        }
        var parsed = Rule(pattern: glob ?? regex ?? "", isRegex: regex != nil, scheme: scheme)
        if let optional = rule["optional"] {
            guard let flag = optional.boolValue else {
                throw CompressionConfigError.invalid(path: path, reason: "\(label): 'optional' must be true or false")
            }
            parsed.isOptional = flag
        }
        return parsed
    }

    private static func parseScheme(_ object: JSONObject, label: String, path: String, allowPattern: Bool) throws
        -> CompressionScheme
    {
        func invalid(_ reason: String) -> CompressionConfigError { .invalid(path: path, reason: "\(label): \(reason)") }
        var known: Set<String> = [
            "mode", "bits", "granularity", "group_size", "uneven_groups", "block_size", "outlier_fraction", "search",
        ]
        if allowPattern { known.formUnion(["match", "regex", "optional"]) }
        if let unknown = object.keys.first(where: { !known.contains($0) }) { throw invalid("unknown key '\(unknown)'") }
        let modeNames = CompressionScheme.Mode.allCases.map(\.rawValue)
        guard let modeName = object["mode"]?.stringValue, let mode = CompressionScheme.Mode(rawValue: modeName) else {
            throw invalid("'mode' must be one of: \(modeNames.joined(separator: ", "))")
        }
        var scheme = CompressionScheme(mode: mode)
        if let policy = object["uneven_groups"] {
            guard let value = policy.stringValue, let parsed = CompressionScheme.UnevenGroupPolicy(rawValue: value)
            else {
                throw invalid("'uneven_groups' must be one of: smaller_last_group, refuse")
            }
            scheme.unevenGroups = parsed
        }
        switch mode {
        case .keep:
            if object.contains("bits") || object.contains("granularity") || object.contains("group_size")
                || object.contains("block_size") || object.contains("outlier_fraction") || object.contains("search")
            {
                throw invalid(
                    "mode 'keep' takes no bits, granularity, group_size, block_size, outlier_fraction or search")
            }
            return scheme
        case .palettize:
            guard let bits = object["bits"]?.intValue, CompressionScheme.paletteBits.contains(bits) else {
                throw invalid("palettize 'bits' must be one of: 2, 3, 4, 6, 8")
            }
            scheme.bits = bits
        case .linear:
            guard (object["bits"]?.intValue ?? 8) == 8 else { throw invalid("linear 'bits' must be 8") }
            scheme.bits = 8
        }
        let granularityName = object["granularity"]?.stringValue ?? "per_tensor"
        let allowed: [CompressionScheme.Granularity] =
            mode == .palettize ? [.perTensor, .perGroupedChannel, .perBlock] : [.perTensor, .perChannel]
        guard let granularity = CompressionScheme.Granularity(rawValue: granularityName), allowed.contains(granularity)
        else {
            throw invalid("'granularity' must be one of: \(allowed.map(\.rawValue).joined(separator: ", "))")
        }
        scheme.granularity = granularity
        if granularity == .perGroupedChannel || granularity == .perBlock {
            guard let groupSize = object["group_size"]?.intValue, groupSize >= 1, groupSize <= 1 << 20 else {
                throw invalid("'group_size' must be an integer from 1 to 1048576 for \(granularity.rawValue)")
            }
            scheme.groupSize = groupSize
        } else if object.contains("group_size") {
            throw invalid("'group_size' applies to per_grouped_channel and per_block only")
        }
        if granularity == .perBlock {
            guard let blockSize = object["block_size"]?.intValue, blockSize >= 1, blockSize <= 1 << 20 else {
                throw invalid("'block_size' must be an integer from 1 to 1048576 for per_block")
            }
            scheme.blockSize = blockSize
        } else if object.contains("block_size") {
            throw invalid("'block_size' applies to per_block only")
        }
        if let value = object["outlier_fraction"] {
            guard mode == .palettize else { throw invalid("'outlier_fraction' applies to palettize only") }
            guard let fraction = value.doubleValue, fraction >= 0, fraction <= 0.05 else {
                throw invalid("'outlier_fraction' must be a number from 0 to 0.05")
            }
            scheme.outlierFraction = fraction
        }
        if let value = object["search"] {
            guard mode == .palettize else { throw invalid("'search' applies to palettize only") }
            guard let name = value.stringValue, let search = CompressionScheme.Search(rawValue: name) else {
                let names = CompressionScheme.Search.allCases.map(\.rawValue).joined(separator: ", ")
                throw invalid("'search' must be one of: \(names)")
            }
            // Spelled out or left out, the standard search is the same scheme (and the same bytes).
            scheme.search = search == .standard ? nil : search
        }
        return scheme
    }

    /// Where a tensor's scheme came from, for the plan and the manifest.
    public enum Source: Equatable, Sendable {
        /// The rule at this index (0-based).
        case rule(Int)
        /// The config's default.
        case defaultRule
        /// The iOS token-embedding rule (int8 per tensor).
        case iosEmbedding
        /// The iOS token embedding with `--disable-embedding-quantization-ios`: kept, never palettised.
        case iosEmbeddingKept
    }

    /// The scheme for `tensor` on `platform`, and which rule gave it.
    /// - Throws: `CompressionConfigError` when no rule covers the tensor, or a rule refuses its uneven groups.
    public func scheme(for tensor: TensorSpec, platform: Platform, quantizeIOSEmbedding: Bool) throws
        -> (scheme: CompressionScheme, source: Source)
    {
        // As the reference tool's iOS export does, whatever the compression (`none` too): the token
        // embedding is never palettised, but int8 per tensor or, with
        // --disable-embedding-quantization-ios, kept in the compute precision.
        if platform == .iOS, tensor.role == .embedding {
            return quantizeIOSEmbedding ? (.int8PerTensor, .iosEmbedding) : (.keep, .iosEmbeddingKept)
        }
        let found: (CompressionScheme, Source)
        if let index = rules.firstIndex(where: { $0.matches(tensor.name) }) {
            found = (rules[index].scheme, .rule(index))
        } else if let defaultScheme {
            found = (defaultScheme, .defaultRule)
        } else {
            throw CompressionConfigError.uncovered(tensor: tensor.name, config: name)
        }
        // A 1-D tensor (norm, bias) is never palettised: it has no channels to share a table.
        if tensor.shape.count < 2, found.0.mode != .keep { return (.keep, found.1) }
        let rows = tensor.matrixShape.rows
        if found.0.unevenGroups == .refuse, found.0.lastGroupRows(rows: rows) != nil, let groupSize = found.0.groupSize
        {
            throw CompressionConfigError.unevenGroups(tensor: tensor.name, channels: rows, groupSize: groupSize)
        }
        return found
    }

    /// Rules that match none of `tensors`: worth a warning, they usually hide a typo.
    public func unusedRules(for tensors: [TensorSpec]) -> [Rule] {
        rules.filter { rule in !rule.isOptional && !tensors.contains { rule.matches($0.name) } }
    }
}

/// Shell-style globs for tensor names: `*` any run of characters (dots included),
/// `?` one character, `{a,b,c}` alternatives. Nothing else is special.
public enum GlobPattern {
    /// Whether `name` matches `pattern` as a whole.
    public static func matches(_ pattern: String, _ name: String) -> Bool {
        for expanded in expandBraces(pattern) where matchWildcards(Array(expanded.utf8), Array(name.utf8)) {
            return true
        }
        return false
    }

    /// `a{b,c}d{e,f}` → `abde`, `abdf`, `acde`, `acdf`.
    static func expandBraces(_ pattern: String) -> [String] {
        guard let open = pattern.firstIndex(of: "{"), let close = pattern[open...].firstIndex(of: "}") else {
            return [pattern]
        }
        let head = String(pattern[..<open])
        let tail = String(pattern[pattern.index(after: close)...])
        let options = pattern[pattern.index(after: open)..<close].split(
            separator: ",", omittingEmptySubsequences: false)
        return options.flatMap { option in expandBraces(tail).map { head + option + $0 } }
    }

    /// Iterative wildcard matching with backtracking to the last `*` (linear in practice).
    private static func matchWildcards(_ pattern: [UInt8], _ text: [UInt8]) -> Bool {
        var p = 0
        var t = 0
        var starAt = -1
        var resumeText = 0
        while t < text.count {
            if p < pattern.count, pattern[p] == UInt8(ascii: "?") || pattern[p] == text[t] {
                p += 1
                t += 1
            } else if p < pattern.count, pattern[p] == UInt8(ascii: "*") {
                starAt = p
                resumeText = t
                p += 1
            } else if starAt >= 0 {
                p = starAt + 1
                resumeText += 1
                t = resumeText
            } else {
                return false
            }
        }
        while p < pattern.count, pattern[p] == UInt8(ascii: "*") { p += 1 }
        return p == pattern.count
    }
}
