import Foundation
import ExporterKit
import FuzzSupport

/// One input: the bytes of a safetensors file. Opening validates the whole header; then
/// every tensor is read back, so any range the parser accepted must really be readable.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSafetensors(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let url = writeScratch(inputBytes(data, size), named: "model.safetensors")
    guard let file = try? SafetensorsFile(url: url) else { return 0 }
    for name in file.tensorNames {
        guard let tensor = try? file.tensor(named: name), tensor.byteRange.count <= 1 << 20 else { continue }
        var raw = [UInt8](repeating: 0, count: tensor.byteRange.count)
        _ = try? raw.withUnsafeMutableBytes { try file.readRawBytes(of: name, into: $0) }
        if [.bf16, .f16, .f32].contains(tensor.dtype) {
            var values = [Float](repeating: 0, count: tensor.elementCount)
            _ = try? values.withUnsafeMutableBufferPointer { try file.readFloat(name, into: $0) }
        }
    }
    return 0
}

@_cdecl("FuzzSafetensors_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzSafetensors)
}
