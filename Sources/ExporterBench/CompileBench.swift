import Dispatch
import ExporterKit
import Foundation

/// Compiling a Qwen2.5-1.5B-shaped synthetic bundle for every eligible iOS architecture, against
/// `cat` of the bundle into a file (the cost of moving its bytes once). The target is at most 2×.
///
/// `exporter-bench compile [--dir DIR] [--presets DIR]`: the bundle is exported once into DIR
/// (default `bench-work`) and reused.
enum CompileBench {
    static func run(_ arguments: [String]) throws {
        func option(_ name: String) -> String? {
            guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
            return arguments[index + 1]
        }
        let work = URL(fileURLWithPath: option("--dir") ?? "bench-work", isDirectory: true).standardizedFileURL
        let presets = URL(fileURLWithPath: option("--presets") ?? "Presets", isDirectory: true).standardizedFileURL
        let catalog = try PresetCatalog(directory: presets)
        let resolver = ModelResolver(catalog: catalog, locateInCache: { _ in nil }, cacheDescription: { _ in "none" })
        let plan = try ExportPlan.make(options: ExportOptions(model: "qwen2.5-1.5b"), resolver: resolver)
        let bundleURL = ExportRunner.bundleURL(for: plan, in: work)
        if (try? BundleReader(url: bundleURL, verifyFiles: false)) == nil {
            print("exporting a synthetic \(plan.outputName) bundle into \(work.path) (once)…")
            var settings = ExportSettings(outputDirectory: work)
            settings.syntheticSeed = 1
            settings.overwrite = true
            _ = try ExportRunner.run(plan, settings: settings)
        }
        let bundleFiles = try FileManager.default.subpathsOfDirectory(atPath: bundleURL.path).sorted()
            .map { bundleURL.appendingPathComponent($0) }
            .filter { (try? $0.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true }
        let bundleBytes = try bundleFiles.reduce(0) {
            $0 + (try $1.resourceValues(forKeys: [.fileSizeKey]).fileSize ?? 0)
        }
        let table = try DeviceTable.load(presetsDirectory: presets)
        let devices = table.eligible(for: .iOS)
        let output = work.appendingPathComponent("compiled", isDirectory: true)
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)

        // Warm the page cache, then take the best of three for each measurement. Before each run
        // (untimed) the previous output is removed and dirty pages are flushed, so that every run
        // starts from the same state and pays for its own writeback.
        _ = try shell("cat " + bundleFiles.map { "'\($0.path)'" }.joined(separator: " ") + " > /dev/null")
        let copy = work.appendingPathComponent("cat-copy.bin").path
        let catSeconds = try best(of: 3, prepare: { _ = try shell("rm -f '\(copy)' && sync") }) {
            _ = try shell(
                "cat " + bundleFiles.map { "'\($0.path)'" }.joined(separator: " ") + " > '\(copy)' && sync '\(copy)'")
        }
        try? FileManager.default.removeItem(atPath: copy)
        print(
            "bundle: \(bundleURL.lastPathComponent), \(bundleBytes) bytes; cat into a file (and sync): \(format(catSeconds)) s"
        )
        print("")
        print(row(["arch", "seconds", "ratio to cat", "artifact bytes", "regions", "verdict"]))
        for device in devices {
            let request = CompileRequest(
                platform: .iOS, devices: [device], minimumDeploymentVersion: .minimum, outputDirectory: output)
            let artifact = Compiler.artifactURL(name: plan.outputName, device: device, in: output).path
            var result: CompileResult?
            let seconds = try best(of: 3, prepare: { _ = try shell("rm -rf '\(artifact)' && sync") }) {
                result = try Compiler.compile(bundleURL: bundleURL, request: request).first
            }
            let compiled = result?.manifest.compiled
            print(
                row([
                    device.id, format(seconds), format(seconds / catSeconds),
                    "\(result?.manifest.sizes.bundleBytes ?? 0)",
                    "\(compiled?.regions.count ?? 0)", compiled?.verdict.memory.rawValue ?? "",
                ]))
        }
    }

    private static func best(of runs: Int, prepare: () throws -> Void, _ body: () throws -> Void) throws -> Double {
        var fastest = Double.infinity
        for _ in 0..<runs {
            try prepare()
            let start = DispatchTime.now().uptimeNanoseconds
            try body()
            fastest = min(fastest, Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
        }
        return fastest
    }

    private static func shell(_ command: String) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }

    private static func format(_ value: Double) -> String { String(format: "%.3f", value) }

    private static func row(_ cells: [String]) -> String {
        cells.enumerated().map { index, cell in
            let width = [6, 9, 13, 15, 8, 18][min(index, 5)]
            return index == 0
                ? cell.padding(toLength: width, withPad: " ", startingAt: 0)
                : String(repeating: " ", count: max(0, width - cell.count)) + cell
        }.joined(separator: " ")
    }
}
