import ExporterKit
import FuzzSupport

/// One input: the bytes of a `config.json`. A config that parses goes on through everything
/// the plan derives from it: the registry's tensor list, the KV cache, the runtime memory.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzConfig(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let config = try? ModelConfig(bytes: inputBytes(data, size), path: "config.json") else { return 0 }
    guard let tensors = try? ArchitectureRegistry.tensors(for: config, configPath: "config.json") else { return 0 }
    var parameters = 0
    for tensor in tensors {
        parameters = parameters &+ tensor.elementCount
        _ = tensor.matrixShape
    }
    for precision in ComputePrecision.allCases {
        let kvCache = KVCacheCost(config: config, contextLength: config.maxPositionEmbeddings, precision: precision)
        _ = kvCache.bytes
        _ = MemoryEstimate(config: config, weightsBytes: parameters, kvCache: kvCache).totalBytes
    }
    return 0
}

@_cdecl("FuzzConfig_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzConfig)
}
