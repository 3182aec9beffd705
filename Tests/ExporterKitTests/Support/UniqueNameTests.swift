import Foundation
import TestSupport
import Testing

@testable import ExporterKit

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("unique names of temporary files: random, or pid, count and time; never a constant")
struct UniqueNameTests {
    /// Whether the whole of `text` matches `pattern`.
    private func matches(_ text: String, _ pattern: String) -> Bool {
        text.range(of: "^" + pattern + "$", options: .regularExpression) != nil
    }

    @Test("a name is 128 random bits in a UUID's text, and no two are alike")
    func random() {
        let names = (0..<1000).map { _ in UniqueName.make() }
        #expect(Set(names).count == names.count)
        for name in names {
            #expect(matches(name, "[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}"), "\(name)")
        }
        #expect(
            UniqueName.make {
                $0.copyBytes(from: (0..<16).map { UInt8($0 * 17) })
                return true
            }
                == "00112233-4455-6677-8899-AABBCCDDEEFF")
    }

    @Test("a random source that fails gives the process id, a count and the time: still no two alike")
    func failedRandomSource() {
        let names = (0..<100).map { _ in UniqueName.make { _ in false } }
        #expect(Set(names).count == names.count)
        for name in names {
            #expect(matches(name, "P[0-9]+-[0-9]+-[0-9]+"), "\(name)")
            #expect(name.hasPrefix("P\(getpid())-"))
        }
        #expect(!names.contains("00000000-0000-4000-8000-000000000000"))
    }

    @Test("a farm's temporary file is its name with one leading dot, hidden or not, and its errors name the file")
    func farmTemporaryFiles() throws {
        let folder = URL(fileURLWithPath: "/out")
        #expect(
            FarmRunner.temporaryURL(for: folder.appendingPathComponent(".farm-verified.json"), unique: "U").path
                == "/out/.farm-verified.json.U")
        #expect(
            FarmRunner.temporaryURL(for: folder.appendingPathComponent("farm-report.json"), unique: "U").path
                == "/out/.farm-report.json.U")
        // A write that fails names the file it writes, not its temporary name.
        let missing = try Fixtures.temporaryDirectory().appendingPathComponent("gone/farm-report.json")
        #expect(
            throws: BundleError.writeFailed(path: missing.path, reason: "no such file or directory")
        ) { try FarmRunner.writeAtomically([1], to: missing) }
    }
}
