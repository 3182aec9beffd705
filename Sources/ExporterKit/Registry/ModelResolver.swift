import Foundation

/// Where a model's files come from.
public enum ModelSource: Equatable, Sendable {
    /// A local checkpoint directory.
    case directory(URL)
    /// A snapshot of the local Hugging Face cache.
    case huggingFaceCache(repoID: String, snapshot: URL, revision: String)
    /// A preset whose weights are not on this machine: only its shipped config is known.
    /// `cacheProblem`: why the cache's folder of the repository, which is there, has no snapshot
    /// to read (nil: the folder is absent).
    case presetConfigOnly(repoID: String, cacheProblem: String? = nil)

    /// The folder that every checkpoint file must resolve inside: the checkpoint folder, or
    /// the repository's cache folder (snapshots link into its `blobs/`).
    public var containmentRoot: URL? {
        switch self {
        case .directory(let url): return url
        case .huggingFaceCache(_, let snapshot, _):
            return snapshot.deletingLastPathComponent().deletingLastPathComponent()
        case .presetConfigOnly: return nil
        }
    }

    /// Whether the weights are not on this machine at all: no checkpoint, and no folder of the
    /// repository in the cache (one without a snapshot to read is a download to finish).
    public var weightsAbsent: Bool {
        if case .presetConfigOnly(_, nil) = self { return true }
        return false
    }

    /// The folder holding `config.json` and the weights, when the weights are local.
    public var checkpointDirectory: URL? {
        switch self {
        case .directory(let url): return url
        case .huggingFaceCache(_, let snapshot, _): return snapshot
        case .presetConfigOnly: return nil
        }
    }
}

/// Why a model argument does not lead to an exportable model. The messages of the
/// reference tool are kept word for word.
public enum ResolutionError: ExporterError, Equatable {
    /// Neither a folder, a preset short name nor an `org/model` id; `hint`, what it may have
    /// meant (``ModelResolver/unknownNameHint(_:localURL:)``), follows the reference tool's words.
    case notAModelName(String, hint: String? = nil)
    /// The folder given as the model is an artifact of this tool (it holds a manifest and a
    /// graph), not a checkpoint.
    case artifactGiven(path: String)
    /// A preset that has no export for the platform.
    case notAvailable(model: String, platform: Platform)
    /// A supported architecture without a preset, and no `--experimental`.
    case noPreset(model: String, platform: Platform, hint: String? = nil)
    /// `--experimental` without `--compute-precision`.
    case precisionRequired(model: String)
    /// An `org/model` id or path that is nowhere on this machine.
    case notFound(model: String, tried: [String])
    /// The context asked for exceeds what the checkpoint supports.
    case contextTooLong(requested: Int, maximum: Int)
    /// `--preset` names no preset.
    case unknownPreset(String, available: [String])
    /// The model's name, which names the artifact without `--output-name`, cannot name a
    /// folder safely (control characters, a leading '.', which would hide it).
    case unusableName(String)
    /// The artifact's name is longer than its files' names can be (`given`: by `--output-name`).
    case nameTooLong(String, bytes: Int, given: Bool, limit: Int)
    /// `--preset` names a preset whose architecture differs from the checkpoint's.
    case presetMismatch(preset: String, field: String, preset_value: String, checkpoint_value: String)

    /// The lines of the message: several for a refusal that lists what was tried or what to do.
    public var descriptionLines: [String] {
        switch self {
        case .noPreset(let model, let platform, let hint):
            return [
                "'\(model)' has no registry preset. Pass --experimental to try exporting it anyway "
                    + "(requires --compute-precision).",
                "Supported models: run 'exporter list' (docs in README.md).",
            ]
                + (platform == .iOS
                    ? ["This model may not be suitable for iOS application due to its memory requirements."] : [])
                + (hint.map { [$0] } ?? [])
        case .notAModelName(let model, let hint):
            return [
                "'\(model)' is not a registered short-name and doesn't look like a HuggingFace ID "
                    + "(expected 'org/model'). Run --list-models to see options."
            ] + (hint.map { [$0] } ?? [])
        case .notFound(let model, let tried):
            return ["'\(model)' was not found; tried:"] + tried.map { "  - \($0)" }
        default:
            return [description]
        }
    }

    /// The reference tool's message, word for word, where it has one (sentences ending in periods);
    /// ours, lowercase without a trailing period, otherwise.
    public var description: String {
        switch self {
        case .noPreset, .notFound, .notAModelName:
            return descriptionLines.joined(separator: "\n")
        case .artifactGiven(let path):
            return "'\(path)' is an artifact of this tool, not a checkpoint: export from the checkpoint folder, "
                + "preset or org/model id it came from (its manifest's model.source)"
        case .notAvailable(let model, let platform):
            return "'\(model)' is not available for \(platform.rawValue)."
        case .precisionRequired(let model):
            return "--compute-precision is required for '\(model)' (no registry preset found)."
        case .contextTooLong(let requested, let maximum):
            return "--max-context-length (\(requested)) exceeds the model's max_position_embeddings (\(maximum))"
        case .unusableName(let name):
            return "the model's name '\(name)' cannot name its artifact (control characters, or a leading '.'); "
                + "pass --output-name"
        case .nameTooLong(let name, let bytes, let given, let limit):
            let shown = Format.shortened(name)
            return (given ? "--output-name" : "the model's name") + " '\(shown)' is \(bytes) bytes long; an artifact's "
                + "name is at most \(limit) bytes (its files and their staging folders must fit 255-byte file names)"
                + (given ? "" : "; pass --output-name")
        case .unknownPreset(let name, let available):
            return "unknown preset '\(name)'; available: \(available.joined(separator: ", "))"
        case .presetMismatch(let preset, let field, let presetValue, let checkpointValue):
            return "preset '\(preset)' does not match the checkpoint: \(field) is \(presetValue) in the preset, "
                + "\(checkpointValue) in the checkpoint"
        }
    }

    /// `notFound` (66) for a model that is nowhere, `usage` (64) for a flag to change,
    /// `unsupported` (69) for a registry refusal, `badInput` (65) for a preset that does not fit.
    public var exitStatus: ExitStatus {
        switch self {
        case .notAModelName, .notFound: return .notFound
        case .precisionRequired, .contextTooLong, .unknownPreset, .unusableName, .nameTooLong: return .usage
        case .notAvailable, .noPreset: return .unsupported
        case .presetMismatch, .artifactGiven: return .badInput
        }
    }
}

/// A model argument resolved to its config, its preset (if any) and its family.
public struct ResolvedModel: Sendable {
    /// The argument as the user typed it.
    public let argument: String
    /// The display name, e.g. `Qwen2.5-1.5B-Instruct`: the artifact's default name.
    public let name: String
    /// Where the files are.
    public let source: ModelSource
    /// The parsed config.
    public let config: ModelConfig
    /// The config file.
    public let configURL: URL
    /// The preset applied, if any.
    public let preset: Preset?
    /// The registry family (after model-type remapping).
    public let family: ArchitectureFamily
}

/// Resolves model arguments: a local directory, then a preset name, then a repo id in
/// the local Hugging Face cache; registry rules applied in the reference tool's order.
public struct ModelResolver {
    /// The presets available.
    public let catalog: PresetCatalog
    /// Finds a repo id in the local Hugging Face cache: the snapshot folder and its revision.
    public let locateInCache: (String) -> (snapshot: URL, revision: String)?
    /// Where the cache lookups go, for the "tried" list of a not-found error.
    public let cacheDescription: (String) -> String
    /// Why the cache has no snapshot of a repository id (its folder absent, several snapshots
    /// and no `refs/main`), for the "tried" list of a not-found error; nil: `<where> is absent`.
    public let cacheMissReason: ((String) -> String?)?
    /// Why the cache's folder of a repository id, which is there, has no snapshot to read; nil
    /// when the folder is absent (a preset's weights simply not downloaded).
    public let cacheUnusableReason: ((String) -> String?)?

    /// A resolver over `catalog` with a cache lookup.
    public init(
        catalog: PresetCatalog, locateInCache: @escaping (String) -> (snapshot: URL, revision: String)?,
        cacheDescription: @escaping (String) -> String, cacheMissReason: ((String) -> String?)? = nil,
        cacheUnusableReason: ((String) -> String?)? = nil
    ) {
        self.catalog = catalog
        self.locateInCache = locateInCache
        self.cacheDescription = cacheDescription
        self.cacheMissReason = cacheMissReason
        self.cacheUnusableReason = cacheUnusableReason
    }

    /// Resolves `argument` for an export on `platform`.
    /// - Parameters:
    ///   - experimental: `--experimental` was given.
    ///   - precisionGiven: `--compute-precision` was given.
    ///   - presetOverride: `--preset`, applying a preset's defaults to a local checkpoint of the same architecture.
    ///   - baseDirectory: the folder a relative path is from (a farm job's: its farm file's); nil, the process's.
    /// - Throws: `ResolutionError`, `RegistryError` or `ConfigError`, with the reference tool's messages.
    public func resolve(
        _ argument: String, platform: Platform, experimental: Bool, precisionGiven: Bool, presetOverride: String? = nil,
        relativeTo baseDirectory: URL? = nil
    ) throws -> ResolvedModel {
        var isDirectory: ObjCBool = false
        // A relative path is from the base folder; `link/..` is the link target's parent.
        let localURL = URL.resolvingFilePath(
            argument,
            from: baseDirectory ?? URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true))
        if FileManager.default.fileExists(atPath: localURL.path, isDirectory: &isDirectory), isDirectory.boolValue {
            // A bundle carries its checkpoint's config.json, but none of its weights.
            let artifactFiles = [BundleWriter.manifestName, BundleWriter.graphName]
            if artifactFiles.allSatisfy({
                FileManager.default.fileExists(atPath: localURL.appendingPathComponent($0).path)
            }) {
                throw ResolutionError.artifactGiven(path: localURL.path)
            }
            let folder = localURL
            // A cache snapshot given by its path, or by a link to it: named and recorded as its
            // id would be, its files allowed to resolve into the repository's blobs/. A preset's
            // repository gets the preset, as its id does, checked against the snapshot's own config.
            let snapshot = folder.resolvingSymlinksInPath()
            if let repository = HuggingFaceCache.repositoryFolder(ofSnapshot: snapshot),
                let repoID = HuggingFaceCache.repositoryID(ofFolder: repository)
            {
                let preset = presetOverride == nil ? catalog.preset(named: repoID) : nil
                if let preset, !preset.platforms.contains(platform) {
                    throw ResolutionError.notAvailable(model: repoID, platform: platform)
                }
                // Refusals name it by its id too, as the reference tool names an id.
                return try finish(
                    argument: repoID, name: preset?.modelName ?? String(repoID.split(separator: "/")[1]),
                    source: .huggingFaceCache(repoID: repoID, snapshot: snapshot, revision: snapshot.lastPathComponent),
                    configURL: snapshot.appendingPathComponent("config.json"), preset: nil, platform: platform,
                    experimental: experimental, precisionGiven: precisionGiven,
                    presetOverride: presetOverride ?? preset?.id)
            }
            let name = folder.lastPathComponent
            return try finish(
                argument: argument, name: name, source: .directory(localURL),
                configURL: localURL.appendingPathComponent("config.json"), preset: nil, platform: platform,
                experimental: experimental, precisionGiven: precisionGiven, presetOverride: presetOverride)
        }
        if let preset = catalog.preset(named: argument) {
            guard preset.platforms.contains(platform) else {
                throw ResolutionError.notAvailable(model: argument, platform: platform)
            }
            let source: ModelSource
            if let cached = locateInCache(preset.repoID) {
                source = .huggingFaceCache(repoID: preset.repoID, snapshot: cached.snapshot, revision: cached.revision)
            } else {
                // A cache folder left without a snapshot is not "not downloaded": said, never
                // taken for absent weights (which a farm's "if-missing" would generate).
                source = .presetConfigOnly(repoID: preset.repoID, cacheProblem: cacheUnusableReason?(preset.repoID))
            }
            return try finish(
                argument: argument, name: preset.modelName, source: source, configURL: preset.configURL, preset: preset,
                platform: platform, experimental: experimental, precisionGiven: true, presetOverride: nil)
        }
        guard HuggingFaceCache.isRepositoryID(argument) else {
            throw ResolutionError.notAModelName(argument, hint: unknownNameHint(argument, localURL: localURL))
        }
        // The reference tool refuses a preset-less id before fetching anything; so do we.
        if presetOverride == nil {
            guard experimental else {
                throw ResolutionError.noPreset(
                    model: argument, platform: platform,
                    hint: ModelResolver.pathHint(argument, in: baseDirectory) ?? suggestionHint(argument))
            }
            guard precisionGiven else { throw ResolutionError.precisionRequired(model: argument) }
        }
        guard let cached = locateInCache(argument) else {
            throw ResolutionError.notFound(
                model: argument,
                tried: [
                    "a local directory '\(argument)': none",
                    "a preset named '\(argument)': none (run 'exporter list')",
                    "the Hugging Face cache: "
                        + (cacheMissReason?(argument) ?? "\(cacheDescription(argument)) is absent"),
                ])
        }
        let name = String(argument.split(separator: "/").last ?? Substring(argument))
        return try finish(
            argument: argument, name: name,
            source: .huggingFaceCache(repoID: argument, snapshot: cached.snapshot, revision: cached.revision),
            configURL: cached.snapshot.appendingPathComponent("config.json"), preset: nil, platform: platform,
            experimental: experimental, precisionGiven: precisionGiven, presetOverride: presetOverride)
    }

    private func finish(
        argument: String, name: String, source: ModelSource, configURL: URL, preset: Preset?, platform: Platform,
        experimental: Bool, precisionGiven: Bool, presetOverride: String?
    ) throws -> ResolvedModel {
        // The checkpoint's own config (a preset's ships with the tool) is copied into the bundle.
        if let directory = source.checkpointDirectory, configURL != preset?.configURL {
            try CheckpointWeights.checkContained(configURL, checkpoint: directory)
        }
        // The registry's refusals depend on the model type alone and come first, as the reference
        // tool's do: a real Gemma 3 config on iOS is "does not support iOS variant", whatever else
        // of it the graph could not describe; a family this version cannot export is said so
        // before the keys it would need are asked for, which a multimodal wrapper (Qwen3-VL,
        // Gemma 3 4B+) nests under text_config.
        if let modelType = ModelConfig.declaredModelType(at: configURL) {
            _ = try ArchitectureRegistry.exportableFamily(for: modelType, platform: platform)
        }
        let config = try ModelConfig(contentsOf: configURL)
        let family = try ArchitectureRegistry.family(for: config.modelType, platform: platform)
        var applied = preset
        if let presetOverride {
            guard let chosen = catalog.preset(named: presetOverride) else {
                throw ResolutionError.unknownPreset(presetOverride, available: catalog.presets.map(\.id))
            }
            try ModelResolver.checkSameArchitecture(preset: chosen, config: config)
            applied = chosen
        }
        if applied == nil {
            guard experimental else {
                throw ResolutionError.noPreset(model: argument, platform: platform, hint: presetHint(for: config))
            }
            guard precisionGiven else { throw ResolutionError.precisionRequired(model: argument) }
        }
        return ResolvedModel(
            argument: argument, name: name, source: source, config: config, configURL: configURL, preset: applied,
            family: family)
    }

    /// For a local checkpoint without a preset: the presets of its exact shape (a fine-tune of
    /// a preset's base), which `--preset` would apply.
    func presetHint(for config: ModelConfig) -> String? {
        let matching = catalog.presets.filter {
            (try? ModelResolver.checkSameArchitecture(preset: $0, config: config)) != nil
        }
        guard !matching.isEmpty else { return nil }
        let names = matching.map { "'\($0.id)'" }.joined(separator: " or ")
        return "Its config has the shape of preset \(names): pass --preset \(matching[0].id) to export it with that "
            + "preset's defaults."
    }

    /// For an `org/model`-shaped argument whose first part is a folder in `folder` (nil: the
    /// process's): most likely a mistyped path, which the registry's refusal alone would not say.
    /// - Parameter place: where `folder` is, in the message's words.
    static func pathHint(_ argument: String, in folder: URL? = nil, place: String = "here") -> String? {
        let first = String(argument.split(separator: "/").first ?? "")
        var isDirectory: ObjCBool = false
        guard HuggingFaceCache.isRepositoryID(argument),
            FileManager.default.fileExists(
                atPath: folder.map { $0.appendingPathComponent(first).path } ?? first, isDirectory: &isDirectory),
            isDirectory.boolValue
        else { return nil }
        return "There is no folder '\(argument)' \(place), though '\(first)' is one: if you meant a checkpoint folder, "
            + "check the path."
    }

    /// What a model argument that is no folder, preset or id may have meant, said after the
    /// registry's refusal: for a path (it has a `/`, or starts with `.` or `~`), that it names no
    /// folder; otherwise the presets it names in part or with a typo (``presetSuggestions(for:)``).
    func unknownNameHint(_ argument: String, localURL: URL) -> String? {
        guard argument.contains("/") || argument.hasPrefix(".") || argument.hasPrefix("~") else {
            return suggestionHint(argument)
        }
        if FileManager.default.fileExists(atPath: localURL.path) {
            return "'\(argument)' is a file, not a checkpoint folder: pass the folder that holds its config.json."
        }
        return "There is no folder '\(argument)'\(argument.hasPrefix("/") ? "" : " here"): if you meant a "
            + "checkpoint folder, check the path."
    }

    /// `Did you mean 'a' or 'b'?`, naming ``presetSuggestions(for:)``; nil when there are none.
    func suggestionHint(_ argument: String) -> String? {
        let ids = presetSuggestions(for: argument).map { "'\($0)'" }
        guard let last = ids.last else { return nil }
        return "Did you mean " + (ids.count == 1 ? last : ids.dropLast().joined(separator: ", ") + " or " + last) + "?"
    }

    /// The ids of the presets `argument` most likely meant, in catalog order: those with a name
    /// it begins (`qwen3` gives both Qwen3 presets), or one with a name at most two typos away
    /// (case ignored) holding the same digits: a different number is another model, never a typo.
    func presetSuggestions(for argument: String) -> [String] {
        let typed = Array(argument.lowercased())
        guard typed.count >= 4 else { return [] }
        let digits = typed.filter(\.isNumber)
        return catalog.presets.filter { preset in
            preset.names.contains { name in
                let candidate = Array(name)
                return candidate.starts(with: typed)
                    || (candidate.filter(\.isNumber) == digits && Self.editDistance(typed, candidate, atMost: 2) != nil)
            }
        }.map(\.id)
    }

    /// The Levenshtein distance between `first` and `second` when it is at most `limit`, nil beyond.
    static func editDistance(_ first: [Character], _ second: [Character], atMost limit: Int) -> Int? {
        guard abs(first.count - second.count) <= limit else { return nil }
        var previous = Array(0...second.count)
        for (row, character) in first.enumerated() {
            var current = [row + 1] + Array(repeating: 0, count: second.count)
            for column in second.indices {
                let substitution = previous[column] + (character == second[column] ? 0 : 1)
                current[column + 1] = min(substitution, previous[column + 1] + 1, current[column] + 1)
            }
            previous = current
        }
        return previous[second.count] <= limit ? previous[second.count] : nil
    }

    /// A preset's defaults fit only a checkpoint of the same shape (a fine-tune of the same base).
    static func checkSameArchitecture(preset: Preset, config: ModelConfig) throws {
        let reference = try ModelConfig(contentsOf: preset.configURL)
        let fields: [(String, String, String)] = [
            (
                "model_type", ArchitectureRegistry.canonicalModelType(reference.modelType),
                ArchitectureRegistry.canonicalModelType(config.modelType)
            ),
            ("num_hidden_layers", "\(reference.layerCount)", "\(config.layerCount)"),
            ("hidden_size", "\(reference.hiddenSize)", "\(config.hiddenSize)"),
            ("intermediate_size", "\(reference.intermediateSize)", "\(config.intermediateSize)"),
            ("num_attention_heads", "\(reference.attentionHeads)", "\(config.attentionHeads)"),
            ("num_key_value_heads", "\(reference.keyValueHeads)", "\(config.keyValueHeads)"),
            ("head_dim", "\(reference.headDimension)", "\(config.headDimension)"),
        ]
        if let mismatch = fields.first(where: { $0.1 != $0.2 }) {
            throw ResolutionError.presetMismatch(
                preset: preset.id, field: mismatch.0, preset_value: mismatch.1, checkpoint_value: mismatch.2)
        }
    }
}
