import Foundation
import Testing
import TestSupport
@testable import ExporterCLI
@testable import ExporterKit

@Suite("command line: convert and --format mlpackage")
struct ConvertCommandTests {
    @Test("--format mlpackage writes the package beside the bundle; convert rewrites it identically")
    func formatAndConvert() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        let output = try Fixtures.temporaryDirectory()
        let run = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--context", "64", "--format", "mlpackage",
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

    @Test("convert refuses an unknown target and a folder that is not a bundle")
    func refusals() throws {
        let folder = try Fixtures.temporaryDirectory()
        let wrongTarget = runExporter(["convert", folder.path, "--to", "onnx"])
        #expect(wrongTarget.status == 64)
        #expect(wrongTarget.error.contains("expected one of: mlpackage"))
        let notBundle = runExporter(["convert", folder.path])
        #expect(notBundle.status == 65)
        #expect(notBundle.error.hasPrefix("Error: '\(folder.path)' is not an exporter artifact"))
    }
}
