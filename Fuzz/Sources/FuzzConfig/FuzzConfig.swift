import Foundation
import ExporterKit
import FuzzSupport

/// The repository's presets, for the resolver (this file is `Fuzz/Sources/FuzzConfig/…`).
let presets = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Presets")
let resolver: ModelResolver? = (try? PresetCatalog(directory: presets)).map {
    ModelResolver(catalog: $0, locateInCache: { _ in nil }, cacheDescription: { $0 })
}

/// One input: the bytes of a `config.json`. A config that parses is planned as an
/// experimental export for both platforms, and everything the plan derives is computed:
/// tensors, weights layout, KV cache, runtime and conversion memory, graph and manifest.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzConfig(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = inputBytes(data, size)
    guard let resolver, (try? ModelConfig(bytes: bytes, path: "config.json")) != nil else { return 0 }
    let checkpoint = scratchDirectory.appendingPathComponent("checkpoint", isDirectory: true)
    try? FileManager.default.createDirectory(at: checkpoint, withIntermediateDirectories: true)
    _ = writeScratch(bytes, named: "checkpoint/config.json")
    for platform in [Platform.macOS, .iOS] {
        var options = ExportOptions(model: checkpoint.path)
        options.experimental = true
        options.computePrecision = .float16
        options.platform = platform
        guard let plan = try? ExportPlan.make(options: options, resolver: resolver) else { continue }
        _ = plan.memory.totalBytes
        _ = plan.bitsPerWeight
        _ = plan.conversionMemory().totalBytes
        _ = plan.estimatedBundleBytes(copiedFileBytes: 0)
        _ = GraphDescription(plan: plan)
        _ = Manifest(plan: plan)
    }
    return 0
}

@_cdecl("FuzzConfig_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    guard resolver != nil else {
        FileHandle.standardError.write(Data("error: no presets at '\(presets.path)'\n".utf8))
        return 1
    }
    return runFuzzer(argc, argv, fuzzConfig)
}
