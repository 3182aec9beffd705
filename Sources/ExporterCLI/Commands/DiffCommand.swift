import ExporterKit
import Foundation

/// `exporter diff <a> <b>`: what changed between two artifacts or manifests; with thresholds,
/// a release gate.
enum DiffCommand {
    static let spec = CommandSpec(
        name: "diff",
        abstract: "Compare two artifacts or manifests; with thresholds, fail on a regression.",
        discussion: "Shows sizes in all and per group, bits per weight, context, KV cache, memory, device verdicts and "
            + "every tensor whose storage or SQNR changed. With --max-size-growth, --max-memory-growth, --min-sqnr-drop "
            + "or --no-verdict-regression, exits 1 when <b> regresses from <a> beyond them, so it can gate a release in "
            + "CI.",
        arguments: [
            .positional("a", help: "The earlier artifact folder or manifest.json."),
            .positional("b", help: "The later artifact folder or manifest.json."),
            .option(
                "max-size-growth", valueName: "pct",
                help: "Fail when the size on disk grows by more than this percentage."),
            .option(
                "max-memory-growth", valueName: "pct",
                help: "Fail when the memory a device needs (weights, KV cache, working memory) grows by more than this "
                    + "percentage."),
            .option(
                "min-sqnr-drop", valueName: "dB", help: "Fail when a tensor's SQNR falls by more than this many dB."),
            .flag(
                "no-verdict-regression",
                help: "Fail when a device's memory verdict gets worse (fits → needs-entitlement → does-not-fit)."),
            .option("tensors", valueName: "n", defaultValue: "20", help: "How many changed tensors to list."),
            .flag("json", help: "Print the differences as JSON."),
        ])

    static func run(_ arguments: ParsedArguments, context: CommandContext) throws -> ExitStatus {
        guard let first = arguments.positional(0) else { throw UsageError.missingArgument("a") }
        guard let second = arguments.positional(1) else { throw UsageError.missingArgument("b") }
        let gate = ManifestDiff.ReleaseGate(
            maxSizeGrowthPercent: try arguments.number("max-size-growth", minimum: 0),
            maxMemoryGrowthPercent: try arguments.number("max-memory-growth", minimum: 0),
            maxSQNRDrop: try arguments.number("min-sqnr-drop", minimum: 0),
            verdictsMustHold: arguments.flag("no-verdict-regression"))
        let listed = try arguments.int("tensors", range: 0...) ?? 20
        func load(_ path: String) throws -> LoadedArtifact {
            guard !MLPackageViews.isPackage(path) else {
                throw UsageError.validation(
                    "diff compares bundles, compiled artifacts and manifests; for the Core ML package '\(path)', diff the bundle it was converted from"
                )
            }
            return try LoadedArtifact(
                url: context.fileURL(path), displayPath: path)
        }
        let diff = ManifestDiff(before: try load(first), after: try load(second))
        let regressions = diff.regressions(gate)
        if arguments.flag("json") {
            context.writeOutput(JSONWriter.string(json(diff, regressions: regressions)))
        } else {
            context.print(lines: lines(diff, listed: listed, gated: !gate.isEmpty, passed: regressions.isEmpty))
        }
        for regression in regressions { context.printError("Error: \(regression)") }
        return regressions.isEmpty ? .success : .verificationFailed
    }

    static func text(_ value: Double?, of quantity: ManifestDiff.Quantity) -> String {
        guard let value else { return "—" }
        if quantity.isRatio { return Format.decimal(value) }
        if quantity.isBytes, abs(value) < 9e18 { return Format.grouped(Int(value)) }
        return value == value.rounded() && abs(value) < 1e15 ? Format.grouped(Int(value)) : Format.decimal(value)
    }

    static func change(_ quantity: ManifestDiff.Quantity) -> String {
        guard quantity.changed else { return "=" }
        guard let delta = quantity.delta else { return "" }
        let sign = delta > 0 ? "+" : ""
        var result = sign + text(delta, of: quantity)
        if let percent = quantity.percent { result += " (\(sign)\(Format.decimal(percent))%)" }
        return result
    }

    static func lines(_ diff: ManifestDiff, listed: Int, gated: Bool, passed: Bool) -> [String] {
        var lines = ["a: \(diff.beforeName)", "b: \(diff.afterName)", ""]
        lines += Format.table(
            [["", "a", "b", "change"]]
                + diff.quantities.map {
                    [$0.field, text($0.before, of: $0), text($0.after, of: $0), change($0)]
                },
            rightAligned: [1, 2, 3], indent: "  ")
        if !diff.textChanges.isEmpty {
            lines.append("")
            lines += Format.table(
                [["changed", "a", "b"]] + diff.textChanges.map { [$0.field, $0.before ?? "—", $0.after ?? "—"] },
                indent: "  ")
        }
        lines.append("")
        if diff.tensorChanges.isEmpty {
            lines.append("  no tensor changed")
        } else {
            var rows = [["tensor", "storage", "SQNR a", "SQNR b"]]
            for change in diff.tensorChanges.prefix(listed) {
                let storage =
                    change.storageBefore == change.storageAfter
                    ? change.storageAfter ?? "—" : "\(change.storageBefore ?? "—") → \(change.storageAfter ?? "—")"
                rows.append([
                    change.name, storage, ManifestDiff.decibels(change.sqnrBefore),
                    ManifestDiff.decibels(change.sqnrAfter),
                ])
            }
            lines += Format.table(rows, rightAligned: [2, 3], indent: "  ")
            if diff.tensorChanges.count > listed {
                lines.append("  … and \(diff.tensorChanges.count - listed) more tensor(s) (--tensors N lists more)")
            }
        }
        if gated { lines.append(passed ? "release gate: passed" : "release gate: failed") }
        return lines
    }

    static func json(_ diff: ManifestDiff, regressions: [String]) -> JSONValue {
        func number(_ value: Double?) -> JSONValue {
            guard let value, value.isFinite else { return .null }
            // A whole number as one; any other in the shortest form that reads back as the same double.
            return .number(value == value.rounded() && abs(value) < 1e15 ? String(Int(value)) : "\(value)")
        }
        var root = JSONObject()
        root["a"] = .string(diff.beforeName)
        root["b"] = .string(diff.afterName)
        root["quantities"] = .array(
            diff.quantities.map {
                .object(
                    JSONObject([
                        ("field", .string($0.field)), ("a", number($0.before)), ("b", number($0.after)),
                        ("delta", number($0.delta)),
                        ("percent", number($0.percent)),
                    ]))
            })
        root["changed"] = .array(
            diff.textChanges.map {
                .object(
                    JSONObject([
                        ("field", .string($0.field)), ("a", $0.before.map { .string($0) } ?? .null),
                        ("b", $0.after.map { .string($0) } ?? .null),
                    ]))
            })
        root["tensors"] = .array(
            diff.tensorChanges.map { change in
                .object(
                    JSONObject([
                        ("name", .string(change.name)),
                        ("storage_a", change.storageBefore.map { .string($0) } ?? .null),
                        ("storage_b", change.storageAfter.map { .string($0) } ?? .null),
                        ("bytes_a", number(change.bytesBefore.map(Double.init))),
                        ("bytes_b", number(change.bytesAfter.map(Double.init))),
                        // An exactly stored tensor (infinite SQNR, `exact` in the text) is null, as
                        // in the manifest's `sqnr_db` and `verify --json`: a number or null, never a string.
                        ("sqnr_db_a", number(change.sqnrBefore)),
                        ("sqnr_db_b", number(change.sqnrAfter)),
                    ]))
            })
        root["regressions"] = .array(regressions.map { .string($0) })
        return .object(root)
    }
}
