import Foundation

/// libFuzzer's entry point when the program has its own `main` (SwiftPM names an executable
/// target's entry `<Module>_main` and links `main` to it, so libFuzzer's `main` is unused).
@_silgen_name("LLVMFuzzerRunDriver")
func llvmFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

/// Runs libFuzzer with the process's arguments, feeding every input to `callback`.
public func runFuzzer(
    _ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt {
    var count = argc
    var arguments = argv
    return llvmFuzzerRunDriver(&count, &arguments, callback)
}

/// The input as bytes.
public func inputBytes(_ data: UnsafePointer<UInt8>?, _ size: Int) -> [UInt8] {
    guard let data, size > 0 else { return [] }
    return Array(UnsafeBufferPointer(start: data, count: size))
}

/// A private scratch folder for inputs the readers take as files (one per process).
public let scratchDirectory: URL = {
    let base = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
    let url = URL(fileURLWithPath: base).appendingPathComponent("exporter-fuzz-\(getpid())", isDirectory: true)
    try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    atexit { try? FileManager.default.removeItem(at: scratchDirectory) }
    return url
}()

/// Writes `bytes` to `name` in the scratch folder.
public func writeScratch(_ bytes: some Collection<UInt8>, named name: String) -> URL {
    let url = scratchDirectory.appendingPathComponent(name)
    FileManager.default.createFile(atPath: url.path, contents: Data(bytes))
    return url
}
