import CZlib

/// Running CRC-32 (zlib's polynomial), as recorded for every file in a manifest.
public struct CRC32: Sendable {
    /// The checksum of everything given so far.
    public private(set) var value: UInt32 = 0

    /// Starts an empty checksum.
    public init() {}

    /// Adds `bytes` to the checksum.
    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard var base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return }
        var remaining = bytes.count
        var crc = UInt(value)
        // zlib takes a 32-bit length: feed large buffers in slices.
        while remaining > 0 {
            let slice = min(remaining, 1 << 30)
            crc = crc32(crc, base, uInt(slice))
            base += slice
            remaining -= slice
        }
        value = UInt32(truncatingIfNeeded: crc)
    }

    /// Adds bytes whose own checksum is `checksum` and length `length`, without reading them
    /// (zlib's `crc32_combine`): how a copy checksums its output from its input's checksums.
    public mutating func append(checksum: UInt32, length: Int) {
        guard length > 0 else { return }
        value = UInt32(truncatingIfNeeded: crc32_combine(uLong(value), uLong(checksum), off_t(length)))
    }

    /// The checksum of `bytes` alone.
    public static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var crc = CRC32()
        crc.update(bytes)
        return crc.value
    }
}
