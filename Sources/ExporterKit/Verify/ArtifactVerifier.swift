import Foundation

/// One thing `verify` found wrong, naming the file or tensor concerned.
public struct VerificationFailure: Equatable, Sendable, CustomStringConvertible {
    /// The file (`'weights.bin'`), tensor (`tensor 'model.norm.weight'`) or `forward pass`.
    public let subject: String
    /// What is wrong, lowercase, no trailing period.
    public let reason: String

    /// A failure of `subject`.
    public init(_ subject: String, _ reason: String) {
        self.subject = subject
        self.reason = reason
    }

    /// `<subject>: <reason>`.
    public var description: String { "\(subject): \(reason)" }
}

/// What `verify` checked and found.
public struct VerificationReport: Sendable {
    /// Files whose size and CRC-32 were recomputed.
    public var filesChecked = 0
    /// Tensors whose parts were checked and dequantised.
    public var tensorsDecoded = 0
    /// Tensors compared with the checkpoint (with `against`).
    public var tensorsCompared = 0
    /// SQNR measured against the checkpoint, by tensor, in dB (infinite when exact); empty without `against`.
    public var measuredSQNR: [String: Double] = [:]
    /// Every failure, in the order found.
    public var failures: [VerificationFailure] = []
    /// How many of the failures concern the artifact itself (files, records, format rules), as
    /// opposed to differences from the checkpoint: the artifact is readable when there are none.
    public var structuralFailures = 0
    /// Whether the tensor list was held against the graph's layout (not for a family whose
    /// layout needs config fields the graph does not record, such as experts).
    public var tensorListChecked = false

    /// Whether everything held.
    public var passed: Bool { failures.isEmpty }
}

/// Checks an artifact against its manifest and `docs/FORMAT.md`: every file's size and CRC-32,
/// every file listed, the manifest's own sums, the graph, the weights header, every part's
/// bounds, alignment and place (parts follow each other in manifest order, each at the next
/// multiple of 64, gaps and tail zero), every part's size and dtype against shape and scheme,
/// LUT order, packed-index padding, int8 range, scales; then dequantises every tensor and,
/// given the checkpoint, measures every tensor's SQNR against it, a block of rows at a time
/// on both sides (a few MiB held, whatever the model). Collects every failure instead of
/// stopping at the first.
public enum ArtifactVerifier {
    /// Verifies `artifact`; with `checkpoint`, also compares every tensor with it and fails any
    /// whose SQNR is below the manifest's claim or `minimumSQNR`. Tensors are decoded (and
    /// read from the checkpoint) `blockElements` at a time, or a row when a row holds more, by
    /// `workers` threads; the report is the same for any number.
    public static func verify(
        _ artifact: LoadedArtifact, against checkpoint: CheckpointWeights? = nil, minimumSQNR: Double? = nil,
        blockElements: Int = ArtifactVerifier.blockElements, workers: Int = SystemResources.activeCores
    ) -> VerificationReport {
        var run = Run(artifact: artifact, blockElements: max(1, blockElements), workers: max(1, workers))
        run.checkFiles()
        run.checkManifestSums()
        if artifact.manifest.kind != "plan" { run.checkGraph() }
        // By its section rather than its kind, which checkManifestSums holds against it.
        if artifact.manifest.compiled != nil { run.checkCompiledLayout() }
        run.checkTensors(against: checkpoint, minimumSQNR: minimumSQNR)
        return run.report
    }

    /// Runs `tokens` through the checkpoint (float32) and through the bundle (dequantised) with
    /// the reference forward pass, each side described by its own config: the checkpoint's
    /// `config.json`, the bundle's `graph.json`.
    /// - Throws: `ReferenceModelError` (architecture not covered or mismatched, bad tokens),
    ///   the checkpoint's and bundle's errors.
    /// - Parameter progress: told after every layer and head of each pass, the checkpoint's first.
    /// - Parameter checkingFiles: first compare every file's size and CRC-32 with the manifest
    ///   (a damaged artifact is refused, not measured); false when `verify` has just done so.
    public static func compareForward(
        artifact: LoadedArtifact, checkpoint: URL, tokens: [Int], checkingFiles: Bool,
        progress: (WorkProgress) -> Void = { _ in }
    ) throws -> ForwardComparison {
        guard artifact.manifest.kind != "plan" else {
            throw BundleError.notABundle(
                path: artifact.manifestURL.path, reason: "it is a plan, which has no weights to run")
        }
        let reader: DecodableArtifact =
            artifact.manifest.kind == "compiled"
            ? try CompiledArtifactReader(url: artifact.folder, verifyFiles: checkingFiles)
            : try BundleReader(url: artifact.folder, verifyFiles: checkingFiles)
        let artifactArchitecture = try ReferenceArchitecture(graph: reader.graph)
        let config = try ModelConfig(contentsOf: checkpoint.appendingPathComponent("config.json"))
        let sourceArchitecture = try ReferenceArchitecture(config: config, contextLength: reader.graph.contextLength)
        let differences = artifactArchitecture.differences(from: sourceArchitecture)
        guard differences.isEmpty else { throw ReferenceModelError.architectureMismatch(differences) }
        let weights = try CheckpointWeights(directory: checkpoint)
        let passes = [
            ("checkpoint", ReferenceModel(architecture: sourceArchitecture, weights: weights)),
            ("artifact", ReferenceModel(architecture: artifactArchitecture, weights: reader)),
        ]
        let steps = passes.reduce(0) { $0 + $1.1.stepCount }
        var stepsBefore = 0
        var logits: [[[Float]]] = []
        for (name, model) in passes {
            logits.append(
                try model.logits(tokens: tokens, observe: nil) { done in
                    progress(
                        WorkProgress(
                            done: stepsBefore + done, total: steps,
                            stage: "\(name) pass, " + ReferenceModel.stage(done, of: model.architecture)))
                })
            stepsBefore += model.stepCount
        }
        return ForwardComparison(tokens: tokens, source: logits[0], artifact: logits[1])
    }

    /// The state of one verification.
    private struct Run {
        let artifact: LoadedArtifact
        /// Elements decoded at a time.
        let blockElements: Int
        /// Threads decoding tensors.
        let workers: Int
        var report = VerificationReport()
        /// Actual sizes of the listed files that exist as regular files, by manifest path.
        var sizes: [String: Int] = [:]
        /// Files the manifest lists that are missing or not regular files: their failure is
        /// reported once by `checkFiles()`, not again for every part they should hold.
        var unusableFiles: Set<String> = []

        init(artifact: LoadedArtifact, blockElements: Int, workers: Int) {
            self.artifact = artifact
            self.blockElements = blockElements
            self.workers = workers
        }

        var manifest: Manifest { artifact.manifest }

        /// Whether failures now come from the comparison with the checkpoint.
        var comparing = false

        mutating func fail(_ subject: String, _ reason: String) {
            report.failures.append(VerificationFailure(subject, reason))
            if !comparing { report.structuralFailures += 1 }
        }

        /// A failure of the file at `path` (relative to the artifact), named in quotes.
        mutating func failFile(_ path: String, _ reason: String) {
            fail("'\(path)'", reason)
        }

        mutating func checkFiles() {
            for file in manifest.files {
                guard !file.path.hasPrefix("/"), !file.path.split(separator: "/").contains("..") else {
                    failFile(file.path, "the manifest names a file outside the artifact")
                    continue
                }
                let url = artifact.folder.appendingPathComponent(file.path)
                if let attributes = try? FileManager.default.attributesOfItem(atPath: url.path),
                    attributes[.type] as? FileAttributeType == .typeRegular,
                    let size = (attributes[.size] as? NSNumber)?.intValue
                {
                    sizes[file.path] = size
                } else {
                    unusableFiles.insert(file.path)
                }
                do {
                    try BundleReader.verify(file, in: artifact.folder)
                } catch let error as BundleError {
                    switch error {
                    case .fileMismatch(_, let reason): failFile(file.path, reason)
                    default: failFile(file.path, error.description)
                    }
                } catch {
                    failFile(file.path, "\(error)")
                }
                // A file missing (or not a regular file) had nothing to recompute: failed, not checked.
                if !unusableFiles.contains(file.path) { report.filesChecked += 1 }
            }
            guard manifest.kind != "plan" else { return }
            let listed = Set(manifest.files.map(\.path) + [artifact.manifestURL.lastPathComponent])
            for path in ArtifactVerifier.filesBelow(artifact.folder) where !listed.contains(path) {
                failFile(path, "present in the artifact but not listed in the manifest")
            }
        }

        mutating func checkManifestSums() {
            let subject = artifact.manifestURL.lastPathComponent
            if Platform(rawValue: manifest.platform) == nil {
                failFile(
                    subject,
                    "platform is '\(manifest.platform)', expected one of: \(Platform.allCases.map(\.rawValue).joined(separator: ", "))"
                )
            }
            switch (manifest.kind, manifest.compiled) {
            case ("bundle", nil), ("plan", nil), ("compiled", .some): break
            case ("compiled", nil): failFile(subject, "kind is 'compiled' but there is no compiled section")
            case (let kind, _) where ["bundle", "plan"].contains(kind):
                failFile(subject, "a compiled section in a manifest of kind '\(kind)'")
            case (let kind, _): failFile(subject, "kind is '\(kind)', expected one of: bundle, compiled, plan")
            }
            let parameters = manifest.tensors.map(\.shape.saturatingProduct).saturatingSum
            if parameters != manifest.parameters {
                failFile(subject, "parameters is \(manifest.parameters), the tensors hold \(parameters)")
            }
            let kv = manifest.kvCache
            let elementBytes = ComputePrecision(rawValue: kv.dtype)?.bytesPerElement ?? 0
            let kvBytes = [2, kv.layers, kv.kvHeads, kv.headDim, kv.contextLength, elementBytes].saturatingProduct
            if kvBytes != kv.bytes {
                failFile(
                    subject,
                    "kv_cache.bytes is \(kv.bytes), 2 × \(kv.layers) × \(kv.kvHeads) × \(kv.headDim) × \(kv.contextLength) × "
                        + "\(elementBytes) is \(kvBytes)")
            }
            if kv.contextLength != manifest.contextLength {
                failFile(
                    subject,
                    "kv_cache.context_length is \(kv.contextLength), context_length is \(manifest.contextLength)")
            }
            let memory = manifest.memory
            if memory.kvCacheBytes != kv.bytes {
                failFile(subject, "memory.kv_cache_bytes is \(memory.kvCacheBytes), kv_cache.bytes is \(kv.bytes)")
            }
            if memory.totalBytes != [memory.weightsBytes, memory.kvCacheBytes, memory.workingBytes].saturatingSum {
                failFile(
                    subject,
                    "memory.total_bytes is \(memory.totalBytes), not the sum of weights, KV cache and working bytes")
            }
            for (role, size) in manifest.sizes.byRole.sorted(by: { $0.key < $1.key }) {
                let tensors = manifest.tensors.filter { $0.role == role }
                let roleParameters = tensors.map(\.shape.saturatingProduct).saturatingSum
                let roleBytes = tensors.map(\.storedBytes).saturatingSum
                if size.parameters != roleParameters || size.bytes != roleBytes {
                    failFile(
                        subject,
                        "sizes.by_role.\(role) says \(size.parameters) parameters in \(size.bytes) bytes, the tensors hold "
                            + "\(roleParameters) in \(roleBytes)")
                }
            }
            for problem in ArtifactVerifier.derivedFigureProblems(manifest) { failFile(subject, problem) }
            for (concerned, problem) in ArtifactVerifier.implicationProblems(manifest, subject: "'\(subject)'") {
                fail(concerned, problem)
            }
            for problem in ArtifactVerifier.verdictProblems(manifest) { failFile(subject, problem) }
            guard manifest.kind != "plan" else { return }
            for (concerned, problem) in ArtifactVerifier.tokenizerProblems(
                manifest, folder: artifact.folder, subject: "'\(subject)'")
            {
                fail(concerned, problem)
            }
            let listedBytes = manifest.files.map(\.bytes).saturatingSum
            if let bundleBytes = manifest.sizes.bundleBytes, bundleBytes != listedBytes {
                failFile(subject, "sizes.bundle_bytes is \(bundleBytes), the files listed sum to \(listedBytes)")
            }
            let weights = manifest.files.first(where: { $0.path == BundleWriter.weightsName })
            if let compiled = manifest.compiled {
                checkCompiledSums(compiled, weightsBytes: weights?.bytes, listedBytes: listedBytes)
            } else if let weights {
                if manifest.sizes.estimatedBundleBytes != weights.bytes {
                    failFile(
                        subject,
                        "sizes.estimated_bundle_bytes is \(manifest.sizes.estimatedBundleBytes), \(BundleWriter.weightsName) "
                            + "is listed with \(weights.bytes) bytes")
                }
                if memory.weightsBytes != weights.bytes {
                    failFile(
                        subject,
                        "memory.weights_bytes is \(memory.weightsBytes), \(BundleWriter.weightsName) is listed with \(weights.bytes) bytes"
                    )
                }
            }
        }

        /// A compiled manifest's own sums: its memory plan, and its size against the portable bundle's.
        private mutating func checkCompiledSums(_ compiled: Manifest.Compiled, weightsBytes: Int?, listedBytes: Int) {
            let subject = artifact.manifestURL.lastPathComponent
            let memory = compiled.memory
            if let weightsBytes, memory.weightsBytes != weightsBytes {
                failFile(
                    subject,
                    "compiled.memory.weights_bytes is \(memory.weightsBytes), \(BundleWriter.weightsName) is listed with "
                        + "\(weightsBytes) bytes")
            }
            let sum = [memory.weightsBytes, memory.kvCacheBytes, memory.workingBytes, memory.tablesBytes].saturatingSum
            if memory.totalBytes != sum {
                failFile(
                    subject,
                    "compiled.memory.total_bytes is \(memory.totalBytes), not the sum of weights, KV cache, working and tables bytes"
                )
            }
            let (delta, overflow) = listedBytes.subtractingReportingOverflow(compiled.portable.bytes)
            if overflow || compiled.sizeDeltaBytes != delta {
                failFile(
                    subject,
                    "compiled.size_delta_bytes is \(compiled.sizeDeltaBytes), the files listed sum to \(listedBytes) against the "
                        + "portable bundle's \(compiled.portable.bytes)")
            }
        }

        /// The compiled layout (`docs/FORMAT.md`, `weights.bin` (compiled)): header, region
        /// table, regions page-aligned and in order, parts inside their regions, every layer in
        /// one region; a tensor placed in two regions (the tied embedding's copy) holds the
        /// same bytes in both; the RoPE tables are those of the graph.
        mutating func checkCompiledLayout() {
            let reader: CompiledArtifactReader
            do {
                reader = try CompiledArtifactReader(url: artifact.folder, verifyFiles: false)
            } catch let error as BundleError {
                if case .fileMismatch(let path, let reason) = error {
                    // A file the file checks found missing is reported there, once.
                    return unusableFiles.contains(path) ? () : failFile(path, reason)
                }
                return fail("compiled artifact", error.description)
            } catch let error as CompileError {
                if case .notACompiledArtifact(_, let reason) = error { return fail("compiled artifact", reason) }
                return fail("compiled artifact", error.description)
            } catch {
                return fail("compiled artifact", "\(error)")
            }
            let records = Dictionary(manifest.tensors.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
            for region in reader.regions {
                for placed in region.tensors {
                    let subject = "tensor '\(placed.name)'"
                    guard let tensor = records[placed.name] else {
                        fail(subject, "placed in region \(region.index) but not in the manifest's tensors")
                        continue
                    }
                    guard placed.parts.map(\.kind) == tensor.parts.map(\.kind),
                        placed.parts.map(\.bytes) == tensor.parts.map(\.bytes)
                    else {
                        fail(subject, "its parts in region \(region.index) differ from its record's")
                        continue
                    }
                    for (copy, part) in zip(placed.parts, tensor.parts) where copy.offset != part.offset {
                        if !sameBytes(reader, copy, part) {
                            fail(
                                subject,
                                "its copy in region \(region.index) differs from its first placement (\(part.kind))")
                        }
                    }
                }
            }
            for problem in ArtifactVerifier.compiledPlanProblems(
                manifest, graph: reader.graph, weightsFileBytes: sizes[Compiler.weightsName])
            {
                failFile(artifact.manifestURL.lastPathComponent, problem)
            }
            if let expected = try? RopeTables.make(reader.graph), let found = try? reader.ropeTables(),
                expected.cos != found.cos || expected.sin != found.sin
            {
                fail("'\(reader.staticDescription.rope.cos)'", "the RoPE tables are not those of the graph")
            }
        }

        /// Whether two parts of equal size hold the same bytes, compared a piece at a time.
        private func sameBytes(_ reader: CompiledArtifactReader, _ first: Manifest.Part, _ second: Manifest.Part)
            -> Bool
        {
            let piece = 4 << 20
            for start in stride(from: 0, to: first.bytes, by: piece) {
                let count = min(piece, first.bytes - start)
                guard let one = try? reader.read(offset: first.offset + start, count: count, file: first.file),
                    let other = try? reader.read(offset: second.offset + start, count: count, file: second.file),
                    one == other
                else { return false }
            }
            return true
        }

        /// The manifest's tensors against those the graph's architecture lays out: none missing,
        /// none foreign or repeated, every shape as the graph implies.
        private mutating func checkTensorList(against graph: GraphDescription) {
            guard let expected = graph.expectedTensors() else { return }
            report.tensorListChecked = true
            var shapes: [String: [Int]] = [:]
            for tensor in manifest.tensors {
                if shapes[tensor.name] != nil { fail("tensor '\(tensor.name)'", "listed twice") }
                shapes[tensor.name] = tensor.shape
            }
            let layout = "the graph's \(graph.architecture) layout"
            for spec in expected {
                guard let shape = shapes.removeValue(forKey: spec.name) else {
                    fail("tensor '\(spec.name)'", "missing from the manifest; \(layout) has it")
                    continue
                }
                if shape != spec.shape {
                    fail("tensor '\(spec.name)'", "shape \(shape), \(layout) implies \(spec.shape)")
                }
            }
            for tensor in manifest.tensors where shapes[tensor.name] != nil {
                fail("tensor '\(tensor.name)'", "not in \(layout)")
            }
        }

        mutating func checkGraph() {
            let url = artifact.folder.appendingPathComponent(BundleWriter.graphName)
            let name = BundleWriter.graphName
            // One the file checks found missing (or not a file) is reported there, once.
            guard !unusableFiles.contains(name) else { return }
            guard let data = try? BundleReader.readDocument(url) else { return failFile(name, "missing or unreadable") }
            guard let graph = try? JSONDecoder().decode(GraphDescription.self, from: data) else {
                return failFile(name, "does not decode as a graph description")
            }
            if graph.schema != GraphDescription.currentSchema {
                failFile(name, "schema '\(graph.schema)'; this version reads '\(GraphDescription.currentSchema)'")
            }
            let kv = manifest.kvCache
            let pairs: [(String, String, String)] = [
                ("context_length", "\(graph.contextLength)", "\(manifest.contextLength)"),
                ("compute_precision", graph.computePrecision, manifest.computePrecision),
                ("layers", "\(graph.layers)", "\(kv.layers)"),
                ("attention.kv_heads", "\(graph.attention.kvHeads)", "\(kv.kvHeads)"),
                ("attention.head_dim", "\(graph.attention.headDim)", "\(kv.headDim)"),
                ("architecture", graph.architecture, manifest.model.registryType),
            ]
            for (field, inGraph, inManifest) in pairs where inGraph != inManifest {
                failFile(name, "\(field) is \(inGraph), the manifest says \(inManifest)")
            }
            if let problem = ArtifactVerifier.workingMemoryProblem(manifest, graph: graph) {
                failFile(artifact.manifestURL.lastPathComponent, problem)
            }
            let expectedShape = [graph.attention.kvHeads, graph.contextLength, graph.attention.headDim]
            if graph.shapes.kvCachePerLayer != expectedShape {
                failFile(
                    name, "shapes.kv_cache_per_layer is \(graph.shapes.kvCachePerLayer), expected \(expectedShape)")
            }
            if let problem = graph.rope.problem { failFile(name, problem) }
            checkTensorList(against: graph)
            if graph.tieWordEmbeddings == manifest.tensors.contains(where: { $0.name == "lm_head.weight" }) {
                failFile(
                    name,
                    "tie_word_embeddings is \(graph.tieWordEmbeddings) but lm_head.weight is "
                        + (graph.tieWordEmbeddings ? "present" : "absent"))
            }
        }

        mutating func checkTensors(against checkpoint: CheckpointWeights?, minimumSQNR: Double?) {
            guard manifest.kind != "plan" else { return }
            let files = FileReaders(folder: artifact.folder)
            let weightsName = BundleWriter.weightsName
            var cursor = ExportPlan.weightsHeaderBytes
            // A compiled weights file has its own layout, checked by checkCompiledLayout().
            let portable = manifest.compiled == nil
            let weightsSize = sizes[weightsName]
            if portable, let weightsSize { checkWeightsHeader(files, size: weightsSize) }
            let contents = contentsOfReadableTensors(against: checkpoint, minimumSQNR: minimumSQNR)
            // A short file names its first part past the end; the others are counted after.
            var partsPastEnd: [String: Int] = [:]
            for (index, tensor) in manifest.tensors.enumerated() {
                let subject = "tensor '\(tensor.name)'"
                for part in tensor.parts {
                    guard let size = sizes[part.file] else {
                        if !unusableFiles.contains(part.file) {
                            fail(subject, "\(part.kind) is in '\(part.file)', which is not listed")
                        }
                        continue
                    }
                    guard isReadable(part) else {
                        partsPastEnd[part.file, default: 0] += 1
                        if partsPastEnd[part.file] == 1 {
                            fail(
                                subject,
                                "\(part.kind) at offset \(part.offset), \(part.bytes) bytes, runs past the end of "
                                    + "'\(part.file)' (\(size) bytes)")
                        }
                        continue
                    }
                    if part.offset % ExportPlan.blobAlignment != 0 {
                        fail(
                            subject,
                            "\(part.kind) at offset \(part.offset) is not aligned to \(ExportPlan.blobAlignment) bytes")
                    }
                    guard portable, part.file == weightsName else { continue }
                    let expected = ArtifactVerifier.aligned(cursor)
                    if part.offset != expected {
                        fail(
                            subject,
                            "\(part.kind) at offset \(part.offset), expected \(expected): parts follow each other in manifest "
                                + "order, each at the next multiple of \(ExportPlan.blobAlignment)")
                    } else if expected > cursor, !checkZero(files, file: part.file, from: cursor, to: expected) {
                        failFile(
                            weightsName,
                            "padding before \(tensor.name) \(part.kind) (bytes \(cursor)..<\(expected)) is not zero")
                    }
                    cursor = max(cursor, part.offset + part.bytes)
                }
                checkRecord(tensor, subject: subject)
                guard let found = contents[index] else { continue }
                record(found, of: tensor)
            }
            for (file, count) in partsPastEnd.sorted(by: { $0.key < $1.key }) where count > 1 {
                failFile(file, "\(count - 1) more part(s) run past its end")
            }
            // A part past the end already says the file is short; its end, measured over the parts
            // that fit, would then name a size that contradicts it.
            if portable, let weightsSize, partsPastEnd[weightsName] == nil,
                manifest.tensors.contains(where: { $0.parts.contains { $0.file == weightsName } })
            {
                let end = ArtifactVerifier.aligned(cursor)
                if weightsSize != end {
                    failFile(
                        weightsName,
                        "\(weightsSize) bytes; its parts end at \(cursor), so the file should be \(end) bytes")
                } else if end > cursor, !checkZero(files, file: weightsName, from: cursor, to: end) {
                    failFile(weightsName, "the padding after the last part is not zero")
                }
            }
        }

        /// Whether the part lies within its file, which exists: then its tensor can be decoded.
        private func isReadable(_ part: Manifest.Part) -> Bool {
            guard let size = sizes[part.file] else { return false }
            return part.offset >= 0 && part.bytes >= 0 && part.offset <= size - part.bytes
        }

        /// The contents of every tensor whose parts are all readable (nil for the others), checked
        /// by the workers a tensor at a time, each with its own open files; each tensor's sums
        /// run in one order, so the report does not depend on the number of workers.
        private func contentsOfReadableTensors(against checkpoint: CheckpointWeights?, minimumSQNR: Double?)
            -> [TensorContents?]
        {
            let tensors = manifest.tensors
            let contents = WorkerResults<TensorContents?>(count: tensors.count, initial: nil)
            let (folder, precision, blockElements) = (artifact.folder, manifest.computePrecision, blockElements)
            let readable = tensors.map { $0.parts.allSatisfy(isReadable) }
            WorkDispenser.perform(count: tensors.count, workers: workers, setUp: { _ in FileReaders(folder: folder) }) {
                files, index in
                guard readable[index] else { return }
                contents[index] = Run.contents(
                    of: tensors[index], precision: precision, blockElements: blockElements, files: files,
                    against: checkpoint, minimumSQNR: minimumSQNR)
            }
            return contents.values
        }

        /// Adds what checking a tensor's contents found to the report.
        private mutating func record(_ found: TensorContents, of tensor: Manifest.Tensor) {
            if found.decoded { report.tensorsDecoded += 1 }
            if let measured = found.measuredSQNR {
                report.tensorsCompared += 1
                report.measuredSQNR[tensor.name] = measured
            }
            for (failure, fromComparison) in found.failures {
                comparing = fromComparison
                fail(failure.subject, failure.reason)
            }
            comparing = false
        }

        private mutating func checkWeightsHeader(_ files: FileReaders, size: Int) {
            let name = BundleWriter.weightsName
            guard size >= ExportPlan.weightsHeaderBytes, let header = try? files.read(name, offset: 0, count: 64) else {
                return failFile(name, "shorter than its \(ExportPlan.weightsHeaderBytes)-byte header")
            }
            func integer(_ range: Range<Int>) -> UInt64 {
                header[range].enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * $1.offset) }
            }
            if Array(header[0..<8]) != WeightsFileLayout.magic { failFile(name, "bad magic, expected EXWEIGHT") }
            if integer(8..<12) != UInt64(WeightsFileLayout.formatVersion) {
                failFile(
                    name, "format version \(integer(8..<12)); this version reads \(WeightsFileLayout.formatVersion)")
            }
            if integer(12..<16) != UInt64(ExportPlan.blobAlignment) {
                failFile(name, "header alignment is \(integer(12..<16)), expected \(ExportPlan.blobAlignment)")
            }
            if integer(16..<24) != UInt64(manifest.tensors.count) {
                failFile(
                    name, "header counts \(integer(16..<24)) tensors, the manifest lists \(manifest.tensors.count)")
            }
            if integer(24..<32) != UInt64(size) {
                failFile(name, "header says \(integer(24..<32)) bytes, the file has \(size)")
            }
            if header[32..<64].contains(where: { $0 != 0 }) { failFile(name, "header bytes 32..<64 are not zero") }
        }

        private func checkZero(_ files: FileReaders, file: String, from start: Int, to end: Int) -> Bool {
            guard let bytes = try? files.read(file, offset: start, count: end - start) else { return false }
            return bytes.allSatisfy { $0 == 0 }
        }

        /// The record's own consistency: stored bytes, last group, dtypes.
        private mutating func checkRecord(_ tensor: Manifest.Tensor, subject: String) {
            let partBytes = tensor.parts.map(\.bytes).saturatingSum
            if partBytes != tensor.storedBytes {
                fail(subject, "stored_bytes is \(tensor.storedBytes), its parts hold \(partBytes)")
            }
            let rows = tensor.shape.count >= 2 ? tensor.shape[0] : 1
            let lastGroup = tensor.compression.lastGroupRows(rows: rows)
            if tensor.lastGroupRows != lastGroup {
                fail(
                    subject,
                    "last_group_rows is \(tensor.lastGroupRows.map(String.init) ?? "null"), expected \(lastGroup.map(String.init) ?? "null")"
                )
            }
            let expected: [String: String]
            switch tensor.compression.mode {
            case .keep: expected = ["values": manifest.computePrecision]
            case .palettize:
                expected = [
                    "lut": "float16", "indices": "uint\(tensor.compression.bits ?? 0)", "outlier_indices": "uint32",
                    "outlier_values": "float16",
                ]
            case .linear: expected = ["scales": "float32", "values": "int8"]
            }
            for part in tensor.parts where expected[part.kind] != nil && expected[part.kind] != part.dtype {
                fail(subject, "\(part.kind) has dtype \(part.dtype), expected \(expected[part.kind] ?? "")")
            }
        }

        /// Decodes the tensor a block of rows at a time (so memory stays a few blocks, whatever
        /// the tensor's size), checks the stored values, and compares them with the checkpoint's.
        private static func contents(
            of tensor: Manifest.Tensor, precision computePrecision: String, blockElements: Int, files: FileReaders,
            against checkpoint: CheckpointWeights?, minimumSQNR: Double?
        ) -> TensorContents {
            let subject = "tensor '\(tensor.name)'"
            var found = TensorContents()
            var comparing = false
            func fail(_ subject: String, _ reason: String) {
                found.failures.append((VerificationFailure(subject, reason), comparing))
            }
            let decoder: TensorDecoder
            do {
                decoder = try TensorDecoder(tensor, precision: computePrecision) { part in
                    try files.read(part.file, offset: part.offset, count: part.bytes)
                }
            } catch {
                fail(subject, ArtifactVerifier.decodingFailure(error))
                return found
            }
            for problem in ArtifactVerifier.storedValueProblems(tensor, stored: decoder.smallParts) {
                fail(subject, problem)
            }
            // Why the checkpoint's tensor cannot be compared, found before decoding and reported after.
            var sourceFailure: String?
            if let checkpoint {
                do {
                    let source = try checkpoint.tensor(named: tensor.name)
                    if source.shape != tensor.shape {
                        sourceFailure = "shape \(tensor.shape), the checkpoint's is \(source.shape)"
                    }
                } catch {
                    sourceFailure = ArtifactVerifier.sourceFailure(error)
                }
            }
            let precision = ComputePrecision(rawValue: computePrecision) ?? .float16
            let exact = tensor.compression.mode == .keep
            let elementsPerBlock = min(decoder.elements, max(blockElements, decoder.columns))
            var decoded = [Float](repeating: 0, count: elementsPerBlock)
            var source = [Float](repeating: 0, count: checkpoint == nil ? 0 : elementsPerBlock)
            var sums = SignalAndNoise()
            var firstNonFinite: (element: Int, value: Float)?
            var streamedProblemFound = false
            let part = decoder.streamedPart
            for rows in decoder.rowBlocks(elementLimit: elementsPerBlock) {
                let firstElement = rows.lowerBound * decoder.columns
                let elements = firstElement..<(firstElement + rows.count * decoder.columns)
                let byteRange = decoder.streamedBytes(rows: rows)
                let stored: [UInt8]
                do {
                    stored = try files.read(
                        part.file, offset: part.offset + byteRange.lowerBound, count: byteRange.count)
                } catch {
                    fail(subject, ArtifactVerifier.decodingFailure(error))
                    return found
                }
                if !streamedProblemFound {
                    let problems = ArtifactVerifier.storedValueProblems(
                        tensor, stored: [part.kind: stored], firstElement: firstElement)
                    for problem in problems { fail(subject, problem) }
                    streamedProblemFound = !problems.isEmpty
                }
                let block = decoded.withUnsafeMutableBufferPointer { decoded in
                    let block = UnsafeMutableBufferPointer(rebasing: decoded[0..<elements.count])
                    stored.withUnsafeBytes { decoder.decode(rows: rows, from: $0, into: block) }
                    return UnsafeBufferPointer(block)
                }
                if firstNonFinite == nil, ArtifactVerifier.holdsNonFinite(block),
                    let bad = block.firstIndex(where: { !$0.isFinite })
                {
                    firstNonFinite = (firstElement + bad, block[bad])
                }
                guard let checkpoint, sourceFailure == nil else { continue }
                do {
                    try source.withUnsafeMutableBufferPointer { source in
                        let reference = UnsafeMutableBufferPointer(rebasing: source[0..<elements.count])
                        try checkpoint.readFloat(tensor.name, elements: elements, into: reference)
                        ArtifactVerifier.addSignalAndNoise(
                            UnsafeBufferPointer(reference), block, referencePrecision: exact ? precision : .float16,
                            to: &sums)
                    }
                } catch {
                    sourceFailure = ArtifactVerifier.sourceFailure(error)
                }
            }
            found.decoded = true
            if let firstNonFinite {
                fail(subject, "element \(firstNonFinite.element) dequantises to \(firstNonFinite.value)")
            }
            guard checkpoint != nil else { return found }
            comparing = true
            if let sourceFailure {
                fail(subject, sourceFailure)
                return found
            }
            let measured = SignalToNoise.decibels(signalPower: sums.signal, squaredError: sums.noise)
            found.measuredSQNR = measured
            func decibels(_ value: Double) -> String { String(format: "%.2f dB", value) }
            if exact {
                if sums.noise > 0 {
                    fail(
                        subject, "kept in \(precision.rawValue) but differs from the checkpoint (\(decibels(measured)))"
                    )
                }
                return found
            }
            if let claimed = tensor.sqnrDB, measured < claimed - 0.01 {
                fail(
                    subject,
                    "SQNR \(decibels(measured)) against the checkpoint, the manifest claims \(decibels(claimed))")
            }
            if let minimumSQNR, measured < minimumSQNR {
                fail(
                    subject,
                    "SQNR \(decibels(measured)) against the checkpoint is below --min-sqnr \(decibels(minimumSQNR))")
            }
            return found
        }
    }

    /// What checking one tensor's contents found, added to the report in manifest order.
    private struct TensorContents {
        /// Failures in the order found, each marked when it comes from the comparison with the checkpoint.
        var failures: [(failure: VerificationFailure, fromComparison: Bool)] = []
        /// Whether every block was read and dequantised.
        var decoded = false
        /// The SQNR measured against the checkpoint, when it was compared.
        var measuredSQNR: Double?
    }

    /// Elements decoded (and read from the checkpoint) at a time by default: 4 MiB of float32
    /// each, so verifying holds a few MiB whatever the tensors' size.
    public static let blockElements = 1 << 20

    /// Whether any value is NaN or infinite (all exponent bits set): the largest exponent, which
    /// vectorises, where a search tests and branches at every value.
    static func holdsNonFinite(_ values: UnsafeBufferPointer<Float>) -> Bool {
        var largestExponent: UInt32 = 0
        for value in values { largestExponent = max(largestExponent, value.bitPattern & 0x7F80_0000) }
        return largestExponent == 0x7F80_0000
    }

    /// The failure to report when a tensor's parts cannot be read or break a format rule.
    static func decodingFailure(_ error: Error) -> String {
        guard let error = error as? BundleError else { return "\(error)" }
        if case .invalidTensor(_, let reason) = error { return reason }
        return error.description
    }

    /// The failure to report when the checkpoint's tensor cannot be read.
    static func sourceFailure(_ error: Error) -> String {
        guard let error = error as? CheckpointError else { return "\(error)" }
        if case .tensorNotFound = error { return "not in the checkpoint" }
        return error.description
    }

    /// Problems in a tensor's stored parts that decoding alone does not catch. `stored` holds
    /// whole parts by kind, except the indices or values, which may be the bytes from element
    /// `firstElement` on.
    static func storedValueProblems(_ tensor: Manifest.Tensor, stored: [String: [UInt8]], firstElement: Int = 0)
        -> [String]
    {
        var problems: [String] = []
        let scheme = tensor.compression
        switch scheme.mode {
        case .keep:
            break
        case .palettize:
            let bits = scheme.bits ?? 4
            let entries = 1 << bits
            if let lut = stored["lut"] {
                let table = lut.withUnsafeBytes { Array($0.bindMemory(to: Float16.self)) }
                for group in 0..<(table.count / entries) {
                    let slice = table[group * entries..<(group + 1) * entries]
                    if slice.contains(where: { !$0.isFinite }) {
                        problems.append("LUT of group \(group) holds a non-finite value")
                    } else if zip(slice, slice.dropFirst()).contains(where: { $0 > $1 }) {
                        problems.append("LUT of group \(group) is not sorted ascending")
                    }
                }
            }
            let totalBits = tensor.shape.saturatingProduct.saturatingMultiplying(bits)
            let totalBytes = totalBits.saturatingAdding(7) / 8
            // Only the part's last byte has unused bits.
            if let indices = stored["indices"], let last = indices.last,
                firstElement.saturatingMultiplying(bits) / 8 + indices.count == totalBytes
            {
                let usedBits = totalBits - (totalBytes - 1) * 8
                if usedBits < 8, last >> usedBits != 0 {
                    problems.append("the unused high bits of the last index byte are not zero")
                }
            }
        case .linear:
            if let scales = stored["scales"] {
                let values = scales.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
                if let bad = values.firstIndex(where: { !$0.isFinite || $0 <= 0 }) {
                    problems.append("scale \(bad) is \(values[bad]), expected a positive finite number")
                }
            }
            if let values = stored["values"], let bad = values.firstIndex(of: 0x80) {
                problems.append("int8 value \(firstElement + bad) is -128, outside [-127, 127]")
            }
        }
        return problems
    }

    /// `Σ r²` and `Σ (r − d)²` of a tensor's source rounded to the stored precision (r) and its
    /// decoded values (d), summed in element order.
    struct SignalAndNoise {
        var signal = 0.0
        var noise = 0.0
    }

    /// Adds the next `source` and `decoded` values, in element order, to `sums`, the source
    /// rounded to `referencePrecision`.
    static func addSignalAndNoise(
        _ source: UnsafeBufferPointer<Float>, _ decoded: UnsafeBufferPointer<Float>,
        referencePrecision: ComputePrecision,
        to sums: inout SignalAndNoise
    ) {
        var (signal, noise) = (sums.signal, sums.noise)
        defer { sums = SignalAndNoise(signal: signal, noise: noise) }
        @inline(__always) func add(_ reference: Double, _ decoded: Float) {
            signal += reference * reference
            noise += (reference - Double(decoded)) * (reference - Double(decoded))
        }
        let count = min(source.count, decoded.count)
        guard referencePrecision == .float16 else {
            for index in 0..<count { add(Double(rounded(source[index], to: referencePrecision)), decoded[index]) }
            return
        }
        // Float16 in batches with the reader's conversion and a table back (Linux x86-64 builds
        // convert float16 in software, one call each way per weight); a batch holding NaN or
        // infinity takes the one-by-one rounding, which clamps infinities.
        let batch = 1 << 16
        var halves = [Float16](repeating: 0, count: min(batch, count))
        Float16Table.floats.withUnsafeBufferPointer { floats in
            halves.withUnsafeMutableBufferPointer { halves in
                var start = 0
                while start < count {
                    let end = min(count, start + batch)
                    let converted = UnsafeMutableBufferPointer(rebasing: halves[0..<(end - start)])
                    let statistics = PrecisionConversion.toFloat16(
                        float32: UnsafeBufferPointer(rebasing: source[start..<end]), into: converted,
                        clampingOutOfRange: true)
                    if statistics.nonFiniteCount > 0 {
                        for index in start..<end { add(Double(rounded(source[index], to: .float16)), decoded[index]) }
                    } else {
                        for index in start..<end {
                            add(Double(floats[Int(converted[index - start].bitPattern)]), decoded[index])
                        }
                    }
                    start = end
                }
            }
        }
    }

    /// `value` as the stored precision would hold it (float16 clamped to its finite range).
    static func rounded(_ value: Float, to precision: ComputePrecision) -> Float {
        switch precision {
        case .float32: return value
        case .bfloat16: return PrecisionConversion.float(bfloat16Bits: PrecisionConversion.bfloat16Bits(value))
        case .float16:
            let limit = PrecisionConversion.float16Maximum
            return Float(Float16(min(max(value, -limit), limit)))
        }
    }

    static func aligned(_ offset: Int) -> Int {
        (offset + ExportPlan.blobAlignment - 1) / ExportPlan.blobAlignment * ExportPlan.blobAlignment
    }

    /// Every regular file below `folder`, as sorted relative paths (hidden staging folders skipped).
    static func filesBelow(_ folder: URL) -> [String] {
        guard let enumerator = FileManager.default.enumerator(atPath: folder.path) else { return [] }
        var result: [String] = []
        while let path = enumerator.nextObject() as? String {
            var isDirectory: ObjCBool = false
            let full = folder.appendingPathComponent(path).path
            if path.split(separator: "/").contains(where: { $0.hasPrefix(".partial-") }) { continue }
            if FileManager.default.fileExists(atPath: full, isDirectory: &isDirectory), !isDirectory.boolValue {
                result.append(path)
            }
        }
        return result.sorted()
    }
}

/// Open files of an artifact, by manifest path; one per thread.
private final class FileReaders {
    let folder: URL
    var files: [String: ReadOnlyFile] = [:]

    init(folder: URL) { self.folder = folder }

    /// `count` bytes at `offset` of `file`.
    /// - Throws: `BundleError.readFailed` when it cannot be opened or the range is not all there.
    func read(_ file: String, offset: Int, count: Int) throws -> [UInt8] {
        let path = folder.appendingPathComponent(file).path
        return try BundleError.readingFile(path) {
            let reader: ReadOnlyFile
            if let open = files[file] {
                reader = open
            } else {
                reader = try ReadOnlyFile(path: path)
                files[file] = reader
            }
            return try reader.bytes(at: offset, count: count)
        }
    }
}

extension ArtifactVerifier {
    /// What is wrong with a manifest's `verdicts`: only a plan has them, one per device of a
    /// platform that loads its bundle, with sizes that can be, and words that follow from its
    /// numbers. The device table behind them is not here to check; a compiled artifact's own
    /// verdict is planned again in full.
    static func verdictProblems(_ manifest: Manifest) -> [String] {
        guard manifest.kind == "plan" else {
            let own = manifest.compiled.map { compiled in
                namingProblems(compiled.verdict).map { "compiled.verdict: \($0)" }
            }
            return
                (manifest.verdicts.isEmpty
                ? [] : ["verdicts lists \(manifest.verdicts.count), but only a plan has them"]) + (own ?? [])
        }
        var problems: [String] = []
        var seen: Set<String> = []
        for verdict in manifest.verdicts {
            let name = "the verdict of \(verdict.architecture) (\(verdict.platform))"
            guard let platform = DevicePlatform(rawValue: verdict.platform),
                platform.bundlePlatform.rawValue == manifest.platform
            else {
                problems.append(
                    "\(name): the bundle, exported for \(manifest.platform), does not load on that platform")
                continue
            }
            let naming = namingProblems(verdict)
            guard naming.isEmpty else {
                problems += naming.map { "\(name): \($0)" }
                continue
            }
            if !seen.insert("\(verdict.architecture.lowercased()) \(verdict.platform)").inserted {
                problems.append("\(name): given twice")
            }
            let positive = [
                ("total_bytes", verdict.totalBytes), ("app_memory_limit_bytes", verdict.appMemoryLimitBytes),
                ("region_budget_bytes", verdict.regionBudgetBytes), ("regions", verdict.regions),
            ]
            if let (key, value) = positive.first(where: { $0.1 <= 0 }) {
                problems.append("\(name): \(key) is \(value), not positive")
            } else if let raised = verdict.increasedMemoryLimitBytes, raised < verdict.appMemoryLimitBytes {
                problems.append(
                    "\(name): increased_memory_limit_bytes is \(raised), below app_memory_limit_bytes "
                        + "\(verdict.appMemoryLimitBytes)")
            } else if let contradiction = verdict.contradiction {
                problems.append("\(name): \(contradiction)")
            }
        }
        return problems
    }

    /// What a verdict says that a device table could not: an id the table refuses, an
    /// entitlement name empty or given twice, a Mac's limit raised.
    static func namingProblems(_ verdict: Manifest.Verdict) -> [String] {
        var problems: [String] = []
        let id = verdict.architecture
        if !DeviceArchitecture.isValidID(id) {
            problems.append("architecture '\(id)' is not an id (letters, digits, '-' or '_')")
        }
        if verdict.entitlements.contains(where: \.isEmpty) { problems.append("an entitlement name is empty") }
        if Set(verdict.entitlements).count != verdict.entitlements.count {
            problems.append("entitlements names one twice")
        }
        if verdict.platform == DevicePlatform.macOS.rawValue, verdict.increasedMemoryLimitBytes != nil {
            problems.append("increased_memory_limit_bytes must be null on a Mac: no entitlement raises it")
        }
        return problems
    }
}
