import Testing

@testable import ExporterKit

@Suite("CRC-32")
struct CRC32Tests {
    @Test("matches the standard check value of \"123456789\"")
    func checkValue() {
        let bytes = Array("123456789".utf8)
        let crc = bytes.withUnsafeBytes { CRC32.checksum($0) }
        #expect(crc == 0xCBF4_3926)
    }

    @Test("is the same fed in pieces")
    func incremental() {
        let bytes = Array("The quick brown fox jumps over the lazy dog".utf8)
        var crc = CRC32()
        bytes[..<10].withUnsafeBytes { crc.update($0) }
        bytes[10...].withUnsafeBytes { crc.update($0) }
        #expect(crc.value == 0x414F_A339)
    }
}
