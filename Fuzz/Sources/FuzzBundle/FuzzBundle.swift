import Foundation
import ExporterKit
import FuzzSupport

/// One input: `manifest.json`, a NUL byte, `graph.json`, a NUL byte, then `weights.bin`
/// (JSON never holds a raw NUL, so the split is unambiguous). The bundle is opened without
/// the CRC check (so lying manifests reach the decoder) and every tensor is decoded.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzBundle(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = inputBytes(data, size)
    let parts = bytes.split(separator: 0, maxSplits: 2, omittingEmptySubsequences: false)
    guard parts.count == 3 else { return 0 }
    let bundle = scratchDirectory.appendingPathComponent("Fuzz.aimodel", isDirectory: true)
    try? FileManager.default.createDirectory(at: bundle, withIntermediateDirectories: true)
    _ = writeScratch(parts[0], named: "Fuzz.aimodel/manifest.json")
    _ = writeScratch(parts[1], named: "Fuzz.aimodel/graph.json")
    _ = writeScratch(parts[2], named: "Fuzz.aimodel/weights.bin")
    guard let reader = try? BundleReader(url: bundle, verifyFiles: false) else { return 0 }
    for name in reader.tensorNames { _ = try? reader.dequantize(name) }
    return 0
}

@_cdecl("FuzzBundle_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzBundle)
}
