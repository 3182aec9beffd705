import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("system resources")
struct SystemResourcesTests {
    @Test("Linux: MemAvailable of /proc/meminfo, in bytes")
    func meminfo() {
        let text = "MemTotal:       16318644 kB\nMemFree:         1021504 kB\nMemAvailable:    9876543 kB\n"
        #expect(SystemResources.memAvailable(inMeminfo: text) == 9_876_543 * 1024)
        #expect(SystemResources.memAvailable(inMeminfo: "MemTotal: 1 kB\n") == nil)
    }

    @Test("macOS: physical memory less wired, compressor and non-purgeable anonymous pages")
    func darwinCounts() {
        let gib: UInt64 = 1 << 30
        let page: UInt64 = 16_384
        // 16 GiB; 2 GiB wired, 1 GiB held by the compressor, 6 GiB of app memory of which 1 GiB is purgeable.
        let available = SystemResources.memoryNotInUse(
            physicalBytes: 16 * gib, pageBytes: page, wiredPages: 2 * gib / page, compressorPages: gib / page,
            anonymousPages: 6 * gib / page, purgeablePages: gib / page)
        #expect(available == Int(8 * gib))
        // More in use than installed (counts taken at different moments): nothing, not a wrap-around.
        #expect(
            SystemResources.memoryNotInUse(
                physicalBytes: gib, pageBytes: page, wiredPages: gib / page, compressorPages: 1, anonymousPages: 0,
                purgeablePages: 5) == 0)
        #expect(
            SystemResources.memoryNotInUse(
                physicalBytes: gib, pageBytes: 0, wiredPages: 0, compressorPages: 0, anonymousPages: 0,
                purgeablePages: 0) == nil)
    }

    @Test("free disk space is found for a folder not made yet, through a symbolic link")
    func diskThroughLink() throws {
        let real = try Fixtures.temporaryDirectory()
        let link = try Fixtures.temporaryDirectory().appendingPathComponent("link")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: real)
        let bytes = try #require(SystemResources.availableDiskBytes(at: link.appendingPathComponent("a/b")))
        #expect(bytes > 0)
    }
}
