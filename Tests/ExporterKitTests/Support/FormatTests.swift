import Testing

@testable import ExporterKit

@Suite("Support: formatting and clamped arithmetic")
struct FormatTests {
    @Test("sizes change unit at exactly 1,024 (binary) or 1,000 (decimal) bytes")
    func sizes() {
        #expect(Format.mebibytes(1023) == "1023 B")
        #expect(Format.mebibytes(1024) == "1.0 KiB")
        #expect(Format.mebibytes(1 << 20) == "1.0 MiB")
        #expect(Format.mebibytes(117_440_512) == "112.0 MiB")
        #expect(Format.megabytes(999) == "999 B")
        #expect(Format.megabytes(1000) == "1.0 kB")
        #expect(Format.megabytes(891_500_000) == "891.5 MB")
    }

    @Test("counts are grouped by thousands, signed, with a singular for one")
    func counts() {
        #expect(Format.grouped(1_543_714_304) == "1,543,714,304")
        #expect(Format.grouped(-1_234) == "-1,234")
        #expect(Format.grouped(999) == "999")
        #expect(Format.count(1, "token") == "1 token")
        #expect(Format.count(4096, "token") == "4,096 tokens")
    }

    @Test("control characters are C0, DEL and C1, shown as \\u{XX}")
    func controlCharacters() {
        let control = (0..<0x100).compactMap(Unicode.Scalar.init).filter(\.isControlCharacter).map(\.value)
        #expect(control == Array(0..<0x20) + Array(0x7F...0x9F))
        #expect(Unicode.Scalar(0x7F).shownEscaped == "\\u{7F}")
        #expect(Unicode.Scalar(0x1B).shownEscaped == "\\u{1B}")
    }

    @Test("clamped sums and products saturate towards the sign of the true result")
    func saturating() {
        #expect(Int.max.saturatingAdding(1) == .max)
        #expect(Int.min.saturatingAdding(-1) == .min)
        #expect((1 << 40).saturatingMultiplying(1 << 40) == .max)
        #expect((-(1 << 40)).saturatingMultiplying(1 << 40) == .min)
        #expect((1 << 40).saturatingMultiplying(-(1 << 40)) == .min)
        #expect((-(1 << 40)).saturatingMultiplying(-(1 << 40)) == .max)
        #expect([3, -(1 << 62), 4].saturatingProduct == .min)
        #expect([Int.max, 1, -5].saturatingSum == .max - 5)
        #expect(
            7.dividedRoundingUp(by: 2) == 4 && 8.dividedRoundingUp(by: 2) == 4 && 1.dividedRoundingUp(by: .max) == 1)
    }
}
