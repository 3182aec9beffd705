import ExporterKit
import Foundation

/// `exporter synth <model> --out DIR`: a synthetic checkpoint as real safetensors files.
enum SynthCommand {
    static let spec = CommandSpec(
        name: "synth",
        abstract: "Write a synthetic checkpoint (config.json and safetensors) of a model's exact shapes.",
        discussion: "Weights are deterministic for a seed, heavy-tailed with rare outliers like trained weights. "
            + "For tests and benchmarks: they compute nothing useful.",
        arguments: [
            .positional(
                "model", help: "A checkpoint folder (only its config.json is read), a preset or an 'org/model' id."),
            .option("out", valueName: "dir", isRequired: true, help: "The folder to write (created)."),
            .option("seed", valueName: "n", defaultValue: "0", help: "Seed of the weights."),
            .option(
                "dtype", choices: ["BF16", "F16", "F32"], defaultValue: "BF16", help: "Storage type of the weights."),
            .option(
                "shard-size", valueName: "bytes", defaultValue: "5000000000",
                help: "Largest shard before a new one starts."),
            .flag("overwrite", help: "Replace weights already in the folder (any *.safetensors file and the index)."),
        ])

    static func run(_ arguments: ParsedArguments, context: CommandContext) throws -> ExitStatus {
        guard let model = arguments.positional(0) else { throw UsageError.missingArgument("model") }
        guard let out = arguments.value("out") else { throw UsageError.missingOption("--out <dir>") }
        guard let seed = UInt64(arguments.value("seed") ?? "0") else {
            throw UsageError.invalidValue(
                value: arguments.value("seed") ?? "", option: "--seed", expected: "a non-negative integer")
        }
        guard let shardBytes = try arguments.int("shard-size", range: 1...) else {
            throw UsageError.missingValue(option: "--shard-size")
        }
        let dtype = TensorDType(rawValue: arguments.value("dtype") ?? "BF16") ?? .bf16
        // Any family with a tensor layout can be synthesised: no platform or preset rules apply.
        let resolved = try context.resolver().resolve(model, platform: .macOS, experimental: true, precisionGiven: true)
        let directory = context.fileURL(out)
        let result = try SyntheticCheckpoint.write(
            model: resolved, dtype: dtype, seed: seed, to: directory, shardBytes: shardBytes,
            replacingExisting: arguments.flag("overwrite"), progress: ProgressBar(context: context).update)
        context.print(
            "wrote \(directory.path): \(result.files.count) safetensors file(s), \(Format.megabytes(result.totalTensorBytes)) of "
                + "synthetic \(dtype.rawValue) weights (seed \(seed))")
        return .success
    }
}
