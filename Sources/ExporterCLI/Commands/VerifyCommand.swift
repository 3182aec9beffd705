import ExporterKit
import Foundation

/// `exporter verify <artifact>`: recompute, check every format rule, dequantise; optionally
/// compare with the checkpoint tensor by tensor and through the reference forward pass.
enum VerifyCommand {
    static let spec = CommandSpec(
        name: "verify",
        abstract: "Check an artifact byte by byte and, given its checkpoint, that it computes the same thing.",
        discussion: "Recomputes every file's size and CRC-32, checks every rule of docs/FORMAT.md (bounds, alignment, "
            + "padding, part sizes, LUT order, index and int8 ranges) and dequantises every tensor. With --against, "
            + "measures each tensor's SQNR against the checkpoint; with --run, runs a token sequence through the "
            + "checkpoint (float32) and the artifact (dequantised) with the reference forward pass and compares "
            + "the logits. Exits 0 only when everything holds, 1 otherwise, naming each file or tensor at fault.",
        arguments: [
            .positional(
                "artifact", help: "A .aimodel or .aimodelc folder, a .mlpackage, or a manifest.json (a plan's too)."),
            .option(
                "against", valueName: "checkpoint",
                help: "The checkpoint the artifact was exported from: a folder, or an 'org/model' id in the local "
                    + "Hugging Face cache."),
            .option(
                "bundle", valueName: "aimodel",
                help: "For an .mlpackage: the bundle to compare every blob with (default: its source bundle beside it)."
            ),
            .option("min-sqnr", valueName: "dB", help: "Fail any compressed tensor below this SQNR (needs --against)."),
            .flag("run", help: "Compare the logits of the checkpoint and the artifact (needs --against)."),
            .option("tokens", valueName: "ids", help: "Comma-separated token ids for --run (default: 8 fixed ids)."),
            .option(
                "tokens-file", valueName: "file",
                help: "Token ids for --run, separated by commas, white space or brackets (a JSON list works)."),
            .option(
                "min-logit-snr", valueName: "dB", defaultValue: "3",
                help: "Fail --run when the logits' SNR (each position centred) is lower."),
            .option(
                "min-agreement", valueName: "fraction",
                help: "Fail --run when fewer positions agree on the top-1 token."),
            .option(
                "max-kl", valueName: "nats", help: "Fail --run when the mean KL divergence per position is larger."),
            .flag("json", help: "Print the report as JSON (with --run: top-5 logits per position for both sides)."),
        ])

    /// The options that compare with the checkpoint, which a Core ML package refuses.
    static let checkpointOptions = [
        "against", "min-sqnr", "run", "tokens", "tokens-file", "min-logit-snr", "min-agreement", "max-kl",
    ]

    /// Token ids used by `--run` without `--tokens`: spread over the vocabulary, fixed.
    static func defaultTokens(vocabularySize: Int) -> [Int] {
        (0..<8).map { ($0 * 7919 + 11) % max(vocabularySize, 1) }
    }

    static func run(_ arguments: ParsedArguments, context: CommandContext) throws -> ExitStatus {
        guard let path = arguments.positional(0) else { throw UsageError.missingArgument("artifact") }
        let against = arguments.value("against")
        if MLPackageViews.isPackage(path) {
            // A package's blobs are its bundle's bytes: the checkpoint comparison is the bundle's.
            if let option = checkpointOptions.first(where: arguments.isGiven) {
                throw UsageError.validation(
                    "--\(option) does not apply to a Core ML package; verify the bundle it was converted from with it")
            }
            return try MLPackageViews.verify(
                context.fileURL(path),
                bundle: arguments.value("bundle").map {
                    context.fileURL($0)
                },
                json: arguments.flag("json"), context: context)
        }
        if arguments.isGiven("bundle") {
            throw UsageError.validation("--bundle applies to a Core ML package (.mlpackage) only")
        }
        let minimumSQNR = try arguments.number("min-sqnr")
        let runForward = arguments.flag("run")
        let minimumLogitSNR = try arguments.number("min-logit-snr") ?? 3
        let minimumAgreement = try arguments.number("min-agreement", minimum: 0, maximum: 1)
        let maximumKL = try arguments.number("max-kl", minimum: 0)
        if against == nil {
            for option in ["run", "min-sqnr"] where arguments.isGiven(option) {
                throw UsageError.validation("--\(option) requires --against <checkpoint>")
            }
        }
        try arguments.refuseBothTokenOptions()
        if !runForward {
            for option in ["tokens", "tokens-file", "min-logit-snr", "min-agreement", "max-kl"]
            where arguments.isGiven(option) {
                throw UsageError.validation("--\(option) requires --run")
            }
        }
        let tokens = try arguments.tokenIds(relativeTo: context.currentDirectory)

        let artifact = try LoadedArtifact(
            url: context.fileURL(path), displayPath: path)
        try artifact.checkReadable()
        // The checkpoint is read holding its folder's lock: a synth rewriting it meanwhile would
        // skew the comparison.
        let checkpointURL = against.map(context.checkpointFolder)
        return try CheckpointFolderLock.reading(checkpointURL) {
            var checkpoint: CheckpointWeights?
            if let url = checkpointURL {
                let weights = try CheckpointWeights(directory: url)
                checkpoint = weights
                try warnIfNotExported(artifact, checkpoint: url, weights: weights, context: context)
            }
            var report = ArtifactVerifier.verify(artifact, against: checkpoint, minimumSQNR: minimumSQNR)
            var comparison: ForwardComparison?
            if runForward, let checkpointURL {
                if report.structuralFailures > 0 {
                    // Broken files or records: the forward pass would read garbage; the failures say why.
                    report.failures.append(
                        VerificationFailure("forward pass", "not run: the artifact failed the checks above"))
                } else {
                    let sequence =
                        tokens ?? defaultTokens(vocabularySize: artifact.manifest.tensors.first?.shape.first ?? 1)
                    let result = try ArtifactVerifier.compareForward(
                        artifact: artifact, checkpoint: checkpointURL, tokens: sequence, checkingFiles: false,
                        progress: ProgressBar(context: context).update)
                    comparison = result
                    if !(result.logitSNR >= minimumLogitSNR) {
                        report.failures.append(
                            VerificationFailure(
                                "forward pass",
                                "logit SNR \(ManifestDiff.decibels(result.logitSNR)) is below --min-logit-snr "
                                    + ManifestDiff.decibels(minimumLogitSNR)))
                    }
                    if let minimumAgreement, result.top1Agreement < minimumAgreement {
                        report.failures.append(
                            VerificationFailure(
                                "forward pass",
                                "top-1 agreement \(percent(result.top1Agreement)) is below --min-agreement \(percent(minimumAgreement))"
                            ))
                    }
                    if let maximumKL, !(result.meanKL <= maximumKL) {
                        report.failures.append(
                            VerificationFailure(
                                "forward pass",
                                "mean KL divergence \(String(format: "%.4f", result.meanKL)) nats is above --max-kl "
                                    + String(format: "%.4f", maximumKL)))
                    }
                }
            }
            if !report.passed, artifact.wasReplaced {
                // Its failures may compare one artifact's manifest with another's files.
                throw BundleError.readFailed(
                    path: artifact.manifestURL.path,
                    reason: "the artifact was replaced while it was verified; verify again"
                )
            }
            if arguments.flag("json") {
                context.writeOutput(JSONWriter.string(json(report, comparison: comparison, artifact: path)))
            } else {
                context.print(
                    lines: lines(
                        report, comparison: comparison, artifact: path, compared: checkpoint != nil,
                        plan: artifact.manifest.kind == "plan"))
            }
            for failure in report.failures { context.printError("Error: \(failure)") }
            let writer = artifact.manifest.tool.version
            if !report.passed, writer != ToolVersion.current {
                // An earlier version's figures can fail this version's rules without any damage.
                context.printError(
                    "warning: exporter \(writer) wrote this artifact, and this is \(ToolVersion.current): a figure that "
                        + "version computed otherwise fails here; export or compile it again with this version")
            }
            return report.passed ? .success : .verificationFailed
        }
    }

    /// Warns when the checkpoint's weights files are not those the artifact was exported from
    /// (their fingerprints are in its manifest): the comparison then measures another model;
    /// and when its tokenizer files are not those the artifact carries, byte for byte.
    static func warnIfNotExported(
        _ artifact: LoadedArtifact, checkpoint: URL, weights: CheckpointWeights? = nil, context: CommandContext
    ) throws {
        let manifest = artifact.manifest
        // The weights first: a checkpoint that cannot be opened is refused before anything is said of it.
        let differing = try ExportRunner.sourceMismatches(manifest, checkpoint: checkpoint, weights: weights)
        let tokenizer = try ExportRunner.tokenizerMismatches(
            manifest, artifact: artifact.folder, checkpoint: checkpoint)
        if !tokenizer.isEmpty {
            context.printError(
                "warning: the checkpoint's tokenizer files are not those this artifact carries: "
                    + tokenizer.map { "'\($0)'" }.joined(separator: ", ") + " differ"
                    + (tokenizer.count == 1 ? "s" : "") + "; export again to ship the checkpoint's")
        }
        guard !differing.isEmpty else { return }
        // The likely cause when the cache's refs/main moved since the export: said, by revision.
        var revisions = ""
        let snapshot = checkpoint.resolvingSymlinksInPath()
        if let recorded = manifest.model.source.revision,
            HuggingFaceCache.repositoryFolder(ofSnapshot: snapshot) != nil,
            snapshot.lastPathComponent != recorded
        {
            revisions =
                " (it was exported from revision \(recorded.prefix(12)); this is revision "
                + "\(snapshot.lastPathComponent.prefix(12)))"
        }
        context.printError(
            "warning: the checkpoint is not the one this artifact was exported from: "
                + differing.map { "'\($0)'" }.joined(separator: ", ")
                + (differing.count == 1 ? " differs from the file" : " differ from the files") + " its manifest records"
                + revisions
        )
    }

    static func percent(_ fraction: Double) -> String { String(format: "%.1f%%", fraction * 100) }

    static func lines(
        _ report: VerificationReport, comparison: ForwardComparison?, artifact: String, compared: Bool,
        plan: Bool = false
    ) -> [String] {
        var rows = [
            ["files", "\(report.filesChecked) checked (size and CRC-32)"],
            [
                "tensors",
                "\(report.tensorsDecoded) decoded"
                    + (compared ? ", \(report.tensorsCompared) compared with the checkpoint" : ""),
            ],
        ]
        if !report.tensorListChecked {
            rows.append(
                [
                    "",
                    "names and shapes not checked: "
                        + (plan ? "a plan has no graph.json" : "the graph lacks this family's layout"),
                ])
        }
        if compared,
            let worst = report.measuredSQNR.filter({ $0.value.isFinite }).min(by: {
                ($0.value, $0.key) < ($1.value, $1.key)
            })
        {
            rows.append(["lowest SQNR", "\(Format.decimal(worst.value)) dB  \(worst.key)"])
        }
        if let comparison {
            let agreeing = comparison.positions.filter(\.top1Agrees).count
            rows.append([
                "forward pass",
                "\(Format.count(comparison.positions.count, "token")): top-1 agreement \(percent(comparison.top1Agreement)) "
                    + "(\(agreeing)/\(comparison.positions.count))",
            ])
            rows.append([
                "",
                "max |Δlogit| \(String(format: "%.4f", comparison.maxLogitDifference)), logit SNR \(ManifestDiff.decibels(comparison.logitSNR))",
            ])
            rows.append([
                "",
                "KL per position: mean \(String(format: "%.5f", comparison.meanKL)), max \(String(format: "%.5f", comparison.maxKL)) nats",
            ])
            if let source = comparison.sourcePerplexity, let artifactPerplexity = comparison.artifactPerplexity {
                let (checkpointText, artifactText) = (
                    EvalCommand.number(source, "%.3f"), EvalCommand.number(artifactPerplexity, "%.3f")
                )
                rows.append(["", "perplexity \(checkpointText) (checkpoint), \(artifactText) (artifact)"])
            }
        }
        var result = ["verify \(artifact)"] + Format.table(rows, indent: "  ")
        result.append(report.passed ? "everything holds" : "\(report.failures.count) problem(s) found")
        return result
    }

    static func json(_ report: VerificationReport, comparison: ForwardComparison?, artifact: String) -> JSONValue {
        func double(_ value: Double) -> JSONValue { value.isFinite ? .number(String(format: "%.4f", value)) : .null }
        var root = JSONObject()
        root["artifact"] = .string(artifact)
        root["passed"] = .bool(report.passed)
        root["files_checked"] = .number(String(report.filesChecked))
        root["tensors_decoded"] = .number(String(report.tensorsDecoded))
        root["tensors_compared"] = .number(String(report.tensorsCompared))
        root["tensor_list_checked"] = .bool(report.tensorListChecked)
        root["failures"] = .array(
            report.failures.map {
                .object(JSONObject([("subject", .string($0.subject)), ("reason", .string($0.reason))]))
            })
        root["sqnr_db"] = .object(
            JSONObject(report.measuredSQNR.sorted { $0.key < $1.key }.map { ($0.key, double($0.value)) }))
        root["forward"] = comparison?.json ?? .null
        return .object(root)
    }
}
