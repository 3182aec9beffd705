import Foundation
import TestSupport
import Testing

@testable import ExporterCLI
@testable import ExporterKit

@Suite("command line: convert and --format mlpackage")
struct ConvertCommandTests {
    /// A tiny qwen3 exported at 64 tokens: the output folder and the bundle in it.
    private func tinyBundle() throws -> (output: URL, bundle: URL) {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        let output = try Fixtures.temporaryDirectory()
        let export = runExporter([
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--context", "64", "--output-dir",
            output.path,
        ])
        #expect(export.status == 0, "\(export.error)")
        return (output, output.appendingPathComponent("tiny/Tiny.aimodel"))
    }

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
        let (output, bundle) = try tinyBundle()
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

    @Test("convert compares the package with the bundle before publishing it: meanwhile, nothing is at its path")
    func comparedBeforePublishing() throws {
        let (output, bundle) = try tinyBundle()
        let package = output.appendingPathComponent("tiny/Tiny.mlpackage")
        // Whether the package was at its path each time the comparison's progress was drawn.
        let published = Locked<[Bool]>([])
        let context = CommandContext(
            arguments: ["convert", bundle.path],
            environment: ["HOME": "/nonexistent-home", "EXPORTER_PRESETS": Fixtures.presetsDirectory.path],
            currentDirectory: URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true),
            executable: URL(fileURLWithPath: "/nonexistent/exporter"), writeOutput: { _ in },
            writeError: { text in
                guard text.contains("tensors compared") else { return }
                published.mutate { $0.append(FileManager.default.fileExists(atPath: package.path)) }
            }, errorIsTerminal: true)
        #expect(ExporterCommandLine.run(context) == 0)
        #expect(!published.value.isEmpty && !published.value.contains(true), "\(published.value)")
        #expect(FileManager.default.fileExists(atPath: package.path))
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
        let (output, bundle) = try tinyBundle()
        // No extension, no name, a hidden name, a name its staging folder could not hold.
        let names = ["noext", ".mlpackage", ".hidden.mlpackage", String(repeating: "m", count: 129) + ".mlpackage"]
        for name in names {
            let target = output.appendingPathComponent("mlp/" + name).path
            let refused = runExporter(["convert", bundle.path, "--output", target])
            #expect(refused.status == 64)
            #expect(
                refused.error
                    == "Error: --output expects a path ending in <name>.mlpackage, the name not hidden and at most "
                    + "128 bytes, got '\(target)'\n"
                    + "Usage: exporter convert <bundle> [<options>]\n  See 'exporter convert --help' for more information.\n"
            )
        }
        #expect(!FileManager.default.fileExists(atPath: output.appendingPathComponent("mlp").path))
        let written = output.appendingPathComponent("mlp/Model.mlpackage").path
        #expect(runExporter(["convert", bundle.path, "--output", written]).status == 0)
        #expect(runExporter(["verify", written]).status == 0)
        #expect(runExporter(["inspect", written]).status == 0)
    }

    @Test(
        "convert, and an export or plan with --format mlpackage, refuse a package the disk cannot hold, writing nothing"
    )
    func diskSpace() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let plan = try Fixtures.plan(checkpoint)
        let bundleBytes = plan.estimatedBundleBytes(
            copiedFileBytes: ExportRunner.copiedFileBytes(
                of: plan, tokenizer: try ExportRunner.tokenizer(of: plan, synthetic: false)))
        let packageBytes = try MLPackageWriter.packageBytes(plan: plan)
        let output = try Fixtures.temporaryDirectory()
        let export = [checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path]
        // Room for the bundle but not for its package too: refused before the export starts, and by the plan.
        let short = bundleBytes + packageBytes - 1
        let message = ResourceError.notEnoughDisk(
            directory: output.path, neededBytes: bundleBytes + packageBytes, availableBytes: short,
            what: .bundleAndPackage(compiledArtifacts: false)
        ).description
        #expect(message.hasPrefix("the bundle and its Core ML package need about "))
        #expect(message.hasSuffix("free; free some space or choose another --output-dir"))
        for command in [export, ["plan"] + export] {
            let refused = runExporter(
                command + ["--format", "mlpackage"], environment: ["EXPORTER_TEST_AVAILABLE_DISK": String(short)])
            #expect(refused.status == 71)
            #expect(refused.error == "Error: \(message)\n")
        }
        // With --compile too, the compiled artifacts count as well.
        let withCompile = runExporter(
            export + ["--format", "mlpackage", "--compile"],
            environment: ["EXPORTER_TEST_AVAILABLE_DISK": String(bundleBytes + packageBytes)])
        #expect(withCompile.status == 71)
        #expect(
            withCompile.error.hasPrefix("Error: the bundle, its compiled artifacts and its Core ML package need about ")
        )
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == [])
        let room = ["EXPORTER_TEST_AVAILABLE_DISK": String(bundleBytes + packageBytes)]
        #expect(runExporter(["plan"] + export + ["--format", "mlpackage"], environment: room).status == 0)
        let exported = runExporter(export + ["--format", "mlpackage"], environment: room)
        #expect(exported.status == 0, "\(exported.error)")

        // convert counts the package alone, exactly, in the folder it is written to.
        let bundle = output.appendingPathComponent("tiny/Tiny.aimodel")
        let folder = try Fixtures.temporaryDirectory()
        let destination = folder.appendingPathComponent("Tiny.mlpackage").path
        let refused = runExporter(
            ["convert", bundle.path, "--output", destination],
            environment: ["EXPORTER_TEST_AVAILABLE_DISK": String(packageBytes - 1)])
        #expect(refused.status == 71)
        #expect(
            refused.error
                == "Error: the Core ML package needs about \(Format.mebibytes(packageBytes)) but '\(folder.path)' has "
                + "\(Format.mebibytes(packageBytes - 1)) free; free some space or choose another --output\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path) == [])
        let tiny = runExporter(
            ["convert", bundle.path, "--overwrite"], environment: ["EXPORTER_TEST_AVAILABLE_DISK": "1000"])
        #expect(tiny.status == 71)
        #expect(tiny.error.hasPrefix("Error: the Core ML package needs about "))
        let converted = runExporter(
            ["convert", bundle.path, "--output", destination],
            environment: ["EXPORTER_TEST_AVAILABLE_DISK": String(packageBytes)])
        #expect(converted.status == 0, "\(converted.error)")
    }
}
