import Dispatch
import ExporterKit
import Foundation

/// The main job's speed: exporting the Qwen2.5-1.5B-shaped synthetic BF16 checkpoint of
/// `exporter-bench read` (written first if absent) from its safetensors files, against `cat`
/// of the same files in the same run, with the peak resident memory of each export.
///
/// `exporter-bench export [--dir D]`: per grouped channel (the preset's group 8, and 32) and
/// per tensor, so the grouped modes' throughput can be compared with per tensor.
enum ExportBench {
    static func run(_ arguments: [String]) throws {
        var root = URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent("bench-work")
        if let index = arguments.firstIndex(of: "--dir"), index + 1 < arguments.count {
            root = URL(fileURLWithPath: arguments[index + 1])
        }
        try ReadBench.run(["--dir", root.path, "--ensure-only"])
        let checkpoint = root.appendingPathComponent("qwen2.5-1.5b-bf16")
        let presets = URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent("Presets")
        let catalog = try PresetCatalog(directory: presets)
        let config = checkpoint.appendingPathComponent("config.json")
        if !FileManager.default.fileExists(atPath: config.path) {
            guard let preset = catalog.preset(named: "qwen2.5-1.5b-instruct") else { throw ReadBenchError("no preset") }
            try FileManager.default.copyItem(at: preset.configURL, to: config)
        }
        let perTensorConfig = root.appendingPathComponent("4bit_per_tensor.json")
        try Data(
            #"{"schema": "exporter.compression/1", "name": "4bit_per_tensor", "rules": [], "default": {"mode": "palettize", "bits": 4, "granularity": "per_tensor"}}"#
                .utf8
        ).write(to: perTensorConfig)
        let resolver = ModelResolver(
            catalog: catalog, locateInCache: { _ in nil }, cacheDescription: { $0 })
        let files = try CheckpointWeights(directory: checkpoint).files.map(\.url.path)
        let inputBytes = files.compactMap { try? FileManager.default.attributesOfItem(atPath: $0)[.size] as? Int }.reduce(0, +)
        _ = try ReadBench.catFiles(files)
        let catSeconds = try (0..<3).map { _ in try ReadBench.catFiles(files) }.min() ?? 0
        print(String(format: "input %.2f GB in %d files; cat %.3f s; %d cores", Double(inputBytes) / 1e9, files.count,
                     catSeconds, ProcessInfo.processInfo.activeProcessorCount))
        print("mode                         seconds   × cat   params/s    bundle MB   peak RSS")
        let output = root.appendingPathComponent("export-out")
        for (label, compression) in [
            ("4-bit LUT group 8 (preset)", CompressionChoice.automatic),
            ("4-bit LUT group 32", .named("4bit_weight_palettized_group32")),
            ("4-bit LUT per tensor", .file(perTensorConfig)),
        ] {
            var options = ExportOptions(model: checkpoint.path)
            options.presetOverride = "qwen2.5-1.5b-instruct"
            options.compression = compression
            let plan = try ExportPlan.make(options: options, resolver: resolver)
            var settings = ExportSettings(outputDirectory: output)
            settings.overwrite = true
            ReadBench.resetPeakResidentMemory()
            let start = DispatchTime.now()
            let result = try ExportRunner.run(plan, settings: settings)
            let elapsed = ReadBench.seconds(since: start)
            let peak = ReadBench.peakResidentBytes().map { "\($0 >> 20) MiB" } ?? "n/a"
            print(
                ReadBench.pad(label, 28)
                    + String(
                        format: " %7.2f  %6.2f  %9.0fM  %10.1f   %@", elapsed, elapsed / catSeconds,
                        Double(plan.parameters) / elapsed / 1e6, Double(result.manifest.sizes.bundleBytes ?? 0) / 1e6, peak))
        }
    }
}
