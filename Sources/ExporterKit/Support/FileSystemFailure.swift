import Foundation

/// Why a Foundation file operation failed, in the words of our messages ("file exists",
/// "no such file or directory", "permission denied"): the system's reason when the error
/// carries one, never Foundation's `Error Domain=NSCocoaErrorDomain Code=516 …` dump.
public func fileSystemFailureReason(_ error: Error) -> String {
    let error = error as NSError
    for candidate in [error, error.userInfo[NSUnderlyingErrorKey] as? NSError].compactMap({ $0 })
    where candidate.domain == NSPOSIXErrorDomain {
        return systemErrorMessage(Int32(truncatingIfNeeded: candidate.code))
    }
    guard error.domain == NSCocoaErrorDomain else { return error.localizedDescription }
    switch CocoaError.Code(rawValue: error.code) {
    case .fileWriteFileExists: return systemErrorMessage(EEXIST)
    case .fileNoSuchFile, .fileReadNoSuchFile: return systemErrorMessage(ENOENT)
    case .fileWriteNoPermission, .fileReadNoPermission: return systemErrorMessage(EACCES)
    case .fileWriteOutOfSpace: return systemErrorMessage(ENOSPC)
    case .fileWriteVolumeReadOnly: return systemErrorMessage(EROFS)
    case .fileWriteInvalidFileName, .fileReadInvalidFileName: return "invalid file name"
    default: return "the file system refused (error \(error.code))"
    }
}
