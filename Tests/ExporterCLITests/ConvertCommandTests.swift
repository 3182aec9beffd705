import Foundation
import TestSupport
import Testing

@testable import ExporterCLI
@testable import ExporterKit

@Suite("command line: convert and --format mlpackage")
struct ConvertCommandTests {
    @Test("--format mlpackage writes the package beside the bundle; convert rewrites it identically")
    func formatAndConvert() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        let output = try Fixtures.temporaryDirectory()
        let run = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--context", "64", "--format",
            "mlpackage",
            "--output-dir", output.path,
        ])
        #expect(run.status == 0, "\(run.error)")
        let bundle = output.appendingPathComponent("tiny/Tiny.aimodel")
        let package = output.appendingPathComponent("tiny/Tiny.mlpackage")
        #expect(run.output.contains("wrote \(package.path)\n"))
        #expect(run.output.contains("iOS18, specification 9, opset CoreML8"))
        let weights = try Data(contentsOf: package.appendingPathComponent(MLPackageWriter.weightsPath))
        let converted = try Fixtures.temporaryDirectory().appendingPathComponent("Again.mlpackage")
        let convert = runExporter(["convert", bundle.path, "--to", "mlpackage", "--output", converted.path])
        #expect(convert.status == 0, "\(convert.error)")
        #expect(try Data(contentsOf: converted.appendingPathComponent(MLPackageWriter.weightsPath)) == weights)
        let again = runExporter(["convert", bundle.path])
        #expect(again.status == 73)
        #expect(again.error == "Error: '\(package.path)' already exists; pass --overwrite to replace it\n")
    }

    @Test("convert draws the weights written, then the tensors compared, on a terminal; nothing in a pipe")
    func progress() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        let output = try Fixtures.temporaryDirectory()
        let export = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--context", "64", "--output-dir",
            output.path,
        ])
        #expect(export.status == 0, "\(export.error)")
        let bundle = output.appendingPathComponent("tiny/Tiny.aimodel")
        let piped = runExporter(["convert", bundle.path])
        #expect(piped.status == 0 && piped.error.isEmpty, "\(piped.error)")
        let shown = runExporter(["convert", bundle.path, "--overwrite"], terminal: true)
        #expect(shown.status == 0, "\(shown.error)")
        let package = output.appendingPathComponent("tiny/Tiny.mlpackage")
        let manifest = try MLPackageVerifier.verify(package: package).manifest
        let weightBytes = try #require(manifest.files.first { $0.path == MLPackageWriter.weightsPath }?.bytes)
        let lines = shown.error.split(separator: "\r").map(String.init).filter { $0.contains("%") }
        let written = "100%  \(ProgressBar.bytes(weightBytes, of: weightBytes))  weights written  ETA 0s"
        let compared =
            "100%  \(manifest.tensors.count)/\(manifest.tensors.count) tensors compared with the bundle  ETA 0s"
        let writtenLine = try #require(lines.firstIndex { $0.contains(written) }, "\(lines)")
        let comparedLine = try #require(lines.firstIndex { $0.contains(compared) }, "\(lines)")
        #expect(writtenLine < comparedLine)
        #expect(shown.error.hasSuffix("\r\u{1B}[K"))
    }

    @Test("convert refuses an unknown target and a folder that is not a bundle")
    func refusals() throws {
        let folder = try Fixtures.temporaryDirectory()
        let wrongTarget = runExporter(["convert", folder.path, "--to", "onnx"])
        #expect(wrongTarget.status == 64)
        #expect(wrongTarget.error.contains("expected one of: mlpackage"))
        let notBundle = runExporter(["convert", folder.path])
        #expect(notBundle.status == 65)
        #expect(notBundle.error.hasPrefix("Error: '\(folder.path)' is not an exporter artifact"))
        // On a terminal an error first clears whatever progress line the failed step left.
        #expect(runExporter(["convert", folder.path], terminal: true).error == "\r\u{1B}[K" + notBundle.error)
    }
    @Test("convert refuses an --output without the .mlpackage extension, which inspect and verify would not know")
    func outputExtension() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        let output = try Fixtures.temporaryDirectory()
        let export = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--context", "64", "--output-dir",
            output.path,
        ])
        #expect(export.status == 0, "\(export.error)")
        let bundle = output.appendingPathComponent("tiny/Tiny.aimodel")
        let target = output.appendingPathComponent("mlp/noext").path
        let refused = runExporter(["convert", bundle.path, "--output", target])
        #expect(refused.status == 64)
        #expect(
            refused.error
                == "Error: --output expects a path ending in .mlpackage, got '\(target)'\n"
                + "Usage: exporter convert <bundle> [<options>]\n  See 'exporter convert --help' for more information.\n"
        )
        #expect(!FileManager.default.fileExists(atPath: output.appendingPathComponent("mlp").path))
        let written = output.appendingPathComponent("mlp/Model.mlpackage").path
        #expect(runExporter(["convert", bundle.path, "--output", written]).status == 0)
        #expect(runExporter(["verify", written]).status == 0)
        #expect(runExporter(["inspect", written]).status == 0)
    }
}
