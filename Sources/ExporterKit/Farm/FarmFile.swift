import Foundation

/// Why a farm file cannot be used; each message names the job (or the file) and the key.
public enum FarmError: ExporterError, Equatable {
    /// The file is unreadable.
    case unreadable(path: String)
    /// The file is malformed.
    case invalid(path: String, reason: String)
    /// A job is malformed.
    case invalidJob(path: String, job: String, reason: String)
    /// Several jobs are malformed: each one's first fault, in the file's order, so that one
    /// pass fixes them all.
    case invalidJobs([FarmError])
    /// `--shard` is not `I/N` with 1 ≤ I ≤ N.
    case invalidShard(String)
    /// Another farm run holds the output folder.
    case locked(path: String, holder: String)
    /// Some jobs failed (the report has the details).
    case jobsFailed(count: Int, total: Int)
    /// `--collect` found no shard reports, or reports of different farms.
    case collect(reason: String)
    /// A job's device loads only bundles of another platform than the job exports.
    case deviceOfOtherPlatform(id: String, devicePlatform: DevicePlatform, jobPlatform: Platform)

    /// The message, naming the farm file and the job where one is at fault.
    public var description: String {
        switch self {
        case .unreadable(let path): return "cannot read farm file '\(path)'"
        case .invalid(let path, let reason): return "farm file '\(path)': \(reason)"
        case .invalidJob(let path, let job, let reason): return "farm file '\(path)', job '\(job)': \(reason)"
        case .invalidJobs: return descriptionLines.joined(separator: "\n")
        case .invalidShard(let text): return "--shard expects I/N with 1 ≤ I ≤ N, got '\(text)'"
        case .locked(let path, let holder):
            return "another farm run (\(holder)) is using '\(path)'; wait for it to finish or pass --wait"
        case .jobsFailed(let count, let total): return "\(count) of \(total) jobs failed"
        case .collect(let reason): return "cannot collect shard reports: \(reason)"
        case .deviceOfOtherPlatform(let id, let devicePlatform, let jobPlatform):
            let needed = devicePlatform.bundlePlatform.rawValue
            return "architecture '\(id)' is \(devicePlatform == .iOS ? "an" : "a") \(devicePlatform.rawValue) device, "
                + "which loads \(needed) bundles, and this job exports for \(jobPlatform.rawValue): "
                + "list it in a job with \"platform\": \"\(needed)\""
        }
    }

    /// One line per malformed job.
    public var descriptionLines: [String] {
        if case .invalidJobs(let errors) = self { return errors.flatMap(\.descriptionLines) }
        return [description]
    }

    /// Throws nothing for no error, the error itself for one, ``invalidJobs(_:)`` for several.
    static func throwAll(_ errors: [FarmError]) throws {
        guard let first = errors.first else { return }
        throw errors.count == 1 ? first : .invalidJobs(errors)
    }

    /// `notFound` (66), `badInput` (65), `usage` (64) for `--shard`, `ioFailure` (74) for a held lock,
    /// `verificationFailed` (1) when jobs failed.
    public var exitStatus: ExitStatus {
        switch self {
        case .unreadable: return .notFound
        case .invalid, .invalidJob, .invalidJobs, .deviceOfOtherPlatform: return .badInput
        case .invalidShard: return .usage
        case .locked: return .ioFailure
        case .jobsFailed: return .verificationFailed
        case .collect: return .badInput
        }
    }
}

/// When a farm job uses synthetic weights.
public enum SyntheticPolicy: String, Equatable, Sendable {
    /// Always the checkpoint's weights (`false`).
    case never
    /// Always generated weights (`true`).
    case always
    /// Generated weights only when the checkpoint's are not on this machine (`"if-missing"`):
    /// the example farm runs anywhere, and its manifests say which weights they hold.
    case ifMissing = "if-missing"
}

/// One export of a farm: a model with its flags, and the devices to compile for.
public struct FarmJob: Equatable, Sendable {
    /// Unique name: the job's folder under the output folder and its row in the report.
    public var name: String
    /// A preset, an `org/model` id or a checkpoint folder (relative to the farm file).
    public var model: String
    /// Target platform.
    public var platform: Platform = .iOS
    /// Context length (nil: the preset's or the default).
    public var context: Int?
    /// A shipped compression config, or nil for the preset's.
    public var compression: String?
    /// A compression config file (relative to the farm file).
    public var compressionConfig: String?
    /// Compute precision (nil: the preset's).
    public var computePrecision: ComputePrecision?
    /// `--experimental`.
    public var experimental = false
    /// `--preset` for a local checkpoint.
    public var preset: String?
    /// `--disable-embedding-quantization-ios`.
    public var disableEmbeddingQuantizationIOS = false
    /// The artifact's name (nil: the model's).
    public var outputName: String?
    /// Device architectures to compile for after the export (empty: none), as the farm file
    /// spells them (the table's ids, in any case, each once).
    public var devices: [String] = []
    /// A device table extending the shipped one (`exporter compile --devices`), relative to the farm file.
    public var deviceTable: String?
    /// When to export generated weights (seeded) instead of the checkpoint's.
    public var synthetic: SyntheticPolicy = .never
    /// Seed of synthetic weights.
    public var seed: UInt64 = 0
    /// `--allow-clamp`.
    public var allowClamp = false
    /// `--palette-search` (nil: the compression config's).
    public var paletteSearch: CompressionScheme.Search?

    /// `path` relative to the farm file's folder `farmDirectory`, as an absolute path (or one
    /// relative as that folder is); `./x` is `x`, so a message naming it shows no `.` (`..`
    /// stays: a link's parent is not lexical).
    static func resolved(_ path: String, farmDirectory: URL) -> String {
        let full = path.hasPrefix("/") ? path : farmDirectory.appendingPathComponent(path).path
        let parts = full.split(separator: "/").filter { $0 != "." }.joined(separator: "/")
        return full.hasPrefix("/") ? "/" + parts : parts
    }

    /// The model as the export takes it: a path (one that exists beside the farm file, or is
    /// written as a path) resolved from the farm file's folder, else the preset name or
    /// `org/model` id as written (which the export, run in the farm file's folder, looks for
    /// there first too, never in the farm's current folder).
    public func modelArgument(farmDirectory: URL) -> String {
        let path = FarmJob.resolved(model, farmDirectory: farmDirectory)
        let isPath = model.hasPrefix(".") || model.hasPrefix("/") || FileManager.default.fileExists(atPath: path)
        return isPath ? path : model
    }

    /// The command-line arguments of this job's export, for the child `exporter` process.
    /// - Parameter synthetic: whether this run uses generated weights (the policy, resolved).
    public func exportArguments(outputDirectory: URL, farmDirectory: URL, synthetic: Bool = false) -> [String] {
        func resolved(_ path: String) -> String { FarmJob.resolved(path, farmDirectory: farmDirectory) }
        var arguments = [
            modelArgument(farmDirectory: farmDirectory), "--platform", platform.rawValue, "--output-dir",
            outputDirectory.path,
        ]
        if let context { arguments += ["--max-context-length", String(context)] }
        if let compression { arguments += ["--compression", compression] }
        if let compressionConfig { arguments += ["--compression-config", resolved(compressionConfig)] }
        if let computePrecision { arguments += ["--compute-precision", computePrecision.rawValue] }
        if experimental { arguments.append("--experimental") }
        if let preset { arguments += ["--preset", preset] }
        if disableEmbeddingQuantizationIOS { arguments.append("--disable-embedding-quantization-ios") }
        if let outputName { arguments += ["--output-name", outputName] }
        if synthetic { arguments += ["--synthetic", "--seed", String(seed)] }
        if allowClamp { arguments.append("--allow-clamp") }
        if let paletteSearch { arguments += ["--palette-search", paletteSearch.rawValue] }
        return arguments
    }
}

/// A farm file (`exporter.farm/1`): defaults, then jobs that override them. See `docs/FARM.md`.
public struct FarmFile: Equatable, Sendable {
    /// The schema this version reads.
    public static let schema = "exporter.farm/1"
    /// Keys a job (or the defaults) may set.
    static let jobKeys: Set<String> = [
        "name", "model", "platform", "context", "compression", "compression_config", "compute_precision",
        "experimental",
        "preset", "disable_embedding_quantization_ios", "output_name", "devices", "device_table", "synthetic", "seed",
        "allow_clamp", "palette_search",
    ]

    /// The file's path.
    public let path: URL
    /// The jobs, defaults applied, in file order.
    public let jobs: [FarmJob]
    /// SHA-256 of the file's bytes, as hexadecimal digits.
    public let contentDigest: String

    /// Parses a farm file.
    /// - Throws: `FarmError` naming the job and key for unknown keys and invalid values,
    ///   `BundleError.readFailed` when the file is there but cannot be read.
    public init(contentsOf url: URL) throws {
        guard let data = try readNamedFile(url) else { throw FarmError.unreadable(path: url.path) }
        try self.init(bytes: [UInt8](data), path: url)
    }

    /// Parses a farm file's bytes.
    /// - Throws: `FarmError` naming the job and key for unknown keys and invalid values.
    public init(bytes: [UInt8], path: URL) throws {
        self.path = path
        var hash = SHA256()
        hash.update(bytes)
        contentDigest = hash.hexDigest()
        let file = path.path
        let document: JSONValue
        do { document = try JSONParser.parse(bytes) } catch { throw FarmError.invalid(path: file, reason: "\(error)") }
        guard let root = document.objectValue else {
            throw FarmError.invalid(path: file, reason: "the document is not an object")
        }
        if let unknown = root.keys.first(where: { !["schema", "defaults", "jobs"].contains($0) }) {
            throw FarmError.invalid(path: file, reason: "unknown key '\(unknown)'")
        }
        guard let schemaValue = root["schema"] else {
            throw FarmError.invalid(path: file, reason: "no 'schema'; this version reads '\(FarmFile.schema)'")
        }
        guard let schema = schemaValue.stringValue, schema == FarmFile.schema else {
            let found =
                schemaValue.stringValue.map { "'\($0)'" }
                ?? JSONWriter.string(schemaValue).trimmingCharacters(
                    in: .whitespacesAndNewlines)
            throw FarmError.invalid(path: file, reason: "schema is \(found); this version reads '\(FarmFile.schema)'")
        }
        let defaults: JSONObject
        switch root["defaults"] {
        case nil: defaults = JSONObject()
        case .object(let object)?: defaults = object
        case let other?:
            throw FarmError.invalid(
                path: file, reason: "'defaults' must be an object, found \(other.typeDescription)")
        }
        if let bad = defaults.keys.first(where: { !FarmFile.jobKeys.contains($0) || $0 == "name" }) {
            throw FarmError.invalid(path: file, reason: "defaults: unknown key '\(bad)'")
        }
        guard let entries = root["jobs"]?.arrayValue, !entries.isEmpty else {
            throw FarmError.invalid(path: file, reason: "'jobs' must be a non-empty array")
        }
        // Each name as the first job spelling it (ignoring case) wrote it, and that job's number.
        var names: [String: (spelling: String, number: Int)] = [:]
        var faults: [FarmError] = []
        jobs = entries.enumerated().compactMap { index, entry in
            do {
                guard let object = entry.objectValue else {
                    throw FarmError.invalidJob(path: file, job: "#\(index + 1)", reason: "not an object")
                }
                let label = object["name"]?.stringValue ?? "#\(index + 1)"
                if let unknown = object.keys.first(where: { !FarmFile.jobKeys.contains($0) }) {
                    throw FarmError.invalidJob(path: file, job: label, reason: "unknown key '\(unknown)'")
                }
                var merged = defaults
                for member in object.members { merged[member.key] = member.value }
                let job = try FarmFile.job(from: merged, label: label, path: file)
                if let other = names[job.name.lowercased()] {
                    // The same spelling names nothing new: the earlier job is told by its place.
                    throw FarmError.invalidJob(
                        path: file, job: label,
                        reason: other.spelling == job.name
                            ? "the name is used by job #\(other.number) too"
                            : "the name is used by job '\(other.spelling)' (job names ignore case)")
                }
                names[job.name.lowercased()] = (job.name, index + 1)
                return job
            } catch {
                faults.append(error as? FarmError ?? .invalid(path: file, reason: "\(error)"))
                return nil
            }
        }
        try FarmError.throwAll(faults)
    }

    /// A key left out takes its default; a key given must hold a value of its type: `null` is
    /// none (it would otherwise stand for the default here and fail the export as a missing value).
    private static func job(from object: JSONObject, label: String, path: String) throws -> FarmJob {
        func bad(_ reason: String) -> FarmError { .invalidJob(path: path, job: label, reason: reason) }
        func string(_ key: String) throws -> String? {
            guard let value = object[key] else { return nil }
            guard let text = value.stringValue, !text.isEmpty else { throw bad("'\(key)' must be a non-empty string") }
            return text
        }
        func flag(_ key: String) throws -> Bool {
            guard let value = object[key] else { return false }
            guard let flag = value.boolValue else { throw bad("'\(key)' must be true or false") }
            return flag
        }
        func choice<Choice: RawRepresentable>(_ key: String, _ choices: [Choice]) throws -> Choice?
        where Choice.RawValue == String {
            guard let value = object[key] else { return nil }
            guard let text = value.stringValue, let parsed = Choice(rawValue: text) else {
                throw bad("'\(key)' must be one of: \(choices.map(\.rawValue).joined(separator: ", "))")
            }
            return parsed
        }
        guard let name = try string("name") else { throw bad("missing 'name'") }
        guard name.range(of: #"^[A-Za-z0-9][A-Za-z0-9._-]*$"#, options: .regularExpression) != nil else {
            throw bad("'name' must be ASCII letters, digits, '.', '_' or '-', and start with a letter or digit")
        }
        guard let model = try string("model") else { throw bad("missing 'model'") }
        var job = FarmJob(name: name, model: model)
        job.platform = try choice("platform", Platform.allCases) ?? .iOS
        if let value = object["context"] {
            // Written as an integer: `128.0` or `1.28e2` is not one, as safetensors' integers are not.
            guard let context = value.integerLiteralValue, context > 0 else {
                throw bad("'context' must be a positive integer")
            }
            job.context = context
        }
        job.compression = try string("compression")
        job.compressionConfig = try string("compression_config")
        if job.compression != nil, job.compressionConfig != nil {
            throw bad("'compression' and 'compression_config' cannot be used together")
        }
        job.computePrecision = try choice("compute_precision", ComputePrecision.allCases)
        job.experimental = try flag("experimental")
        job.preset = try string("preset")
        job.disableEmbeddingQuantizationIOS = try flag("disable_embedding_quantization_ios")
        // Given at all, `false` too: a key that can do nothing for the job is refused, as `seed` is.
        if object["disable_embedding_quantization_ios"] != nil, job.platform != .iOS {
            throw bad("'disable_embedding_quantization_ios' applies to platform iOS, not \(job.platform)")
        }
        job.outputName = try string("output_name")
        if let name = job.outputName {
            // As the export refuses its --output-name, and before anything runs.
            guard !name.contains("/"), !name.hasPrefix(".") else {
                throw bad("'output_name' must be a plain file name (no '/', not starting with '.'), got '\(name)'")
            }
            guard !name.unicodeScalars.contains(where: \.isControlCharacter) else {
                throw bad("'output_name' must not contain control characters, got '\(name)'")
            }
            guard name.utf8.count <= ExportPlan.longestName else {
                let shown = Format.shortened(name)
                throw bad(
                    "'output_name' '\(shown)' is \(name.utf8.count) bytes long; an artifact's name is at most "
                        + "\(ExportPlan.longestName) bytes (its files and their staging folders must fit 255-byte file names)"
                )
            }
        }
        if let value = object["devices"] {
            guard let items = value.arrayValue, items.allSatisfy({ $0.stringValue?.isEmpty == false }) else {
                throw bad("'devices' must be an array of architecture ids")
            }
            job.devices = items.compactMap(\.stringValue)
            // Ids are case-insensitive, as the device table compares them: `H17P` is h17p, and one
            // architecture listed twice is refused as a job name used twice is.
            for (index, device) in job.devices.enumerated() {
                guard let earlier = job.devices[..<index].first(where: { $0.lowercased() == device.lowercased() })
                else { continue }
                throw bad(
                    "device '\(device)' is listed twice"
                        + (earlier == device ? "" : " ('\(earlier)' is the same architecture: ids ignore case)"))
            }
        }
        job.deviceTable = try string("device_table")
        if job.deviceTable != nil, job.devices.isEmpty {
            throw bad("'device_table' applies to 'devices'; list the architectures to compile for too")
        }
        if let value = object["synthetic"] {
            if let flag = value.boolValue {
                job.synthetic = flag ? .always : .never
            } else if value.stringValue == SyntheticPolicy.ifMissing.rawValue {
                job.synthetic = .ifMissing
            } else {
                throw bad("'synthetic' must be true, false or \"if-missing\"")
            }
        }
        if let value = object["seed"] {
            guard let seed = value.integerLiteralValue, seed >= 0 else {
                throw bad("'seed' must be a non-negative integer")
            }
            // As the export refuses `--seed` without `--synthetic`: a seed that seeds nothing is a mistake.
            guard job.synthetic != .never else {
                throw bad("'seed' applies to synthetic weights; set 'synthetic' too")
            }
            job.seed = UInt64(seed)
        }
        job.allowClamp = try flag("allow_clamp")
        job.paletteSearch = try choice("palette_search", CompressionScheme.Search.allCases)
        if job.paletteSearch != nil, job.compression == "none" {
            throw bad("'palette_search' applies to palettised weights; 'compression' 'none' palettises none")
        }
        return job
    }
}
