// swift-tools-version:6.0
// libFuzzer targets for the parsers that read untrusted bytes. A package of its own so that
// plain `swift build` / `swift test` of the main package never builds them; `make fuzz`
// builds them with `-sanitize=fuzzer,address` and runs each for a bounded time.
import PackageDescription

let fuzzFlags: [SwiftSetting] = [.unsafeFlags(["-parse-as-library"])]

let package = Package(
    name: "exporter-fuzz",
    platforms: [.macOS(.v14)],
    dependencies: [.package(name: "exporter", path: "..")],
    targets: [
        // The libFuzzer driver shim and helpers shared by the targets.
        .target(name: "FuzzSupport", dependencies: [.product(name: "ExporterKit", package: "exporter")]),
        // The safetensors header parser (`SafetensorsFile`): length prefix, JSON, entries, ranges.
        .executableTarget(name: "FuzzSafetensors", dependencies: ["FuzzSupport"], swiftSettings: fuzzFlags),
        // The config reader (`ModelConfig`) and what the plan derives from it: tensors, KV cache, memory.
        .executableTarget(name: "FuzzConfig", dependencies: ["FuzzSupport"], swiftSettings: fuzzFlags),
        // The artifact reader (`BundleReader`): manifest, graph, weights header, every tensor decoded.
        .executableTarget(name: "FuzzBundle", dependencies: ["FuzzSupport"], swiftSettings: fuzzFlags),
        // The files a user writes for the tool: device tables (and the verdicts and compiled headers
        // their numbers drive), compression configs (planned), farm files (checked against the presets).
        .executableTarget(name: "FuzzTables", dependencies: ["FuzzSupport"], swiftSettings: fuzzFlags),
    ],
    swiftLanguageModes: [.v5]
)
