import Foundation

/// The manifest's derived figures and the fields that imply each other, recomputed from the
/// manifest, its graph and the files the artifact carries, by the code that wrote them.
extension ArtifactVerifier {
    /// Figures the manifest derives from its own fields: bits per weight (overall and by role),
    /// the KV cache's element type, and the weights the memory plan counts.
    static func derivedFigureProblems(_ manifest: Manifest) -> [String] {
        var problems: [String] = []
        let sizes = manifest.sizes
        // (field, its bits per weight, the bytes and parameters it is computed from, as named)
        let bitsFigures =
            [
                (
                    "sizes.bits_per_weight", sizes.bitsPerWeight, sizes.estimatedBundleBytes, manifest.parameters,
                    ("sizes.estimated_bundle_bytes", "parameters")
                )
            ]
            + sizes.byRole.sorted(by: { $0.key < $1.key }).map { role, size in
                (
                    "sizes.by_role.\(role).bits_per_weight", size.bitsPerWeight, size.bytes, size.parameters,
                    ("its bytes", "its parameters")
                )
            }
        for (field, recorded, bytes, parameters, names) in bitsFigures {
            let bits = Manifest.bitsPerWeight(bytes: bytes, parameters: parameters)
            guard recorded != bits else { continue }
            problems.append(
                "\(field) is \(ManifestDiff.plain(recorded)), 8 × \(names.0) (\(bytes)) / \(names.1) (\(parameters)) "
                    + "rounded to two decimals is \(ManifestDiff.plain(bits))")
        }
        if manifest.kvCache.dtype != manifest.computePrecision {
            problems.append(
                "kv_cache.dtype is \(manifest.kvCache.dtype), compute_precision is \(manifest.computePrecision)")
        }
        // A bundle's are held against its weights.bin; a plan and a compiled artifact describe
        // the portable bundle's, which a compiled artifact's parts lay out.
        if manifest.kind == "plan", let bytes = sizes.bundleBytes {
            problems.append("sizes.bundle_bytes is \(bytes), but a plan has no files: null")
        }
        if manifest.compiled != nil || manifest.kind == "plan" {
            if manifest.memory.weightsBytes != sizes.estimatedBundleBytes {
                problems.append(
                    "memory.weights_bytes is \(manifest.memory.weightsBytes), sizes.estimated_bundle_bytes is "
                        + "\(sizes.estimatedBundleBytes)")
            }
        }
        if manifest.compiled != nil {
            let portable = portableWeightsBytes(manifest.tensors)
            if sizes.estimatedBundleBytes != portable {
                problems.append(
                    "sizes.estimated_bundle_bytes is \(sizes.estimatedBundleBytes), the portable \(BundleWriter.weightsName) "
                        + "its tensors' parts lay out is \(portable) bytes")
            }
        }
        return problems
    }

    /// Bytes of the portable `weights.bin` that holds `tensors`' parts: the header, then each
    /// part at the next multiple of the alignment, the whole padded to it (`docs/FORMAT.md`).
    static func portableWeightsBytes(_ tensors: [Manifest.Tensor]) -> Int {
        var cursor = ExportPlan.weightsHeaderBytes
        for part in tensors.flatMap(\.parts) { cursor = aligned(cursor).saturatingAdding(part.bytes) }
        return aligned(cursor)
    }

    /// `memory.working_bytes` against the formula over the graph's dimensions.
    static func workingMemoryProblem(_ manifest: Manifest, graph: GraphDescription) -> String? {
        let memory = manifest.memory
        // Before 0.7.4 the chunk was 128 at every context.
        let chunks = [MemoryEstimate.prefillChunk(contextLength: graph.contextLength), MemoryEstimate.prefillChunk]
        guard chunks.contains(memory.prefillChunk) else {
            return "memory.prefill_chunk is \(memory.prefillChunk), not \(chunks[0]) at a context of "
                + "\(graph.contextLength) tokens"
        }
        let working = MemoryEstimate.workingBytes(
            hiddenSize: graph.hiddenSize, intermediateSize: graph.intermediateSize, heads: graph.attention.heads,
            contextLength: graph.contextLength, vocabularySize: graph.vocabularySize,
            prefillChunk: memory.prefillChunk)
        guard memory.workingBytes != working else { return nil }
        return "memory.working_bytes is \(memory.workingBytes), \(BundleWriter.graphName)'s dimensions with "
            + "memory.prefill_chunk \(memory.prefillChunk) give \(working)"
    }

    /// Fields that imply each other (`docs/MANIFEST.md`): the iOS embedding's int8 and the
    /// platform, the compiled platform, the preset and `experimental`, the kind of weights and
    /// their source files and tokenizer. Each as (subject, reason); `subject` names the manifest.
    static func implicationProblems(_ manifest: Manifest, subject: String) -> [(String, String)] {
        var problems: [(String, String)] = []
        let platform = manifest.platform
        // An unknown platform is reported on its own, not again for what it implies.
        let knownPlatform = Platform(rawValue: platform) != nil
        let int8Embedding = Manifest.iosEmbeddingInt8(manifest.tensors.map(\.rule))
        if manifest.compression.iosEmbeddingInt8, knownPlatform, platform != Platform.iOS.rawValue {
            problems.append(
                (
                    subject,
                    "compression.ios_embedding_int8 is true, which only an iOS export sets, but platform is '\(platform)'"
                ))
        } else if manifest.compression.iosEmbeddingInt8 != int8Embedding {
            let rule = Manifest.iosEmbeddingRule
            problems.append(
                (
                    subject,
                    int8Embedding
                        ? "compression.ios_embedding_int8 is false but tensor '\(manifest.tensors.first { $0.rule == rule }?.name ?? "")' has rule '\(rule)'"
                        : "compression.ios_embedding_int8 is true but no tensor has rule '\(rule)'"
                ))
        } else if knownPlatform, platform != Platform.iOS.rawValue,
            let tensor = manifest.tensors.first(where: {
                [Manifest.iosEmbeddingRule, Manifest.iosEmbeddingKeptRule].contains($0.rule)
            })
        {
            problems.append(
                (
                    "tensor '\(tensor.name)'",
                    "rule '\(tensor.rule)' is the iOS token embedding's, but platform is '\(platform)'"
                ))
        }
        if let compiled = manifest.compiled {
            // `compile` refuses a version below the first that loads compiled artifacts, or none.
            do { _ = try DeploymentVersion(parsing: compiled.minDeploymentVersion) } catch {
                problems.append((subject, "compiled.min_deployment_version: \(error)"))
            }
            if let devicePlatform = DevicePlatform(rawValue: compiled.platform) {
                let bundlePlatform = devicePlatform.bundlePlatform.rawValue
                if knownPlatform, bundlePlatform != platform {
                    problems.append(
                        (
                            subject,
                            "compiled.platform is '\(compiled.platform)', which compiles \(bundlePlatform) bundles, but "
                                + "platform is '\(platform)'"
                        ))
                }
            } else {
                let known = DevicePlatform.allCases.map(\.rawValue).joined(separator: ", ")
                problems.append(
                    (subject, "compiled.platform is '\(compiled.platform)', expected one of: \(known)"))
            }
        }
        let model = manifest.model
        if model.experimental != (model.preset == nil) {
            problems.append(
                (
                    subject,
                    "model.experimental is \(model.experimental) but model.preset is "
                        + (model.preset.map { "'\($0)'" } ?? "null")
                ))
        }
        let isPlan = manifest.kind == "plan"
        let expectedWeights = isPlan ? ["none"] : ["checkpoint", "synthetic"]
        if !expectedWeights.contains(model.weights) {
            problems.append(
                (
                    subject,
                    "model.weights is '\(model.weights)', expected \(expectedWeights.joined(separator: " or ")) for a "
                        + "\(isPlan ? "plan" : "manifest of kind '\(manifest.kind)'")"
                ))
        }
        let sourceFiles = model.source.files.count
        if model.weights == "checkpoint", sourceFiles == 0 {
            problems.append((subject, "model.weights is 'checkpoint' but model.source.files is empty"))
        } else if model.weights != "checkpoint", sourceFiles > 0 {
            problems.append(
                (
                    subject,
                    "model.weights is '\(model.weights)' but model.source.files lists \(sourceFiles) checkpoint "
                        + (sourceFiles == 1 ? "file" : "files")
                ))
        }
        if model.weights == "checkpoint", manifest.tokenizer == nil {
            problems.append((subject, "tokenizer is null, but an export from a checkpoint records one"))
        } else if model.weights != "checkpoint", manifest.tokenizer != nil {
            problems.append(
                (subject, "tokenizer is set, but model.weights '\(model.weights)' has no tokenizer: expected null"))
        }
        return problems
    }

    /// The manifest's `tokenizer` against the tokenizer files the artifact carries, read by the
    /// export's own code (``TokenizerFiles``): which files, the reasoning marker and the response
    /// budget it implies. Each as (subject, reason); `subject` names the manifest.
    static func tokenizerProblems(_ manifest: Manifest, folder: URL, subject: String) -> [(String, String)] {
        let directory = folder.appendingPathComponent("tokenizer", isDirectory: true)
        // A FIFO or a folder in a file's place is reported by the file checks; reading it here
        // could wait forever.
        for name in TokenizerFiles.knownNames {
            let path = directory.appendingPathComponent(name).path
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else { continue }
            if attributes[.type] as? FileAttributeType != .typeRegular { return [] }
        }
        let carried: Manifest.Tokenizer
        do {
            carried = try TokenizerFiles(directory: directory).manifestRecord
        } catch {
            return [(subject, "the tokenizer files cannot be read: \(error)")]
        }
        guard let recorded = manifest.tokenizer else {
            guard carried.files.isEmpty else {
                return [(subject, "tokenizer is null but the artifact holds \(carried.files.joined(separator: ", "))")]
            }
            return []
        }
        var problems: [(String, String)] = []
        if recorded.files != carried.files {
            problems.append(
                (subject, "tokenizer.files is \(list(recorded.files)), the artifact holds \(list(carried.files))"))
        }
        func marker(_ value: String?) -> String { value ?? "null" }
        if recorded.reasoningMarker != carried.reasoningMarker {
            problems.append(
                (
                    subject,
                    "tokenizer.reasoning_marker is \(marker(recorded.reasoningMarker)), the artifact's tokenizer files "
                        + "give \(marker(carried.reasoningMarker))"
                ))
        }
        if recorded.defaultResponseTokens != carried.defaultResponseTokens {
            problems.append(
                (
                    subject,
                    "tokenizer.default_response_tokens is \(recorded.defaultResponseTokens), the artifact's tokenizer "
                        + "files give \(carried.defaultResponseTokens) (reasoning marker \(marker(carried.reasoningMarker)))"
                ))
        }
        return problems
    }

    /// `[a, b]`, `[]` for none.
    private static func list(_ paths: [String]) -> String { "[" + paths.joined(separator: ", ") + "]" }

    /// A compiled artifact's regions' figures, memory plan and verdict against the compiler's own
    /// plan (``CompilePlan``) of the artifact's graph and tensors for the device its manifest
    /// records (page size, budget and memory limits). Nothing when the records are too broken
    /// or too large to plan (reported by the other checks): every part within the weights file,
    /// dimensions within bounds no model nears, layers in order.
    static func compiledPlanProblems(_ manifest: Manifest, graph: GraphDescription, weightsFileBytes: Int?)
        -> [String]
    {
        guard let compiled = manifest.compiled, let weightsFileBytes,
            let platform = DevicePlatform(rawValue: compiled.platform),
            (1...(1 << 24)).contains(compiled.pageSize),
            [graph.hiddenSize, graph.vocabularySize].allSatisfy({ (1...(1 << 24)).contains($0) }),
            [graph.intermediateSize, graph.contextLength].allSatisfy({ (1...(1 << 22)).contains($0) }),
            [graph.layers, graph.attention.heads, graph.attention.kvHeads, graph.attention.headDim]
                .allSatisfy({ (1...(1 << 12)).contains($0) }),
            manifest.tensors.count <= 1 << 20,
            manifest.tensors.allSatisfy({ $0.parts.allSatisfy { (0...weightsFileBytes).contains($0.bytes) } })
        else { return [] }
        let layers = manifest.tensors.compactMap(\.layer)
        guard layers.allSatisfy({ $0 >= 0 }), zip(layers, layers.dropFirst()).allSatisfy({ $0 <= $1 }),
            let subject = try? CompileSubject(manifest: manifest, graph: graph, path: "")
        else { return [] }
        let recorded = compiled.verdict
        let device = DeviceArchitecture(
            id: compiled.architecture, platform: platform, chip: compiled.chip, products: compiled.products,
            aheadOfTime: true, ramBytes: 0, appMemoryLimitBytes: recorded.appMemoryLimitBytes,
            increasedMemoryLimitBytes: recorded.increasedMemoryLimitBytes, entitlements: recorded.entitlements,
            regionBudgetBytes: recorded.regionBudgetBytes, pageSize: compiled.pageSize)
        let plan = CompilePlan(subject: subject, device: device)
        var problems: [String] = []
        func compare<Value: Equatable>(_ field: String, _ found: Value, _ planned: Value) {
            if found != planned {
                problems.append("compiled.\(field) is \(found), the compiler's plan of the artifact gives \(planned)")
            }
        }
        // Offsets, extents and layers are held against the region table by the layout checks.
        if compiled.regions.count == plan.regions.count {
            for (region, planned) in zip(compiled.regions, plan.regions) {
                let name = "regions[\(region.index)]"
                compare("\(name).stored_bytes", region.storedBytes, planned.storedBytes)
                compare("\(name).kv_cache_bytes", region.kvCacheBytes, planned.kvCacheBytes)
                compare("\(name).working_bytes", region.workingBytes, planned.workingBytes)
                compare("\(name).footprint_bytes", region.footprintBytes, planned.footprintBytes)
                compare("\(name).budget_bytes", region.budgetBytes, planned.budgetBytes)
                compare("\(name).within_budget", region.withinBudget, planned.withinBudget)
            }
        }
        let memory = compiled.memory
        compare("memory.kv_cache_bytes", memory.kvCacheBytes, plan.memory.kvCacheBytes)
        compare("memory.working_bytes", memory.workingBytes, plan.memory.workingBytes)
        compare("memory.tables_bytes", memory.tablesBytes, plan.memory.tablesBytes)
        compare("memory.peak_region", memory.peakRegion, plan.memory.peakRegion)
        let verdict = plan.verdict
        compare("verdict.architecture", recorded.architecture, verdict.architecture)
        compare("verdict.platform", recorded.platform, verdict.platform)
        compare("verdict.chip", recorded.chip, verdict.chip)
        compare("verdict.total_bytes", recorded.totalBytes, verdict.totalBytes)
        compare("verdict.memory", recorded.memory.rawValue, verdict.memory.rawValue)
        compare("verdict.entitlements", recorded.entitlements, verdict.entitlements)
        compare("verdict.neural_engine", recorded.neuralEngine.rawValue, verdict.neuralEngine.rawValue)
        compare("verdict.regions", recorded.regions, verdict.regions)
        compare("verdict.regions_over_budget", recorded.regionsOverBudget, verdict.regionsOverBudget)
        compare("verdict.ahead_of_time", recorded.aheadOfTime, verdict.aheadOfTime)
        return problems
    }
}
