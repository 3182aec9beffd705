import ExporterKit
import Foundation

/// The summary printed once an export is written.
enum ExportSummary {
    /// What `exporter <model> --json` prints once everything is written: each artifact's path
    /// and manifest (`compiled` empty without `--compile`, `mlpackage` null without `--format mlpackage`).
    struct Report: Encodable {
        /// A compiled artifact.
        struct Compiled: Encodable {
            let artifact: String
            let manifest: Manifest
        }

        let bundle: String
        let manifest: Manifest
        let compiled: [Compiled]
        let mlpackage: ConvertCommand.Written?

        enum CodingKeys: String, CodingKey { case bundle, manifest, compiled, mlpackage }

        func encode(to encoder: Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(bundle, forKey: .bundle)
            try container.encode(manifest, forKey: .manifest)
            try container.encode(compiled, forKey: .compiled)
            // Null rather than absent: our JSON never omits a key.
            try container.encode(mlpackage, forKey: .mlpackage)
        }
    }

    static func lines(_ result: ExportResult) -> [String] {
        let manifest = result.manifest
        let bundleBytes = manifest.sizes.bundleBytes ?? 0
        var lines = [
            "wrote \(result.bundleURL.path)"
        ]
        if manifest.model.weights == "synthetic" {
            lines.append(
                "  SYNTHETIC WEIGHTS: generated for testing; this bundle computes nothing useful. Never ship it.")
        }
        lines += Format.table(
            [
                [
                    "bundle",
                    "\(Format.megabytes(bundleBytes)) (\(Format.mebibytes(bundleBytes))), \(Format.decimal(manifest.sizes.bitsPerWeight)) bits per weight",
                ],
                ["parameters", Format.grouped(manifest.parameters)],
                ["context", Format.count(manifest.contextLength, "token")],
                ["KV cache", "\(Format.mebibytes(manifest.kvCache.bytes)) (\(manifest.kvCache.dtype))"],
                ["memory (est.)", Format.mebibytes(manifest.memory.totalBytes)],
            ], indent: "  ")
        let worst = worstSQNR(manifest, count: 3)
        if !worst.isEmpty {
            lines.append("  lowest SQNR:")
            let rows: [[String]] = worst.map { [Format.decimal($0.sqnr) + " dB", $0.name] }
            lines += Format.table(rows, rightAligned: [0], indent: "    ")
        }
        return lines
    }

    /// The `count` tensors with the lowest SQNR, lowest first (ties by name).
    static func worstSQNR(_ manifest: Manifest, count: Int) -> [(name: String, sqnr: Double)] {
        var measured: [(name: String, sqnr: Double)] = []
        for tensor in manifest.tensors {
            if let sqnr = tensor.sqnrDB { measured.append((tensor.name, sqnr)) }
        }
        measured.sort { lhs, rhs in lhs.sqnr != rhs.sqnr ? lhs.sqnr < rhs.sqnr : lhs.name < rhs.name }
        return Array(measured.prefix(count))
    }
}
