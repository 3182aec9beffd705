import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("Support: file-system failures in plain words")
struct FileSystemFailureTests {
    @Test("Foundation's errors read as the system's reason, never as an NSCocoaErrorDomain dump")
    func reasons() throws {
        let folder = try Fixtures.temporaryDirectory()
        let file = folder.appendingPathComponent("taken")
        try Data("x".utf8).write(to: file)
        let exists = #expect(throws: (any Error).self) {
            try FileManager.default.createDirectory(at: file, withIntermediateDirectories: false)
        }
        #expect(exists.map(fileSystemFailureReason) == "file exists")
        let missing = #expect(throws: (any Error).self) {
            try Data().write(to: folder.appendingPathComponent("no/such/file"))
        }
        #expect(missing.map(fileSystemFailureReason) == "no such file or directory")
        #expect(fileSystemFailureReason(POSIXError(.EACCES)) == "permission denied")
        #expect(fileSystemFailureReason(CocoaError(.fileWriteOutOfSpace)) == "no space left on device")
        #expect(fileSystemFailureReason(CocoaError(.fileWriteUnknown)) == "the file system refused (error 512)")
    }
}
