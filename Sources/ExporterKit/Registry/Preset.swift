import Foundation

/// A ready-made export: a checkpoint with its default context, precision and compression.
/// Kept as data in `Presets/presets.json`; adding one needs no code.
public struct Preset: Equatable, Sendable {
    /// The preset id, e.g. `qwen2.5-1.5b-instruct`.
    public let id: String
    /// The Hugging Face repository, e.g. `Qwen/Qwen2.5-1.5B-Instruct`.
    public let repoID: String
    /// Other names that select the preset (matched case-insensitively).
    public let aliases: [String]
    /// The checkpoint's `config.json`, shipped in `Presets/`.
    public let configURL: URL
    /// Platforms the preset can be exported for.
    public let platforms: [Platform]
    /// Default context length in tokens.
    public let contextLength: Int
    /// Default compute precision.
    public let computePrecision: ComputePrecision
    /// Name of the default compression config in `Presets/compression/`.
    public let compression: String

    /// The repository's model name, e.g. `Qwen2.5-1.5B-Instruct`: the artifact's default name.
    public var modelName: String { repoID.split(separator: "/").last.map(String.init) ?? id }

    /// Every name that selects this preset, lowercased: id, aliases, repo id and model name.
    public var names: Set<String> {
        Set(([id, repoID, modelName] + aliases).map { $0.lowercased() })
    }
}

/// Why the presets folder cannot be used.
public enum PresetError: ExporterError, Equatable {
    /// No `Presets/` folder was found.
    case presetsNotFound(searched: [String])
    /// `EXPORTER_PRESETS` names a folder without `presets.json` (a typo would otherwise fall
    /// back, silently, to another Presets folder).
    case namedPresetsNotFound(path: String)
    /// `presets.json` is unreadable or malformed.
    case invalid(path: String, reason: String)
    /// The file was written for another schema version.
    case unsupportedSchema(path: String, found: String, supported: String)

    /// The message, naming the presets file or the folders searched.
    public var description: String {
        switch self {
        case .presetsNotFound(let searched):
            return "no Presets folder found (looked in: \(searched.joined(separator: ", "))); "
                + "set EXPORTER_PRESETS to the repository's Presets folder"
        case .namedPresetsNotFound(let path):
            return "EXPORTER_PRESETS names '\(path)', which holds no presets.json; set it to a Presets folder, "
                + "or unset it to use the one found beside exporter"
        case .invalid(let path, let reason):
            return "presets file '\(path)': \(reason)"
        case .unsupportedSchema(let path, let found, let supported):
            return "presets file '\(path)' has schema '\(found)'; this version reads '\(supported)'"
        }
    }

    /// `notFound` (66) when there is no presets folder, `badInput` (65) for a bad file.
    public var exitStatus: ExitStatus {
        switch self {
        case .presetsNotFound, .namedPresetsNotFound: return .notFound
        default: return .badInput
        }
    }
}

/// The data in `Presets/`: presets and compression configs (later devices and farms).
public struct PresetCatalog: Sendable {
    /// The schema of `presets.json` this version reads.
    public static let schema = "exporter.presets/1"

    /// The `Presets/` folder.
    public let directory: URL
    /// The presets, in file order.
    public let presets: [Preset]

    /// Loads `presets.json` from `directory`.
    /// - Throws: `PresetError` when the file is missing or malformed.
    public init(directory: URL) throws {
        self.directory = directory
        let file = directory.appendingPathComponent("presets.json")
        func invalid(_ reason: String) -> PresetError { .invalid(path: file.path, reason: reason) }
        guard let data = try? Data(contentsOf: file) else { throw invalid("cannot be read") }
        let document: JSONValue
        do { document = try JSONParser.parse([UInt8](data)) } catch { throw invalid("\(error)") }
        guard let root = document.objectValue else { throw invalid("the document is not an object") }
        let schema = root["schema"]?.stringValue ?? ""
        guard schema == PresetCatalog.schema else {
            throw PresetError.unsupportedSchema(path: file.path, found: schema, supported: PresetCatalog.schema)
        }
        guard let entries = root["presets"]?.arrayValue else { throw invalid("no 'presets' array") }
        var seen: Set<String> = []
        presets = try entries.enumerated().map { index, entry in
            guard let object = entry.objectValue else { throw invalid("preset \(index + 1) is not an object") }
            func field(_ key: String) throws -> JSONValue {
                guard let value = object[key] else { throw invalid("preset \(index + 1) has no '\(key)'") }
                return value
            }
            guard let id = try field("id").stringValue, !id.isEmpty else {
                throw invalid("preset \(index + 1): bad 'id'")
            }
            func bad(_ key: String) -> PresetError { invalid("preset '\(id)': bad '\(key)'") }
            guard let repoID = try field("repo_id").stringValue else { throw bad("repo_id") }
            guard let configPath = try field("config").stringValue else { throw bad("config") }
            guard let platformNames = try field("platforms").arrayValue else { throw bad("platforms") }
            let platforms = try platformNames.map { value -> Platform in
                guard let platform = value.stringValue.flatMap(Platform.init(rawValue:)) else { throw bad("platforms") }
                return platform
            }
            guard let context = try field("context_length").intValue, context > 0 else { throw bad("context_length") }
            guard let precision = try field("compute_precision").stringValue.flatMap(ComputePrecision.init(rawValue:))
            else { throw bad("compute_precision") }
            guard let compression = try field("compression").stringValue else { throw bad("compression") }
            let aliases = try (object["aliases"]?.arrayValue ?? []).map { value -> String in
                guard let alias = value.stringValue else { throw bad("aliases") }
                return alias
            }
            let preset = Preset(
                id: id, repoID: repoID, aliases: aliases,
                configURL: directory.appendingPathComponent(configPath), platforms: platforms,
                contextLength: context, computePrecision: precision, compression: compression)
            for name in preset.names {
                guard seen.insert(name).inserted else { throw invalid("the name '\(name)' selects two presets") }
            }
            return preset
        }
    }

    /// The preset `name` selects (id, alias, repo id or model name; case-insensitive), if any.
    public func preset(named name: String) -> Preset? {
        let key = name.lowercased()
        return presets.first { $0.names.contains(key) }
    }

    /// The folder of shipped compression configs.
    public var compressionDirectory: URL { directory.appendingPathComponent("compression") }

    /// Names of the shipped compression configs, sorted; hidden files are none (a farm's digest
    /// of the presets leaves them out).
    public func compressionConfigNames() -> [String] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: compressionDirectory.path)) ?? []
        return files.filter { $0.hasSuffix(".json") && !$0.hasPrefix(".") }.map { String($0.dropLast(5)) }.sorted()
    }

    /// The shipped compression config called `name` (`none` for no compression).
    ///
    /// A name is one text whatever its Unicode form (`café` composed or decomposed), as on a
    /// Mac's file system: either spelling opens the file. A folder holding the name's file
    /// twice for a Mac (in two Unicode forms, or in two cases) is refused rather than picking
    /// one by its bytes, and so is a file whose `name` is not its own: the manifest records
    /// that name as the config applied.
    /// - Throws: `CompressionConfigError` when no such config ships, it is invalid, two files
    ///   are one name on a Mac, or the file's `name` differs (`.invalid`, naming the file).
    public func compressionConfig(named name: String) throws -> CompressionConfig {
        if name == "none" { return .none }
        let names = compressionConfigNames()
        let clashing = names.filter { FileSystemName.clash($0, name) }.sorted(by: FileSystemName.byteOrder)
        guard let file = clashing.first(where: { $0 == name }) else {
            throw CompressionConfigError.unknownName(name, available: names)
        }
        if let other = clashing.first(where: { !$0.utf8.elementsEqual(file.utf8) }) {
            let (first, second) = FileSystemName.byteOrder(file, other) ? (file, other) : (other, file)
            let why =
                first == second
                ? "one name in two Unicode forms, which this tool (and a Mac's file system) takes as one config"
                : "one name on a Mac's file system, which ignores case"
            throw CompressionConfigError.invalid(
                path: compressionDirectory.path,
                reason: "'\(FileSystemName.shownByScalars(first)).json' and "
                    + "'\(FileSystemName.shownByScalars(second)).json' are \(why); rename or remove one")
        }
        let url = compressionDirectory.appendingPathComponent(file + ".json")
        let config = try CompressionConfig(contentsOf: url)
        guard config.name == file else {
            throw CompressionConfigError.invalid(
                path: url.path,
                reason: "its 'name' is '\(config.name)', not its file's name '\(file)': a manifest would record "
                    + "'\(config.name)' for the rules of this file; make them one")
        }
        return config
    }

    /// Finds the `Presets/` folder: `$EXPORTER_PRESETS` when set (and then only it), else `Presets/` beside or above the
    /// executable (a build inside the repository), `share/exporter/Presets` of an installed tool,
    /// then the current folder and its parents.
    /// - Throws: `PresetError.namedPresetsNotFound` when `EXPORTER_PRESETS` names a folder
    ///   without `presets.json`, `.presetsNotFound` listing where it looked.
    public static func locateDirectory(
        environment: [String: String], executable: URL, currentDirectory: URL
    ) throws -> URL {
        var candidates: [URL] = []
        if let explicit = environment["EXPORTER_PRESETS"], !explicit.isEmpty {
            let named = URL.resolvingFilePath(explicit, from: currentDirectory)
            guard FileManager.default.fileExists(atPath: named.appendingPathComponent("presets.json").path) else {
                throw PresetError.namedPresetsNotFound(path: named.path)
            }
            return named
        }
        var folder = executable.resolvingSymlinksInPath().deletingLastPathComponent()
        candidates.append(folder.deletingLastPathComponent().appendingPathComponent("share/exporter/Presets"))
        for _ in 0..<6 {
            candidates.append(folder.appendingPathComponent("Presets"))
            folder = folder.deletingLastPathComponent()
        }
        folder = currentDirectory
        for _ in 0..<6 {
            candidates.append(folder.appendingPathComponent("Presets"))
            folder = folder.deletingLastPathComponent()
        }
        for candidate in candidates
        where FileManager.default.fileExists(atPath: candidate.appendingPathComponent("presets.json").path) {
            return candidate.physicallyStandardized
        }
        var searched: [String] = []
        for path in candidates.map(\.path) where !searched.contains(path) { searched.append(path) }
        throw PresetError.presetsNotFound(searched: searched)
    }
}
