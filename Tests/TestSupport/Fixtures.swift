import Foundation
import ExporterKit

/// Temporary folders for tests, removed by the caller.
public enum Fixtures {
    /// A fresh empty directory under the system temporary folder.
    public static func temporaryDirectory(_ label: String = "exporter-test") throws -> URL {
        let url = FileManager.default.temporaryDirectory
            .appendingPathComponent("\(label)-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }
}
