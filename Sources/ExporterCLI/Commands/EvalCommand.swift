import ExporterKit
import Foundation

/// `exporter eval <artifact> --against <checkpoint> --tokens-file F`: perplexity of the
/// checkpoint and of the artifact over a text, KL divergence and top-1 agreement.
enum EvalCommand {
    static let spec = CommandSpec(
        name: "eval",
        abstract: "Measure how much an artifact's predictions differ from its checkpoint's over a text.",
        discussion: "Runs the token sequence through the checkpoint (float32) and the artifact (dequantised) with the "
            + "reference forward pass, the whole sequence in one prefill, and reports the perplexity of each, the "
            + "relative increase, the mean KL divergence and the top-1 agreement per position, and the bits stored "
            + "per weight of the linear layers. Use a text that was not the calibration text.",
        arguments: [
            .positional("artifact", help: "A .aimodel or .aimodelc folder, or its manifest.json."),
            .option(
                "against", valueName: "checkpoint", isRequired: true,
                help: "The checkpoint the artifact was exported from: a folder, or an 'org/model' id in the local "
                    + "Hugging Face cache."),
            .option(
                "tokens-file", valueName: "file",
                help: "Token ids, separated by commas, white space or brackets (a JSON list works)."),
            .option("tokens", valueName: "ids", help: "Comma-separated token ids (instead of --tokens-file)."),
            .flag("json", help: "Print the result as JSON."),
        ])

    static func run(_ arguments: ParsedArguments, context: CommandContext) throws -> ExitStatus {
        guard let path = arguments.positional(0) else { throw UsageError.missingArgument("artifact") }
        guard let against = arguments.value("against") else { throw UsageError.missingOption("--against <checkpoint>") }
        try arguments.refuseBothTokenOptions()
        guard let tokens = try arguments.tokenIds(relativeTo: context.currentDirectory) else {
            throw UsageError.validation("eval requires --tokens-file <file> or --tokens <ids>")
        }
        guard tokens.count >= 2 else {
            throw UsageError.invalidValue(
                value: "\(tokens.count) token", option: arguments.isGiven("tokens") ? "--tokens" : "--tokens-file",
                expected: "at least 2 tokens (perplexity predicts each from those before it)")
        }
        let artifact = try LoadedArtifact(
            url: context.fileURL(path), displayPath: path)
        let checkpoint = context.checkpointFolder(against)
        let bar = ProgressBar(context: context)
        // Read holding the checkpoint folder's lock: a synth rewriting it meanwhile would skew the figures.
        let result = try CheckpointFolderLock.reading(checkpoint) {
            try VerifyCommand.warnIfNotExported(artifact, checkpoint: checkpoint, context: context)
            return try FidelityEvaluation.evaluate(
                artifact: artifact, checkpoint: checkpoint, tokens: tokens, progress: bar.update)
        }
        if arguments.flag("json") {
            context.writeOutput(JSONWriter.string(json(result, artifact: path)))
        } else {
            context.print(lines: lines(result, artifact: path))
        }
        return .success
    }

    /// `value` in `format`: `inf` for an infinite one (a perplexity beyond the range of a double),
    /// as `verify --run` prints it; `n/a` for no number (an increase from one infinity to another);
    /// from a million on, in scientific notation with 4 significant digits (`1.463e+49`, where
    /// `%.3f` wrote 50 digits). The JSON writes null for the first two, and every number in full.
    static func number(_ value: Double, _ format: String) -> String {
        if value.isNaN { return "n/a" }
        guard value.isFinite, abs(value) >= 1e6 else { return String(format: format, value) }
        return String(format: format.contains("+") ? "%+.3e" : "%.3e", value)
    }

    static func lines(_ result: FidelityEvaluation, artifact: String) -> [String] {
        let comparison = result.comparison
        let agreeing = comparison.positions.filter(\.top1Agrees).count
        let rows = [
            ["compression", result.compression],
            [
                "bits/weight",
                "\(Format.decimal(result.linearBitsPerWeight)) linear layers, \(Format.decimal(result.bitsPerWeight)) overall",
            ],
            ["tokens", "\(result.tokenCount)"],
            [
                "perplexity",
                "\(number(result.sourcePerplexity, "%.3f")) checkpoint → \(number(result.artifactPerplexity, "%.3f")) artifact "
                    + "(\(number(result.perplexityIncreasePercent, "%+.2f"))%)",
            ],
            [
                "mean KL",
                "\(number(comparison.meanKL, "%.5f")) nats per position (max \(number(comparison.maxKL, "%.4f")))",
            ],
            [
                "top-1 agreement",
                "\(VerifyCommand.percent(comparison.top1Agreement)) (\(agreeing)/\(comparison.positions.count))",
            ],
        ]
        return ["eval \(artifact)"] + Format.table(rows, indent: "  ")
    }

    static func json(_ result: FidelityEvaluation, artifact: String) -> JSONValue {
        // The shortest decimal that reads back as the same double: a small KL keeps its digits.
        func double(_ value: Double) -> JSONValue { value.isFinite ? .number(String(value)) : .null }
        var root = JSONObject()
        root["artifact"] = .string(artifact)
        root["compression"] = .string(result.compression)
        root["tokens"] = .number(String(result.tokenCount))
        root["linear_bits_per_weight"] = double(result.linearBitsPerWeight)
        root["bits_per_weight"] = double(result.bitsPerWeight)
        root["source_perplexity"] = double(result.sourcePerplexity)
        root["artifact_perplexity"] = double(result.artifactPerplexity)
        root["perplexity_increase_percent"] = double(result.perplexityIncreasePercent)
        root["mean_kl"] = double(result.comparison.meanKL)
        root["max_kl"] = double(result.comparison.maxKL)
        root["top1_agreement"] = double(result.comparison.top1Agreement)
        return .object(root)
    }
}
