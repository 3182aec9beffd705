import ExporterKit

/// How verdicts read: per compiled artifact, and as a table in `exporter plan`.
enum VerdictPrinter {
    /// The memory verdict in words.
    static func memoryText(_ verdict: Manifest.Verdict) -> String {
        let limit = Format.mebibytes(verdict.appMemoryLimitBytes)
        switch verdict.memory {
        case .fits:
            return "fits: \(Format.mebibytes(verdict.totalBytes)) within the default app memory limit of \(limit)"
        case .needsEntitlement:
            return "needs-entitlement: \(Format.mebibytes(verdict.totalBytes)) is over the default limit of \(limit), "
                + "within \(Format.mebibytes(verdict.increasedMemoryLimitBytes ?? 0)) with the entitlements "
                + verdict.entitlements.joined(separator: ", ")
        case .doesNotFit:
            let raised =
                verdict.increasedMemoryLimitBytes.map { " and \(Format.mebibytes($0)) with the entitlements" } ?? ""
            return "does-not-fit: \(Format.mebibytes(verdict.totalBytes)) is over \(limit)\(raised)"
        }
    }

    /// The Neural Engine verdict in words.
    static func neuralEngineText(_ verdict: Manifest.Verdict, labels: [Int: String] = [:]) -> String {
        let budget = Format.mebibytes(verdict.regionBudgetBytes)
        guard !verdict.regionsOverBudget.isEmpty else { return "all \(verdict.regions) regions within \(budget)" }
        let over = verdict.regionsOverBudget.map { index in labels[index].map { "\(index) (\($0))" } ?? "\(index)" }
        return "\(verdict.regionsOverBudget.count) of \(verdict.regions) regions over \(budget): "
            + over.joined(separator: ", ") + "; they fall back to a slower compute unit on device"
    }

    /// The summary of one compiled artifact.
    static func compiledLines(_ result: CompileResult) -> [String] {
        guard let compiled = result.manifest.compiled else { return ["wrote \(result.url.path)"] }
        let memory = compiled.memory
        let bytes = result.manifest.sizes.bundleBytes ?? 0
        let delta = compiled.sizeDeltaBytes
        var labels: [Int: String] = [:]
        for region in compiled.regions {
            if let first = region.firstLayer, let last = region.lastLayer {
                labels[region.index] = first == last ? "layer \(first)" : "layers \(first)–\(last)"
            } else {
                labels[region.index] = region.kind
            }
        }
        return ["wrote \(result.url.path)"]
            + Format.table(
                [
                    [
                        "device",
                        "\(compiled.architecture) (\(compiled.chip); \(compiled.platform) \(compiled.minDeploymentVersion)+)",
                    ],
                    [
                        "size",
                        "\(Format.megabytes(bytes)), \(delta >= 0 ? "+" : "-")\(Format.megabytes(abs(delta))) "
                            + "against the portable bundle",
                    ],
                    [
                        "regions",
                        "\(compiled.regions.count): "
                            + compiled.regions.map { labels[$0.index] ?? "" }.joined(separator: ", "),
                    ],
                    [
                        "memory",
                        "\(Format.mebibytes(memory.totalBytes)) = weights \(Format.mebibytes(memory.weightsBytes)) + KV "
                            + "\(Format.mebibytes(memory.kvCacheBytes)) + working \(Format.mebibytes(memory.workingBytes)) + "
                            + "tables \(Format.mebibytes(memory.tablesBytes))",
                    ],
                    ["verdict", memoryText(compiled.verdict)],
                    ["Neural Engine", neuralEngineText(compiled.verdict, labels: labels)],
                ], indent: "  ")
    }

    /// The verdict tables of `exporter plan`: devices offered ahead-of-time compilation, then
    /// those that specialise the portable bundle at first launch.
    /// The warnings of `verdicts` that are not plain fits, in the order the plan's tables show
    /// them: the devices offered ahead-of-time compilation first.
    static func warnings(_ verdicts: [Manifest.Verdict]) -> [String] {
        (verdicts.filter(\.aheadOfTime) + verdicts.filter { !$0.aheadOfTime }).flatMap(\.warnings)
    }

    static func planLines(_ verdicts: [Manifest.Verdict]) -> [String] {
        let compiled = verdicts.filter(\.aheadOfTime)
        let portable = verdicts.filter { !$0.aheadOfTime }
        var lines: [String] = []
        if !compiled.isEmpty {
            lines +=
                ["", "  compiled for each device (exporter compile; estimates: docs/DEVICES.md)"] + table(compiled)
        }
        if !portable.isEmpty {
            lines +=
                ["", "  the portable bundle, specialised at first launch (no ahead-of-time compilation)"]
                + table(portable)
        }
        return lines
    }

    private static func table(_ verdicts: [Manifest.Verdict]) -> [String] {
        var rows = [["device", "chip", "memory", "limit", "verdict", "Neural Engine"]]
        for verdict in verdicts {
            let limit =
                Format.mebibytes(verdict.appMemoryLimitBytes)
                + (verdict.increasedMemoryLimitBytes.map { " / \(Format.mebibytes($0))" } ?? "")
            let engine =
                verdict.regionsOverBudget.isEmpty
                ? "all \(verdict.regions) regions fit"
                : "regions \(verdict.regionsOverBudget.map(String.init).joined(separator: ", ")) over budget"
            rows.append([
                "\(verdict.architecture) \(verdict.platform)", verdict.chip, Format.mebibytes(verdict.totalBytes),
                limit,
                verdict.memory.rawValue, engine,
            ])
        }
        return Format.table(rows, rightAligned: [2], indent: "  ")
    }
}
