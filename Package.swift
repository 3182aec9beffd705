// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "exporter",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "exporter", targets: ["exporter"]),
        .library(name: "ExporterKit", targets: ["ExporterKit"]),
    ],
    targets: [
        // zlib, linked from the system (`zlib1g-dev` on Debian; the macOS SDK has `zlib.h` and
        // `libz`, so nothing to install there): CRC-32 for manifests.
        .systemLibrary(
            name: "CZlib",
            path: "Sources/CZlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        // All pipeline logic: checkpoint reading → registry → plan → compression → bundle → compile → manifest → farm.
        .target(
            name: "ExporterKit",
            dependencies: ["CZlib"],
            linkerSettings: [.linkedLibrary("m")]
        ),
        // Argument parsing, commands and printing; testable in-process.
        .target(name: "ExporterCLI", dependencies: ["ExporterKit"]),
        .executableTarget(name: "exporter", dependencies: ["ExporterCLI"]),
        // `make bench`: release-build measurements (never run by `make test`).
        .executableTarget(
            name: "exporter-bench", dependencies: ["ExporterKit", "TestSupport"], path: "Sources/ExporterBench"),
        // Fixture builders shared by the test targets and the benches (tiny configs and
        // safetensors files, seeded heavy-tailed weights, the reference k-means).
        .target(name: "TestSupport", dependencies: ["ExporterKit"], path: "Tests/TestSupport"),
        .testTarget(
            name: "ExporterKitTests", dependencies: ["ExporterKit", "TestSupport"], exclude: ["Checkpoint/Fixtures"]),
        .testTarget(name: "ExporterCLITests", dependencies: ["ExporterCLI", "ExporterKit", "TestSupport"]),
    ],
    swiftLanguageModes: [.v5]
)
