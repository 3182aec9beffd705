import ExporterKit
import Foundation

/// `exporter convert <bundle.aimodel> --to mlpackage`: another format from a portable bundle.
enum ConvertCommand {
    /// The formats a bundle converts to.
    enum Target: String, CaseIterable {
        case mlpackage
    }

    static let spec = CommandSpec(
        name: "convert",
        abstract: "Convert a portable .aimodel bundle to another format.",
        discussion: "mlpackage: a Core ML package (iOS 18 ML program with a stateful KV cache) that Apple's runtime "
            + "loads; palettised and int8 weights stay compressed, byte for byte the bundle's. "
            + "Written beside the bundle as <Name>.mlpackage unless --output is given.",
        arguments: [
            .positional("bundle", help: "A <Name>.aimodel bundle folder."),
            .option(
                "to", choices: Target.allCases.map(\.rawValue), defaultValue: "mlpackage", help: "The target format."),
            .option(
                "output", valueName: "path",
                help: "The package to write, ending in .mlpackage (default: beside the bundle)."),
            .flag("overwrite", help: "Replace an existing package."),
            .flag("json", help: "Print the package's manifest and what was verified as JSON."),
        ])

    static func run(_ arguments: ParsedArguments, context: CommandContext) throws -> ExitStatus {
        guard let path = arguments.positional(0) else { throw UsageError.missingArgument("bundle") }
        _ = try arguments.choice("to", as: Target.self)
        let bundle = context.fileURL(path)
        // `inspect` and `verify` know a package by its extension: one written without it would
        // be refused by them, so it is not written.
        if let output = arguments.value("output") {
            let name = URL(fileURLWithPath: output).deletingPathExtension().lastPathComponent
            // As an artifact's name: not empty, not hidden, within 128 bytes (its staging folder's name).
            guard MLPackageViews.isPackage(output), !name.isEmpty, !name.hasPrefix("."),
                name.utf8.count <= ExportPlan.longestName
            else {
                throw UsageError.invalidValue(
                    value: output, option: "--output",
                    expected: "a path ending in <name>.mlpackage, the name not hidden and at most "
                        + "\(ExportPlan.longestName) bytes")
            }
        }
        let destination =
            arguments.value("output").map {
                context.fileURL($0)
            } ?? MLPackageWriter.defaultDestination(forBundle: bundle)
        let json = arguments.flag("json")
        // Read before the threads are tried and the bundle is opened: the forecast counts from
        // here. An export's `--format mlpackage` is covered by the export's own check.
        let availableMemory = context.availableMemory(startingThreads: WorkerThreads.convert())
        try WorkerThreads.check(WorkerThreads.convert())
        try MLPackageWriter.checkMemory(beforeOpening: bundle, available: availableMemory)
        try write(
            bundle: bundle, to: destination, overwrite: arguments.flag("overwrite"), output: json ? .json : .text,
            context: context)
        return .success
    }

    /// A package written and verified, as `--json` gives it.
    struct Written: Encodable {
        /// Where it is.
        let package: String
        /// Its manifest (docs/MANIFEST.md, the package manifest).
        let manifest: MLPackageManifest
        let filesChecked: Int
        let blobsChecked: Int
        /// Tensors whose blobs equal the bundle's.
        let tensorsCompared: Int

        enum CodingKeys: String, CodingKey {
            case package, manifest
            case filesChecked = "files_checked"
            case blobsChecked = "blobs_checked"
            case tensorsCompared = "tensors_compared"
        }
    }

    /// Writes the package (refused, before anything is written, when the free space of its
    /// folder's volume cannot hold it), reads it back against the bundle before publishing it,
    /// and prints what it holds (as text, JSON, or not at all).
    /// - Throws: the writer's and the verifier's errors.
    @discardableResult
    static func write(
        bundle: URL, to destination: URL, overwrite: Bool, output: OutputStyle, context: CommandContext
    ) throws -> Written {
        let report = try MLPackageWriter.write(
            bundle: bundle, to: destination, overwrite: overwrite,
            availableDiskBytes: context.availableDiskBytes(at: destination.deletingLastPathComponent()),
            progress: ProgressBar(context: context).update,
            checkingBeforePublishing: {
                try MLPackageVerifier.verify(
                    package: $0, bundle: bundle, progress: ProgressBar(context: context).update)
            }
        ).checked
        let written = Written(
            package: destination.path, manifest: report.manifest, filesChecked: report.filesChecked,
            blobsChecked: report.blobsChecked, tensorsCompared: report.tensorsCompared)
        switch output {
        case .text: context.print(lines: summary(report, at: destination))
        case .json: context.writeOutput(try CanonicalJSON.string(written))
        case .none: break
        }
        return written
    }

    /// The lines printed once a package is written and verified.
    static func summary(_ report: MLPackageVerifier.Report, at url: URL) -> [String] {
        let manifest = report.manifest
        return ["wrote \(url.path)"]
            + Format.table(
                [
                    [
                        "package",
                        "\(Format.megabytes(manifest.packageBytes)) (\(Format.mebibytes(manifest.packageBytes)))",
                    ],
                    [
                        "target",
                        "\(manifest.deploymentTarget), specification \(manifest.specificationVersion), opset \(manifest.opset)",
                    ],
                    ["program", "\(manifest.operationCount) ops, \(manifest.blobCount) weight blobs"],
                    ["KV cache", "\(Format.mebibytes(manifest.kvCacheBytes)) in 2 states"],
                    [
                        "verified",
                        "\(report.filesChecked) files, \(report.blobsChecked) blobs, \(report.tensorsCompared) tensors equal to the bundle's",
                    ],
                ], indent: "  ")
    }
}
