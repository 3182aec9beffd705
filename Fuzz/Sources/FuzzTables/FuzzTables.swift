import Foundation
import ExporterKit
import FuzzSupport

/// The repository (this file is `Fuzz/Sources/FuzzTables/…`).
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent()
let presets = root.appendingPathComponent("Presets")
let catalog = try? PresetCatalog(directory: presets)
let resolver: ModelResolver? = catalog.map {
    ModelResolver(catalog: $0, locateInCache: { _ in nil }, cacheDescription: { $0 })
}

/// Plans of two models, the tiny seed checkpoint and a shipped preset, each for both
/// platforms, from their configs alone, with the compression config at `compression` if given.
/// Made for each input, not kept: a plan held until exit reads as a leak to LeakSanitizer
/// (Swift stores enum cases' tags in pointers' spare bits, which its scan does not follow).
func plans(_ resolver: ModelResolver, compression: URL? = nil) -> [ExportPlan] {
    [root.appendingPathComponent("Fuzz/Seeds/tiny").path, "qwen3-4b"].flatMap { model in
        [Platform.macOS, .iOS].compactMap { platform in
            var options = ExportOptions(model: model)
            options.experimental = true
            options.computePrecision = .float16
            options.platform = platform
            if let compression { options.compression = .file(compression) }
            return try? ExportPlan.make(options: options, resolver: resolver)
        }
    }
}

/// One input: a selector byte, then a file the user writes. Selector % 3:
/// - 0, a device table (`--devices`): loaded over the shipped one, then every plan's verdicts,
///   their warnings and each compiled header computed (the sums a page size or limit drives);
/// - 1, a compression config (`--compression-config`): both models planned with it;
/// - 2, a farm file: parsed, checked against the presets, each job's arguments made.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTables(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = inputBytes(data, size)
    guard let selector = bytes.first, let resolver, let catalog else { return 0 }
    let file = Array(bytes.dropFirst())
    switch selector % 3 {
    case 0:
        let url = writeScratch(file, named: "devices.json")
        guard let table = try? DeviceTable.load(presetsDirectory: presets, extra: url) else { return 0 }
        for plan in plans(resolver) {
            let subject = CompileSubject(plan: plan)
            for verdict in CompilePlan.verdicts(for: subject, table: table) { _ = verdict.warnings }
            for device in DevicePlatform.allCases.flatMap(table.eligible(for:))
            where device.platform.bundlePlatform == plan.platform {
                _ = CompilePlan(subject: subject, device: device).header()
            }
        }
    case 1:
        for plan in plans(resolver, compression: writeScratch(file, named: "compression.json")) {
            _ = plan.bitsPerWeight
            _ = plan.estimatedBundleBytes(copiedFileBytes: 0)
            _ = plan.conversionMemory().totalBytes
            _ = Manifest(plan: plan)
        }
    default:
        let url = scratchDirectory.appendingPathComponent("farm.json")
        guard let farm = try? FarmFile(bytes: file, path: url), (try? farm.check(against: catalog)) != nil else {
            return 0
        }
        for job in farm.jobs {
            _ = job.modelArgument(farmDirectory: scratchDirectory)
            _ = job.exportArguments(outputDirectory: scratchDirectory, farmDirectory: scratchDirectory)
        }
    }
    return 0
}

@_cdecl("FuzzTables_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    guard let resolver, plans(resolver).count == 4 else {
        FileHandle.standardError.write(Data("error: cannot plan the seed models with '\(presets.path)'\n".utf8))
        return 1
    }
    return runFuzzer(argc, argv, fuzzTables)
}
