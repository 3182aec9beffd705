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

extension CRC32 {
    /// Bytes of a file checksummed by one worker at a time in ``checksum(of:workers:pieceBytes:)``.
    static let filePieceBytes = 64 << 20

    /// The checksum of the whole file, its pieces of ``filePieceBytes`` checksummed on
    /// `workers` threads and joined in order (`crc32_combine`): the same value as one pass,
    /// at a fraction of the time on a multi-core machine (zlib's CRC-32 runs at about 2 GB/s).
    /// - Throws: `CheckpointError.readFailed`, the first in file order.
    static func checksum(
        of file: ReadOnlyFile, workers: Int = SystemResources.activeCores, pieceBytes: Int = filePieceBytes
    ) throws -> UInt32 {
        let size = file.byteCount
        let pieceCount = max(1, (size + pieceBytes - 1) / pieceBytes)
        func range(_ piece: Int) -> Range<Int> { (piece * pieceBytes)..<min(size, (piece + 1) * pieceBytes) }
        let results = WorkerResults<Result<UInt32, Error>>(count: pieceCount, initial: .success(0))
        WorkDispenser.perform(count: pieceCount, workers: workers, setUp: { _ in () }) { _, piece in
            results[piece] = Result {
                var crc = CRC32()
                try file.forEachPiece(of: range(piece)) { crc.update($0) }
                return crc.value
            }
        }
        var whole = CRC32()
        for piece in 0..<pieceCount { whole.append(checksum: try results[piece].get(), length: range(piece).count) }
        return whole.value
    }
}
