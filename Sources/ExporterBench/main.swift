import Foundation

// Each benchmark is a function in a file of its own; `exporter-bench NAME [args]` runs one.
let benchmarks: [String: ([String]) throws -> Void] = [
    "palettize": PalettizeBench.run,
    "read": ReadBench.run,
    "export": ExportBench.run,
]

let arguments = Array(CommandLine.arguments.dropFirst())
guard let name = arguments.first, let bench = benchmarks[name] else {
    FileHandle.standardError.write(
        Data("usage: exporter-bench <\(benchmarks.keys.sorted().joined(separator: "|"))> [args]\n".utf8))
    exit(64)
}
do {
    try bench(Array(arguments.dropFirst()))
} catch {
    FileHandle.standardError.write(Data("error: \(error)\n".utf8))
    exit(1)
}
