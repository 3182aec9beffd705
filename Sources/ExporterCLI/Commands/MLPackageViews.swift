import ExporterKit
import Foundation

/// `inspect` and `verify` of a Core ML package (`.mlpackage`), through our manifest in it.
enum MLPackageViews {
    /// Whether `path` names a Core ML package.
    static func isPackage(_ path: String) -> Bool {
        URL(fileURLWithPath: path).pathExtension == "mlpackage"
    }

    /// `exporter inspect <package>`.
    static func inspect(_ url: URL, json: Bool, context: CommandContext) throws -> ExitStatus {
        let manifest = try MLPackageVerifier.readManifest(package: url)
        if json {
            context.writeOutput(try CanonicalJSON.string(manifest))
            return .success
        }
        context.print("\(manifest.name)  (Core ML package, \(manifest.architecture))")
        let ops = manifest.opCounts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        context.print(
            lines: Format.table(
                [
                    [
                        "package",
                        "\(Format.megabytes(manifest.packageBytes)) (\(Format.mebibytes(manifest.packageBytes)))",
                    ],
                    [
                        "target",
                        "\(manifest.deploymentTarget), specification \(manifest.specificationVersion), \(manifest.opset)",
                    ],
                    ["context", Format.count(manifest.contextLength, "token")],
                    [
                        "KV cache",
                        "\(Format.grouped(manifest.kvCacheBytes)) bytes (\(Format.mebibytes(manifest.kvCacheBytes))), two states",
                    ],
                    ["weights", "\(manifest.blobCount) blobs for \(manifest.tensors.count) tensors"],
                    ["program", "\(manifest.operationCount) operations"],
                    ["source", manifest.sourceBundle.name],
                ], indent: "  "))
        for line in wrap(ops, width: 76) { context.print("    " + line) }
        return .success
    }

    /// `exporter verify <package> [--bundle B]`: files, blob storage, and every blob against the
    /// bundle (by default the source bundle beside the package, when it is there).
    /// - Throws: `BundleError.artifactNotFound` when the package or the bundle given does not
    ///   exist (exit 66); every other failure is reported and ends in exit 1.
    static func verify(_ url: URL, bundle: URL?, json: Bool, context: CommandContext) throws -> ExitStatus {
        for given in [url] + (bundle.map { [$0] } ?? []) where !FileManager.default.fileExists(atPath: given.path) {
            throw BundleError.artifactNotFound(path: given.path)
        }
        var source = bundle
        if source == nil, let manifest = try? MLPackageVerifier.readManifest(package: url) {
            let beside = url.deletingLastPathComponent().appendingPathComponent(manifest.sourceBundle.name)
            if FileManager.default.fileExists(atPath: beside.path) { source = beside }
        }
        var report: MLPackageVerifier.Report?
        var failure: String?
        do {
            report = try MLPackageVerifier.verify(package: url, bundle: source)
        } catch let error as ExporterError {
            failure = error.description
        }
        if json {
            // The keys of a bundle's `verify --json`, with the package's own counts.
            var root = JSONObject()
            root["artifact"] = .string(url.path)
            root["bundle"] = source.map { .string($0.path) } ?? .null
            root["passed"] = .bool(failure == nil)
            root["files_checked"] = report.map { .number(String($0.filesChecked)) } ?? .null
            root["blobs_checked"] = report.map { .number(String($0.blobsChecked)) } ?? .null
            root["tensors_compared"] = report.map { .number(String($0.tensorsCompared)) } ?? .null
            root["failures"] = .array(
                failure.map {
                    [.object(JSONObject([("subject", .string(url.lastPathComponent)), ("reason", .string($0))]))]
                } ?? [])
            context.writeOutput(JSONWriter.string(.object(root)))
        } else if let report {
            var line = "verified \(url.path): \(report.filesChecked) files, \(report.blobsChecked) blobs"
            if let source {
                line += ", \(report.tensorsCompared) tensors equal to \(source.lastPathComponent)'s bit for bit"
            } else {
                line += "; not compared with a bundle (none beside it: pass --bundle)"
            }
            context.print(line)
        }
        if let failure { context.printError("Error: \(failure)") }
        return failure == nil ? .success : .verificationFailed
    }

    private static func wrap(_ text: String, width: Int) -> [String] {
        var lines: [String] = []
        var current = ""
        for word in text.split(separator: " ") {
            if !current.isEmpty, current.count + word.count + 1 > width {
                lines.append(current)
                current = ""
            }
            current += (current.isEmpty ? "" : " ") + word
        }
        if !current.isEmpty { lines.append(current) }
        return lines
    }
}
