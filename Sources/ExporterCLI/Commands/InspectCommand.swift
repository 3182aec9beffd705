import ExporterKit
import Foundation

/// `exporter inspect <artifact>`: what am I shipping, on one screen.
enum InspectCommand {
    static let spec = CommandSpec(
        name: "inspect",
        abstract: "Show what an artifact holds: model, sizes by group, KV cache, quality, verdicts.",
        discussion: "Reads the manifest of a bundle (.aimodel), a compiled artifact (.aimodelc) or a manifest.json "
            + "(also a plan's --json output). Nothing is recomputed: 'exporter verify' checks the files.",
        arguments: [
            .positional("artifact", help: "A .aimodel or .aimodelc folder, or a manifest.json."),
            .option("worst", valueName: "n", defaultValue: "5", help: "How many lowest-SQNR tensors to list."),
            .option("html", valueName: "file", help: "Also write a self-contained HTML report with charts."),
            .flag("json", help: "Print the summary as JSON."),
        ])

    static func run(_ arguments: ParsedArguments, context: CommandContext) throws -> ExitStatus {
        guard let path = arguments.positional(0) else { throw UsageError.missingArgument("artifact") }
        let worst = try arguments.int("worst", range: 0...) ?? 5
        if MLPackageViews.isPackage(path) {
            for option in ["html", "worst"] where arguments.isGiven(option) {
                throw UsageError.validation(
                    "--\(option) applies to bundles, compiled artifacts and manifests, not a Core ML package")
            }
            return try MLPackageViews.inspect(
                context.fileURL(path), json: arguments.flag("json"),
                context: context)
        }
        let artifact = try LoadedArtifact(
            url: context.fileURL(path), displayPath: path)
        let summary = InspectionSummary(artifact: artifact, worst: worst)
        if let html = arguments.value("html") {
            let url = context.fileURL(html)
            try OutputFile.checkReportDestination(url, artifact: artifact.givenAsFolder ? artifact.folder : nil)
            do {
                try Data(summary.html().utf8).write(to: url, options: .atomic)
            } catch {
                throw BundleError.writeFailed(path: url.path, reason: fileSystemFailureReason(error))
            }
            if !arguments.flag("json") { context.printError("wrote \(html)") }
        }
        if arguments.flag("json") {
            context.writeOutput(JSONWriter.string(summary.json))
        } else {
            context.print(lines: InspectPrinter.lines(summary))
        }
        return .success
    }
}
