import Foundation

/// The bytes of a file the user names (an option's file, a farm file), or nil when nothing is
/// there, so that the caller's own "not found" (66) applies.
/// - Throws: `BundleError.readFailed` naming why a file that is there cannot be read: permission
///   denied, a link loop (74), a folder, a FIFO or a device.
public func readNamedFile(_ url: URL) throws -> Data? {
    let file: ReadOnlyFile
    do { file = try ReadOnlyFile(path: url.path) } catch CheckpointError.cannotOpen {
        return nil
    } catch CheckpointError.readFailed(_, let reason) {
        throw BundleError.readFailed(path: url.path, reason: reason)
    } catch CheckpointError.notARegularFile(_, let kind) {
        throw BundleError.readFailed(path: url.path, reason: "\(kind), not a regular file")
    }
    return Data(try BundleError.readingFile(url.path) { try file.bytes(at: 0, count: file.byteCount) })
}
