import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("hostile inputs: failing writes through the command line")
struct FaultSweepTests {
    /// Every file and folder under `folder`, relative, sorted.
    private func contents(of folder: URL) -> [String] {
        ((FileManager.default.enumerator(atPath: folder.path)?.allObjects as? [String]) ?? []).sorted()
    }

    /// The message a failure of `faults` must print, or nil when it must be a short write.
    private func expectMessage(_ run: CommandLineRun, _ faults: FaultInjector, under output: URL, _ label: String)
        throws
    {
        #expect(run.status == 74, "\(label): \(run.error)")
        let injected = try #require(faults.injected, "\(label): no fault was injected")
        #expect(injected.path.hasPrefix(output.path + "/"), "\(label): \(injected.path)")
        #expect(!injected.path.contains(ArtifactDirectory.stagingPrefix), "\(label): names the staging folder")
        let prefix = "Error: cannot write '\(injected.path)': "
        if faults.kind == .shortWrite {
            #expect(run.error.hasPrefix(prefix + "short write ("), "\(label): \(run.error)")
            #expect(run.error.hasSuffix(" bytes written)\n"), "\(label): \(run.error)")
        } else {
            #expect(run.error == prefix + faults.reason + "\n", "\(label)")
        }
    }

    @Test(
        "for every kind of failure at every operation: exit 74 naming the path, the old bundle intact, no leftovers",
        arguments: FaultKind.allCases)
    func sweep(_ kind: FaultKind) throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: output) }
        let arguments = [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
        ]
        let first = runExporter(arguments)
        #expect(first.status == 0, "\(first.error)")
        let bundle = output.appendingPathComponent("tiny/Tiny.aimodel")
        let goodManifest = try Data(contentsOf: bundle.appendingPathComponent("manifest.json"))
        let goodWeights = try Data(contentsOf: bundle.appendingPathComponent("weights.bin"))

        // Replacing a good bundle: count the operations, then fail each one in turn.
        let counter = FaultInjector(failAtOperation: Int.max, kind: kind)
        #expect(runExporter(arguments + ["--overwrite"], faults: counter).status == 0)
        #expect(counter.operations > 0)
        for failing in 1...counter.operations {
            let faults = FaultInjector(failAtOperation: failing, kind: kind)
            let run = runExporter(arguments + ["--overwrite"], faults: faults)
            try expectMessage(run, faults, under: output, "\(kind) at \(failing) of \(counter.operations)")
            #expect(
                contents(of: output.appendingPathComponent("tiny")).filter { !$0.hasPrefix("Tiny.aimodel/") }
                    == ["Tiny.aimodel"], "\(kind) at \(failing)")
            #expect(try Data(contentsOf: bundle.appendingPathComponent("manifest.json")) == goodManifest)
            #expect(try Data(contentsOf: bundle.appendingPathComponent("weights.bin")) == goodWeights)
            _ = try BundleReader(url: bundle)
        }

        // Writing a first bundle: nothing may be left at all.
        let fresh = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: fresh) }
        let freshArguments = Array(arguments.dropLast()) + [fresh.path]
        let freshCounter = FaultInjector(failAtOperation: Int.max, kind: kind)
        let counted = runExporter(freshArguments, faults: freshCounter)
        #expect(counted.status == 0, "\(counted.error)")
        try FileManager.default.removeItem(at: fresh.appendingPathComponent("tiny"))
        for failing in 1...freshCounter.operations {
            let faults = FaultInjector(failAtOperation: failing, kind: kind)
            let run = runExporter(freshArguments, faults: faults)
            try expectMessage(run, faults, under: fresh, "fresh \(kind) at \(failing) of \(freshCounter.operations)")
            let left = contents(of: fresh)
            #expect(left.isEmpty || left == ["tiny"], "fresh \(kind) at \(failing) left \(left)")
            try? FileManager.default.removeItem(at: fresh.appendingPathComponent("tiny"))
        }
    }

    @Test("operations counted per kind: a short write strikes writes only, permission denied creations and renames")
    func operationsPerKind() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let output = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: output) }
        let arguments = [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir", output.path,
        ]
        var counts: [FaultKind: Int] = [:]
        // Every counted run replaces a bundle.
        #expect(runExporter(arguments).status == 0)
        for kind in FaultKind.allCases {
            let counter = FaultInjector(failAtOperation: Int.max, kind: kind)
            #expect(runExporter(arguments + ["--overwrite"], faults: counter).status == 0)
            counts[kind] = counter.operations
        }
        // Folders: staging (+ tokenizer/); files: weights, graph, config, tokenizer, manifest; renames: one
        // exchange with the old bundle, or where the file system cannot, the exchange tried then
        // two renames (aside, into place).
        let renames = ArtifactDirectory.exchangesAtomically(in: output) ? 1 : 3
        #expect(counts[.permissionDenied] == 2 + 5 + renames)
        #expect(counts[.shortWrite] == 5)
        #expect(counts[.noSpace] == counts[.ioError])
        #expect(counts[.noSpace] == 2 + 5 + 5 + 5 + renames)
    }
}
