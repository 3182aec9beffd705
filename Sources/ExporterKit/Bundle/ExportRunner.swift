import Foundation

/// How an export runs beyond its plan.
public struct ExportSettings: Sendable {
    /// Where artifacts go; the bundle is `<outputDirectory>/<name>/<Name>.aimodel`.
    public var outputDirectory: URL
    /// Replace an existing bundle.
    public var overwrite = false
    /// Use generated weights with this seed instead of the checkpoint's.
    public var syntheticSeed: UInt64?
    /// Clamp bfloat16 values beyond float16's range instead of refusing.
    public var allowClamp = false
    /// Fault injection for tests.
    public var faults: FaultInjector?
    /// Token ids of a calibration text: palettisation then weights every weight by the energy
    /// of the activations it multiplies on this text. Nil (the default): data-free.
    public var calibrationTokens: [Int]?
    /// Memory the conversion may take (nil: not checked): the machine's, or what a limit of the
    /// process leaves; the command line fills it from the system
    /// (``SystemResources/availableMemory(startingThreads:)``). An export needing more is refused
    /// before it starts.
    public var availableMemory: AvailableMemory?
    /// Free bytes on the output folder's volume (nil: not checked); the command line fills it
    /// from the system. A bundle estimated larger is refused before anything is written.
    public var availableDiskBytes: Int?

    /// Settings writing into `outputDirectory`.
    public init(outputDirectory: URL) { self.outputDirectory = outputDirectory }
}

/// What an export produced.
public struct ExportResult: Sendable {
    /// The bundle folder.
    public let bundleURL: URL
    /// Its manifest.
    public let manifest: Manifest
}

/// The main job: plan → weights source → validation → bundle.
public enum ExportRunner {
    /// Where the bundle of `plan` goes.
    public static func bundleURL(for plan: ExportPlan, in outputDirectory: URL) -> URL {
        outputDirectory.appendingPathComponent(plan.outputName.lowercased(), isDirectory: true)
            .appendingPathComponent(plan.outputName + ".aimodel", isDirectory: true)
    }

    /// Fingerprints of the files an export reads: weights and tokenizer files.
    /// - Parameter tokenizer: the tokenizer files in `directory` when the caller has read them already.
    /// - Throws: `BundleError.readFailed` naming an unreadable file.
    public static func inputFingerprints(
        directory: URL, weights: CheckpointWeights, tokenizer: TokenizerFiles? = nil
    ) throws -> [(name: String, fingerprint: String)] {
        // Weights files with their tensors' byte ranges, sorted so that the windows are read in
        // order; the files the bundle copies, whole.
        var inputs = weights.files.map { file in
            (
                url: file.url, tensors: file.tensors.values.map(\.byteRange).sorted { $0.lowerBound < $1.lowerBound },
                whole: false
            )
        }
        if let index = weights.indexURL { inputs.append((index, [], true)) }
        inputs += try (tokenizer ?? TokenizerFiles(directory: directory)).files.map { ($0, [], true) }
        return try inputs.map {
            ($0.url.lastPathComponent, try BuildKey.fingerprint(of: $0.url, tensorRanges: $0.tensors, whole: $0.whole))
        }
    }

    /// Exports `plan`.
    /// - Parameters:
    ///   - warn: receives warnings as they arise (unexpected tensors, clamped values).
    ///   - progress: told before the first tensor and after every tensor.
    ///   - stepProgress: told the progress of the calibration pass, which runs first.
    ///
    /// It reads the checkpoint folder (a Hugging Face cache snapshot: the snapshot folder, whose
    /// links `synth --out` would replace) holding its lock for reading (``CheckpointFolderLock``)
    /// from opening the weights until the bundle is written, so the files it fingerprints are the
    /// files its weights come from: a `synth` writing there meanwhile would mix them.
    /// - Throws: `ExportError.noWeights` when there is nothing to read;
    ///   `CheckpointError.readFailed` naming the checkpoint folder while a `synth` writes there;
    ///   then the reader's, validator's, compressor's and writer's errors.
    public static func run(
        _ plan: ExportPlan, settings: ExportSettings, warn: (String) -> Void = { _ in },
        progress: (ExportProgress) -> Void = { _ in }, stepProgress: (WorkProgress) -> Void = { _ in }
    ) throws -> ExportResult {
        guard settings.syntheticSeed == nil, let directory = plan.model.source.checkpointDirectory else {
            return try runReading(plan, settings: settings, warn: warn, progress: progress, stepProgress: stepProgress)
        }
        return try CheckpointFolderLock.holding(directory, .reading) {
            try runReading(plan, settings: settings, warn: warn, progress: progress, stepProgress: stepProgress)
        }
    }

    /// ``run(_:settings:warn:progress:stepProgress:)`` holding the checkpoint folder's lock.
    private static func runReading(
        _ plan: ExportPlan, settings: ExportSettings, warn: (String) -> Void,
        progress: (ExportProgress) -> Void, stepProgress: (WorkProgress) -> Void
    ) throws -> ExportResult {
        let destination = bundleURL(for: plan, in: settings.outputDirectory)
        // The model's folder too: `Café` and `Café` (decomposed) name two on Linux, one on a Mac.
        try ArtifactDirectory.checkNameClash(destination.deletingLastPathComponent())
        try ArtifactDirectory.checkDestination(
            destination, overwrite: settings.overwrite, marker: BundleWriter.manifestName)
        let source: WeightSource
        var sourceFiles: [Manifest.SourceFile] = []
        var tokenizer: TokenizerFiles?
        var warnings: [String] = []
        // The same, as said to whoever runs the export: the checkpoint folder named.
        var printedWarnings: [String] = []
        var checkpointSource: CheckpointWeightSource?
        var fingerprints: [(name: String, fingerprint: String)] = []
        if let seed = settings.syntheticSeed {
            source = SyntheticWeightSource(seed: seed, storage: SyntheticWeightSource.storage(for: plan.model.config))
        } else {
            guard let directory = plan.model.source.checkpointDirectory, let root = plan.model.source.containmentRoot
            else {
                if let refusal = ExportError.noSnapshot(of: plan) { throw refusal }
                let repoID: String
                if case .presetConfigOnly(let id, _) = plan.model.source {
                    repoID = id
                } else {
                    repoID = plan.model.argument
                }
                throw ExportError.noWeights(
                    model: plan.model.preset?.id ?? plan.model.argument, repoID: repoID,
                    lookedIn: "the Hugging Face cache, models--" + repoID.replacingOccurrences(of: "/", with: "--"))
            }
            let (weights, unused) = try checkedWeights(plan, directory: directory, containmentRoot: root)
            warnings += unused
            printedWarnings += unused
            // Read once: the tokenizer files are checked whole (a few MB of JSON each).
            let found = try TokenizerFiles(directory: directory)
            fingerprints = try inputFingerprints(directory: directory, weights: weights, tokenizer: found)
            let fingerprintOf = Dictionary(
                fingerprints.map { ($0.name, $0.fingerprint) }, uniquingKeysWith: { first, _ in first })
            sourceFiles = weights.fileSizes.sorted { $0.key < $1.key }.map {
                Manifest.SourceFile(name: $0.key, bytes: $0.value, fingerprint: fingerprintOf[$0.key])
            }
            tokenizer = found
            warnings += tokenizerWarnings(plan, tokenizer: found)
            printedWarnings += tokenizerWarnings(plan, tokenizer: found, namingFolder: true)
            let checkpoint = CheckpointWeightSource(
                weights: weights, outOfRange: settings.allowClamp ? .clamp : .refuse)
            checkpointSource = checkpoint
            source = checkpoint
        }
        let memoryConditions = ConversionMemoryConditions(
            source: source, allowClamp: settings.allowClamp, calibrated: settings.calibrationTokens != nil)
        try checkMemory(plan, conditions: memoryConditions, available: settings.availableMemory)
        try checkDisk(
            plan, tokenizer: tokenizer, outputDirectory: settings.outputDirectory,
            available: settings.availableDiskBytes)
        // The plan's (uneven groups, rules matching nothing) too: the manifest records them,
        // but whoever runs the export should not have to read it to learn of them.
        (plan.warnings + printedWarnings).forEach(warn)
        var calibration: Calibration?
        if let tokens = settings.calibrationTokens {
            guard let checkpointSource else { throw ExportError.calibrationNeedsCheckpoint }
            let architecture = try ReferenceArchitecture(config: plan.model.config, contextLength: max(tokens.count, 1))
            calibration = try Calibration(
                architecture: architecture, weights: checkpointSource.weights, tokens: tokens, progress: stepProgress)
        }
        var request = BundleRequest(
            plan: plan, source: source, sourceFiles: sourceFiles, tokenizer: tokenizer, destination: destination,
            overwrite: settings.overwrite,
            buildKey: BuildKey.export(
                plan: plan, fileFingerprints: fingerprints, syntheticSeed: settings.syntheticSeed,
                allowClamp: settings.allowClamp,
                calibration: calibration.map { "\($0.record.tokens):\($0.record.tokensCRC32)" }),
            faults: settings.faults)
        request.calibration = calibration
        let manifest = try BundleWriter.write(
            request,
            extraWarnings: {
                warnings
                    + (checkpointSource?.clampLog.entries(in: plan.tensors.map(\.spec.name)) ?? []).map {
                        "tensor '\($0.tensor)': \($0.count) \($0.count == 1 ? "value" : "values") clamped to the float16 range (--allow-clamp)"
                    }
            }, progress: progress)
        return ExportResult(bundleURL: destination, manifest: manifest)
    }

    /// What exporting `plan` on this machine will need at its peak, estimated before any
    /// weight is read, as ``run(_:settings:warn:progress:stepProgress:)`` checks it: how the
    /// weights are stored comes from the checkpoint's safetensors headers when they are here,
    /// from the config's `torch_dtype` otherwise; `synthetic` weights are generated as
    /// ``SyntheticWeightSource/storage(for:)`` says.
    /// - Parameters:
    ///   - availableBytes: the memory available, bound by `availableLimit` (nil: the machine's).
    ///   - weights: the checkpoint's weights when the caller has opened them already.
    public static func conversionForecast(
        _ plan: ExportPlan, synthetic: Bool = false, allowClamp: Bool = false, calibrated: Bool = false,
        availableBytes: Int?, availableLimit: MemoryLimit? = nil, weights opened: CheckpointWeights? = nil
    ) -> Manifest.Conversion {
        let config = plan.model.config
        let source: WeightSource?
        let storageFrom: String
        if synthetic {
            let storage = SyntheticWeightSource.storage(for: config)
            (source, storageFrom) = (SyntheticWeightSource(seed: 0, storage: storage), "synthetic")
        } else if let directory = plan.model.source.checkpointDirectory, let root = plan.model.source.containmentRoot,
            let weights = opened ?? (try? CheckpointWeights(directory: directory, containmentRoot: root))
        {
            (source, storageFrom) = (CheckpointWeightSource(weights: weights, outOfRange: .refuse), "checkpoint")
        } else {
            // No weights here, or unreadable ones (the export itself will name the fault).
            (source, storageFrom) = (nil, "torch_dtype")
        }
        let conditions =
            source.map { ConversionMemoryConditions(source: $0, allowClamp: allowClamp, calibrated: calibrated) }
            ?? ConversionMemoryConditions(torchDType: config.torchDType, allowClamp: allowClamp, calibrated: calibrated)
        let estimate = plan.conversionMemory(conditions)
        return Manifest.Conversion(
            peakBytes: estimate.totalBytes, peakTensor: estimate.peakTensor, workers: conditions.workers,
            storageFrom: storageFrom, availableBytes: availableBytes,
            availableLimit: availableBytes == nil ? nil : availableLimit)
    }

    /// Refuses a plan whose conversion needs more memory than `available`.
    /// - Throws: `ResourceError.notEnoughMemory`.
    static func checkMemory(_ plan: ExportPlan, conditions: ConversionMemoryConditions, available: AvailableMemory?)
        throws
    {
        let needed = plan.conversionMemory(conditions)
        try checkMemory(plan, neededBytes: needed.totalBytes, peakTensor: needed.peakTensor, available: available)
    }

    /// Refuses what a forecast (``conversionForecast(_:synthetic:allowClamp:calibrated:availableBytes:)``)
    /// says the machine cannot hold, as the export will: `plan` refuses it too.
    /// - Throws: `ResourceError.notEnoughMemory`.
    public static func checkMemory(_ plan: ExportPlan, forecast: Manifest.Conversion) throws {
        try checkMemory(
            plan, neededBytes: forecast.peakBytes, peakTensor: forecast.peakTensor,
            available: forecast.availableBytes.map { AvailableMemory(bytes: $0, limit: forecast.availableLimit) })
    }

    private static func checkMemory(
        _ plan: ExportPlan, neededBytes: Int, peakTensor: String, available: AvailableMemory?
    ) throws {
        guard let available, neededBytes > available.bytes else { return }
        throw ResourceError.notEnoughMemory(
            model: plan.outputName, neededBytes: neededBytes, availableBytes: available.bytes, peakTensor: peakTensor,
            limit: available.limit)
    }

    /// The weights files of `manifest`'s source that the checkpoint at `directory` does not
    /// hold as they were exported (fingerprints differ, or the file is missing), by name:
    /// empty when it is the checkpoint exported, or when the manifest records no fingerprints
    /// (synthetic weights, manifests before 0.6.0).
    /// - Parameter weights: the checkpoint's weights when already open.
    /// - Throws: `CheckpointError` when the checkpoint's weights cannot be opened,
    ///   `BundleError.readFailed` naming a file that cannot be fingerprinted.
    public static func sourceMismatches(
        _ manifest: Manifest, checkpoint directory: URL, weights opened: CheckpointWeights? = nil
    ) throws -> [String] {
        let recorded = manifest.model.source.files.filter { $0.fingerprint != nil }
        guard !recorded.isEmpty else { return [] }
        let weights = try opened ?? CheckpointWeights(directory: directory)
        let now = Dictionary(
            try inputFingerprints(directory: directory, weights: weights).map { ($0.name, $0.fingerprint) },
            uniquingKeysWith: { first, _ in first })
        return recorded.filter { now[$0.name] != $0.fingerprint }.map(\.name)
    }

    /// The tokenizer files that differ between the checkpoint at `directory` and the artifact at
    /// `artifact`, which carries them byte for byte (`tokenizer/<name>`), by name: one on a
    /// side only, or with other bytes. Empty when the manifest records no fingerprints (synthetic
    /// weights carry no tokenizer; manifests before 0.6.0).
    /// - Throws: as ``TokenizerFiles/init(directory:)`` for the checkpoint's files.
    public static func tokenizerMismatches(_ manifest: Manifest, artifact: URL, checkpoint directory: URL) throws
        -> [String]
    {
        guard manifest.model.source.files.contains(where: { $0.fingerprint != nil }) else { return [] }
        let prefix = "tokenizer/"
        let carried = Set(
            (manifest.tokenizer?.files ?? []).filter { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) }
        )
        let present = Set(try TokenizerFiles(directory: directory).files.map(\.lastPathComponent))
        return carried.union(present).sorted().filter { name in
            !carried.contains(name) || !present.contains(name)
                || !FileManager.default.contentsEqual(
                    atPath: artifact.appendingPathComponent(prefix + name).path,
                    andPath: directory.appendingPathComponent(name).path)
        }
    }

    /// Bytes of the files a bundle of `plan` copies: the checkpoint's `config.json` and the
    /// tokenizer files.
    public static func copiedFileBytes(of plan: ExportPlan, tokenizer: TokenizerFiles?) -> Int {
        ([plan.model.configURL] + (tokenizer?.files ?? [])).map {
            ((try? FileManager.default.attributesOfItem(atPath: $0.path))?[.size] as? Int) ?? 0
        }
        .saturatingSum
    }

    /// The tokenizer files the export of `plan` will copy: none for synthetic weights or a
    /// checkpoint not on this machine.
    /// - Throws: `BundleError.readFailed` for a tokenizer file there that cannot be read, as the export.
    public static func tokenizer(of plan: ExportPlan, synthetic: Bool) throws -> TokenizerFiles? {
        guard !synthetic, let directory = plan.model.source.checkpointDirectory else { return nil }
        return try TokenizerFiles(directory: directory)
    }

    /// What the export checks of the checkpoint before it reads a weight, from the safetensors
    /// headers and the index alone: the files open and parse, and hold every planned tensor with
    /// its shape and a float dtype (``tokenizer(of:synthetic:)`` reads the tokenizer files).
    /// Returns the weights it opened, for the conversion forecast to read again no header, and
    /// the warnings that gives (tensors not exported). Nothing for `synthetic` weights or
    /// weights not on this machine (a preset or an id not in the cache, a folder holding only its
    /// config), which a plan describes from the config alone.
    /// - Throws: what the export throws for the same checkpoint (`CheckpointError`,
    ///   `CheckpointMismatch`).
    public static func checkCheckpoint(_ plan: ExportPlan, synthetic: Bool) throws -> (
        weights: CheckpointWeights?, warnings: [String]
    ) {
        // A preset's cache folder without a snapshot: what the export would refuse, said by a plan.
        if !synthetic, let refusal = ExportError.noSnapshot(of: plan) {
            return (nil, ["an export would fail: \(refusal)"])
        }
        guard !synthetic, let directory = plan.model.source.checkpointDirectory,
            let root = plan.model.source.containmentRoot
        else { return (nil, []) }
        do {
            return try checkedWeights(plan, directory: directory, containmentRoot: root)
        } catch CheckpointError.noWeights {
            return (nil, [])
        }
    }

    /// The checkpoint's weights in `directory`, their headers checked against the plan's tensors,
    /// and the warnings that gives.
    private static func checkedWeights(_ plan: ExportPlan, directory: URL, containmentRoot: URL) throws -> (
        weights: CheckpointWeights, warnings: [String]
    ) {
        let weights = try openWeights(plan, directory: directory, containmentRoot: containmentRoot)
        let warnings = try CheckpointValidator.validate(
            weights, against: plan.tensors.map(\.spec), config: plan.model.config)
        return (weights, warnings)
    }

    /// The checkpoint's weights in `directory`, as `plan`'s export opens them.
    /// - Throws: `CheckpointError`; `ExportError.unfinishedDownload` for a weights file missing
    ///   from a snapshot of the Hugging Face cache, so that the message says how to finish it.
    static func openWeights(_ plan: ExportPlan, directory: URL, containmentRoot: URL?) throws -> CheckpointWeights {
        do {
            return try CheckpointWeights(directory: directory, containmentRoot: containmentRoot)
        } catch let problem as CheckpointError {
            guard case .huggingFaceCache(let repoID, _, _) = plan.model.source, problem.isMissingFile else {
                throw problem
            }
            throw ExportError.unfinishedDownload(repoID: repoID, problem: problem)
        }
    }

    /// What an export from real weights warns of its tokenizer files: none there, or a token
    /// added beyond the embedding's rows.
    /// - Parameter namingFolder: name the checkpoint folder, as a terminal may; a manifest does
    ///   not, the folder's name being no input of the artifact (nor of its build key).
    public static func tokenizerWarnings(
        _ plan: ExportPlan, tokenizer: TokenizerFiles, namingFolder: Bool = false
    ) -> [String] {
        let rows = plan.model.config.vocabularySize
        let beyond = tokenizer.highestAddedToken.flatMap { token in
            token.id < rows
                ? nil
                : "tokenizer: \(token.file) adds token '\(Format.shortened(token.content))' with id \(token.id), beyond the "
                    + "embedding's \(Format.grouped(rows)) rows (vocab_size): fed to the model on a device, it reads "
                    + "outside the table; resize the embedding or remove the token"
        }
        let vocabularyBeyond = tokenizer.highestVocabularyId.flatMap { highest in
            highest.id < rows
                ? nil
                : "tokenizer: the vocabulary of \(highest.file) has ids up to \(highest.id), beyond the embedding's "
                    + "\(Format.grouped(rows)) rows (vocab_size): fed to the model on a device, they read outside the "
                    + "table; ship the checkpoint's own tokenizer"
        }
        return [
            missingTokenizerWarning(plan.model.source, tokenizer: tokenizer, namingFolder: namingFolder),
            vocabularyBeyond, beyond,
        ].compactMap { $0 }
    }

    /// The warning of an export from real weights whose checkpoint folder holds no tokenizer
    /// file (nil when it holds one): the bundle then cannot tokenize text on a device, and its
    /// manifest's response budget assumes no reasoning marker. A manifest's warning names no folder: two
    /// folders of the same files, or one renamed, give the same build key, so they must give the
    /// same bytes. `namingFolder` names it for a terminal, by its name only.
    static func missingTokenizerWarning(
        _ source: ModelSource, tokenizer: TokenizerFiles, namingFolder: Bool = false
    ) -> String? {
        guard tokenizer.files.isEmpty else { return nil }
        let folder: String
        switch source {
        case .directory(let url):
            folder =
                namingFolder
                ? "the checkpoint folder '\(url.standardizedFileURL.lastPathComponent)'" : "the checkpoint folder"
        case .huggingFaceCache(let repoID, _, let revision):
            folder = "the Hugging Face cache's snapshot of '\(repoID)' (revision \(revision))"
        case .presetConfigOnly: return nil
        }
        return "no tokenizer file in \(folder) (looked for \(TokenizerFiles.knownNames.joined(separator: ", "))): "
            + "the bundle cannot tokenize text on a device, and its default response budget "
            + "(\(tokenizer.defaultResponseTokens) tokens) assumes no reasoning marker"
            + (namingFolder ? otherCaseHint(source.checkpointDirectory) : "")
    }

    /// For a terminal only (a manifest records nothing its build key leaves out): the files of
    /// `directory` named as a tokenizer file in another case (`Tokenizer.json`), which tokenizer
    /// libraries do not look for.
    private static func otherCaseHint(_ directory: URL?) -> String {
        guard let directory else { return "" }
        let known = Set(TokenizerFiles.knownNames.map { $0.lowercased() })
        let found = ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).filter {
            known.contains($0.lowercased()) && !TokenizerFiles.knownNames.contains($0)
        }.sorted()
        guard !found.isEmpty else { return "" }
        return "; " + found.map { "'\($0)'" }.joined(separator: ", ") + " \(found.count == 1 ? "is" : "are") there, "
            + "named in another case, which tokenizer libraries do not look for"
    }

    /// Refuses a bundle estimated larger than the free space `available` of its volume.
    /// - Throws: `ResourceError.notEnoughDisk`.
    public static func checkDisk(
        _ plan: ExportPlan, tokenizer: TokenizerFiles?, outputDirectory: URL, available: Int?
    ) throws {
        guard let available else { return }
        let needed = plan.estimatedBundleBytes(copiedFileBytes: copiedFileBytes(of: plan, tokenizer: tokenizer))
        guard needed <= available else {
            throw ResourceError.notEnoughDisk(
                directory: outputDirectory.standardizedFileURL.path, neededBytes: needed, availableBytes: available)
        }
    }
}
