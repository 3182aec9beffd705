import ExporterKit

/// The human view of a plan: what the export will produce, on one 80-column screen.
enum PlanPrinter {
    /// How the compression line says the palettisation was weighted by a calibration text.
    static func calibrationNote(_ calibration: Manifest.CalibrationRecord?) -> String {
        calibration.map { ", calibrated on \(Format.count($0.tokens, "token"))" } ?? ""
    }

    /// The summary lines of `plan` and what exporting it takes here (`conversion`); with
    /// `listTensors`, every tensor too.
    static func lines(
        _ plan: ExportPlan, conversion: Manifest.Conversion, listTensors: Bool, warnings: [String] = [],
        calibration: Manifest.CalibrationRecord? = nil
    ) -> [String] {
        let model = plan.model
        let presetText = model.preset.map { "preset \($0.id)" } ?? "experimental (no preset)"
        let remapped = model.family.modelType == model.config.modelType ? "" : " → \(model.family.modelType)"
        let kv = plan.kvCache
        let memory = plan.memory
        let embeddingNote =
            plan.tensors.contains { $0.rule == "ios-embedding" }
            ? ", embedding int8 per tensor"
            : plan.tensors.contains { $0.rule == "ios-embedding-kept" }
                ? ", embedding kept in \(plan.precision.rawValue)" : ""
        let searches = CompressionScheme.Search.allCases.filter { search in
            plan.tensors.contains { $0.scheme.search == search }
        }
        let searchNote = searches.map { ", \($0.rawValue) LUT search" }.joined()
        var lines = [
            "\(plan.outputName)  (\(presetText))"
        ]
        lines += Format.table(
            [
                ["model type", model.config.modelType + remapped],
                ["source", sourceDescription(model.source)],
                ["platform", plan.platform.rawValue],
                ["precision", plan.precision.rawValue],
                [
                    "context",
                    "\(Format.count(plan.contextLength, "token")) (max \(Format.grouped(model.config.maxPositionEmbeddings)))",
                ],
                ["parameters", Format.grouped(plan.parameters)],
                [
                    "compression",
                    plan.compression.name + embeddingNote + searchNote + PlanPrinter.calibrationNote(calibration),
                ],
                [
                    "weights (est.)",
                    "\(Format.megabytes(plan.estimatedWeightsBytes)) (\(Format.mebibytes(plan.estimatedWeightsBytes))), "
                        + "\(Format.decimal(plan.bitsPerWeight)) bits per weight",
                ],
                ["KV cache", "\(Format.grouped(kv.bytes)) bytes (\(Format.mebibytes(kv.bytes)))"],
                [
                    "",
                    "= 2 × \(Format.count(kv.layers, "layer")) × \(Format.count(kv.keyValueHeads, "KV head")) × \(kv.headDimension) × "
                        + "\(Format.grouped(kv.contextLength)) × \(kv.precision.bytesPerElement) B",
                ],
                [
                    "memory (est.)",
                    "\(Format.mebibytes(memory.totalBytes)) = weights \(Format.mebibytes(memory.weightsBytes)) + KV "
                        + "\(Format.mebibytes(memory.kvCacheBytes)) + working \(Format.mebibytes(memory.workingBytes))",
                ],
            ] + conversionRows(conversion, config: model.config), indent: "  ")
        lines.append("")
        var rows = [["group", "tensors", "parameters", "bytes", "bits/w", "storage"]]
        for role in TensorRole.allCases {
            let tensors = plan.tensors.filter { $0.spec.role == role }
            guard !tensors.isEmpty else { continue }
            let parameters = tensors.reduce(0) { $0 + $1.spec.elementCount }
            let bytes = tensors.reduce(0) { $0 + $1.storedBytes }
            var labels: [String] = []
            for tensor in tensors {
                let label = tensor.scheme.label(precision: plan.precision)
                if !labels.contains(label) { labels.append(label) }
            }
            rows.append([
                role.rawValue, "\(tensors.count)", Format.grouped(parameters), Format.megabytes(bytes),
                Format.decimal(Double(bytes * 8) / Double(max(parameters, 1))), labels.joined(separator: ", "),
            ])
        }
        lines += Format.table(rows, rightAligned: [1, 2, 3, 4], indent: "  ")
        if listTensors {
            lines.append("")
            var tensorRows = [["tensor", "shape", "parameters", "bytes", "storage"]]
            for tensor in plan.tensors {
                tensorRows.append([
                    tensor.spec.name, tensor.spec.shape.map(String.init).joined(separator: "×"),
                    Format.grouped(tensor.spec.elementCount), Format.grouped(tensor.storedBytes),
                    tensor.scheme.label(precision: plan.precision),
                ])
            }
            lines += Format.table(tensorRows, rightAligned: [2, 3], indent: "  ")
        } else {
            lines.append("  (\(plan.tensors.count) tensors; --tensors lists them, --json gives the manifest preview)")
        }
        for warning in plan.warnings + warnings { lines.append("warning: \(warning)") }
        return lines
    }

    /// What the export needs at its peak on this machine, and whether it would be refused
    /// (the worker count is in the JSON).
    static func conversionRows(_ conversion: Manifest.Conversion, config: ModelConfig) -> [[String]] {
        var peak = "\(Format.mebibytes(conversion.peakBytes)) at peak (est.)"
        if let available = conversion.availableBytes {
            peak +=
                "; \(Format.mebibytes(available)) available"
                + (conversion.availableLimit.map { " (\($0.command))" } ?? "")
                + (available < conversion.peakBytes ? ": refused" : "")
        }
        let storage: String
        switch conversion.storageFrom {
        case "checkpoint": storage = ""
        case "synthetic":
            let generated = SyntheticWeightSource.storage(for: config) == .bfloat16 ? "bfloat16" : "float16"
            storage = " (generated as \(generated))"
        default:
            if let name = config.torchDType, TensorDType(torchDType: name) != nil {
                storage = " (weights as \(name))"
            } else {
                // No torch_dtype, or auto: the weights' own type, which they are not here to say.
                storage = " (\(config.torchDType.map { "torch_dtype \($0)" } ?? "no torch_dtype"): read whole)"
            }
        }
        return [["conversion", peak], ["", "at \(conversion.peakTensor)" + storage]]
    }

    static func sourceDescription(_ source: ModelSource) -> String {
        switch source {
        case .directory(let url): return "directory \(url.path)"
        case .huggingFaceCache(let repoID, _, let revision):
            return "Hugging Face cache \(repoID) @ \(revision.prefix(12))"
        case .presetConfigOnly(let repoID, nil): return "preset config of \(repoID) (weights not on this machine)"
        case .presetConfigOnly(let repoID, _?):
            // The reason is in the plan's warnings, with the export's refusal.
            return "preset config of \(repoID) (its Hugging Face cache folder has no snapshot to read)"
        }
    }
}
