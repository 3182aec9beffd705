import Foundation

/// Core ML's blob storage file (`weights/weight.bin`), as its storage format specifies:
///
/// - a 64-byte header: u32 blob count, u32 version `2`, 56 zero bytes;
/// - then per blob, each at the next multiple of 64 bytes: a 64-byte metadata record
///   (u32 sentinel `0xDEADBEEF`, u32 data type, u64 data size in bytes, u64 data offset,
///   u64 unused bits of the last byte for sub-byte types, 32 zero bytes) immediately
///   followed by the data (so the data is 64-byte aligned too). Gaps are zero bytes; the file
///   ends with the last blob's data.
///
/// A program refers to a blob by the offset of its metadata record. All integers little-endian.
public enum MILBlobStorage {
    /// Bytes of the header and of each metadata record.
    public static let recordBytes = 64
    /// Alignment of every metadata record (and so of every blob's data).
    public static let alignment = 64
    /// The format version this writes and reads.
    public static let version: UInt32 = 2
    /// The sentinel that opens every metadata record.
    public static let sentinel: UInt32 = 0xDEAD_BEEF

    /// The storage format's data type codes.
    public enum DataType: UInt32, Sendable, CaseIterable {
        /// Element types, by the codes a metadata record stores.
        case float16 = 1, float32 = 2, uint8 = 3, int8 = 4
        case uint1 = 9, uint2 = 10, uint4 = 11, uint3 = 12, uint6 = 13

        /// Bits per element.
        public var bits: Int {
            switch self {
            case .float16: return 16
            case .float32: return 32
            case .uint8, .int8: return 8
            case .uint1: return 1
            case .uint2: return 2
            case .uint4: return 4
            case .uint3: return 3
            case .uint6: return 6
            }
        }

        /// The storage type of `bits`-wide palette indices.
        public static func paletteIndices(bits: Int) -> DataType? {
            [DataType.uint2, .uint3, .uint4, .uint6, .uint8].first { $0.bits == bits }
        }
    }

    /// Where a blob's bytes come from when the file is written.
    public enum Source: Sendable, Equatable {
        /// Bytes held in memory.
        case bytes([UInt8])
        /// A byte range of another file (a bundle's `weights.bin`), copied as is.
        case fileRange(path: String, offset: Int)
    }

    /// One blob: its type, element count, byte size and source.
    public struct Blob: Sendable, Equatable {
        /// Storage data type.
        public let dataType: DataType
        /// Elements stored.
        public let elementCount: Int
        /// Bytes of data: `⌈elements × bits / 8⌉`.
        public var byteCount: Int { (elementCount * dataType.bits + 7) / 8 }
        /// Unused high bits of the last byte (sub-byte types only).
        public var paddingBits: Int { (8 - (elementCount * dataType.bits) % 8) % 8 }
        /// The bytes.
        public let source: Source

        /// A blob.
        public init(dataType: DataType, elementCount: Int, source: Source) {
            self.dataType = dataType
            self.elementCount = elementCount
            self.source = source
        }
    }

    /// The blobs of a file in order, with the offset of each metadata record: offsets are
    /// known as blobs are added, so a program can refer to them before anything is written.
    public struct Layout: Sendable {
        /// The blobs, in file order.
        public private(set) var blobs: [Blob] = []
        /// Offset of each blob's metadata record.
        public private(set) var metadataOffsets: [Int] = []
        /// Bytes of the file so far.
        public private(set) var fileBytes = MILBlobStorage.recordBytes

        /// An empty layout (the header only).
        public init() {}

        /// Adds a blob and returns the offset of its metadata record.
        public mutating func append(_ blob: Blob) -> Int {
            let metadata =
                (fileBytes + MILBlobStorage.alignment - 1) / MILBlobStorage.alignment * MILBlobStorage.alignment
            blobs.append(blob)
            metadataOffsets.append(metadata)
            fileBytes = metadata + MILBlobStorage.recordBytes + blob.byteCount
            return metadata
        }
    }

    /// Writes `layout` to `file` (positioned at 0), copying file ranges in bounded chunks.
    /// - Parameter progress: told the bytes written after every blob.
    /// - Throws: `BundleError` when a write or a source read fails, `CoreMLError` when a source
    ///   does not hold the bytes its blob needs.
    public static func write(_ layout: Layout, to file: OutputFile, progress: (Int) -> Void = { _ in }) throws {
        var header = [UInt8](repeating: 0, count: recordBytes)
        put(UInt64(layout.blobs.count), at: 0, bytes: 4, into: &header)
        put(UInt64(version), at: 4, bytes: 4, into: &header)
        try file.write(header)
        var readers: [String: ReadOnlyFile] = [:]
        for (blob, metadataOffset) in zip(layout.blobs, layout.metadataOffsets) {
            try file.pad(toMultipleOf: alignment)
            guard file.size == metadataOffset else {
                throw CoreMLError.invalidPackage(
                    path: file.path, reason: "blob metadata at \(file.size), planned at \(metadataOffset)")
            }
            var record = [UInt8](repeating: 0, count: recordBytes)
            put(UInt64(sentinel), at: 0, bytes: 4, into: &record)
            put(UInt64(blob.dataType.rawValue), at: 4, bytes: 4, into: &record)
            put(UInt64(blob.byteCount), at: 8, bytes: 8, into: &record)
            put(UInt64(metadataOffset + recordBytes), at: 16, bytes: 8, into: &record)
            put(UInt64(blob.paddingBits), at: 24, bytes: 8, into: &record)
            try file.write(record)
            switch blob.source {
            case .bytes(let bytes):
                guard bytes.count == blob.byteCount else {
                    throw CoreMLError.invalidPackage(
                        path: file.path,
                        reason: "blob at \(metadataOffset) has \(bytes.count) bytes, expected \(blob.byteCount)")
                }
                try file.write(bytes)
            case .fileRange(let path, let offset):
                try BundleError.readingFile(path) {
                    let reader = try readers[path] ?? ReadOnlyFile(path: path)
                    readers[path] = reader
                    try reader.forEachPiece(of: offset..<(offset + blob.byteCount)) { try file.write($0) }
                }
            }
            progress(file.size)
        }
    }

    static func put(_ value: UInt64, at offset: Int, bytes count: Int, into buffer: inout [UInt8]) {
        for index in 0..<count { buffer[offset + index] = UInt8(truncatingIfNeeded: value >> (8 * UInt64(index))) }
    }

    static func get(_ buffer: [UInt8], at offset: Int, bytes count: Int) -> UInt64 {
        (0..<count).reduce(UInt64(0)) { $0 | UInt64(buffer[offset + $1]) << (8 * UInt64($1)) }
    }
}

/// Reads a blob storage file back, checking every rule of the format: the header, each
/// metadata record's sentinel, type, offsets and bounds, alignment, and the blob count.
public struct MILBlobFile {
    /// A blob found in the file.
    public struct Entry: Equatable, Sendable {
        /// Offset of its metadata record (what a program refers to).
        public let metadataOffset: Int
        /// Data type.
        public let dataType: MILBlobStorage.DataType
        /// Offset of its data.
        public let dataOffset: Int
        /// Bytes of data.
        public let byteCount: Int
        /// Unused bits of the last byte.
        public let paddingBits: Int
    }

    /// The file's path.
    public let path: String
    /// Its blobs, in file order.
    public let entries: [Entry]
    private let size: Int

    /// Opens and checks the file at `url`.
    /// - Throws: `CoreMLError.invalidPackage` naming the rule broken.
    public init(url: URL) throws {
        path = url.path
        let reader: ReadOnlyFile
        do { reader = try ReadOnlyFile(path: url.path) } catch {
            throw CoreMLError.invalidPackage(path: url.path, reason: "cannot open")
        }
        let fileSize = reader.byteCount
        size = fileSize
        func fail(_ reason: String) -> CoreMLError { .invalidPackage(path: url.path, reason: reason) }
        func record(at offset: Int) throws -> [UInt8] {
            guard offset >= 0, offset + MILBlobStorage.recordBytes <= fileSize else {
                throw fail("record at \(offset) runs past the end of the file (\(fileSize) bytes)")
            }
            guard let bytes = try? reader.bytes(at: offset, count: MILBlobStorage.recordBytes) else {
                throw fail("short read at \(offset)")
            }
            return bytes
        }
        let header = try record(at: 0)
        let count = Int(MILBlobStorage.get(header, at: 0, bytes: 4))
        let version = UInt32(MILBlobStorage.get(header, at: 4, bytes: 4))
        guard version == MILBlobStorage.version else {
            throw fail("blob storage version \(version); this version reads \(MILBlobStorage.version)")
        }
        var entries: [Entry] = []
        var next = MILBlobStorage.recordBytes
        for index in 0..<count {
            let metadataOffset =
                (next + MILBlobStorage.alignment - 1) / MILBlobStorage.alignment * MILBlobStorage.alignment
            let metadata = try record(at: metadataOffset)
            guard UInt32(MILBlobStorage.get(metadata, at: 0, bytes: 4)) == MILBlobStorage.sentinel else {
                throw fail("blob \(index) at \(metadataOffset): no metadata sentinel")
            }
            let code = UInt32(MILBlobStorage.get(metadata, at: 4, bytes: 4))
            guard let dataType = MILBlobStorage.DataType(rawValue: code) else {
                throw fail("blob \(index) at \(metadataOffset): unknown data type \(code)")
            }
            let byteCount = Int(clamping: MILBlobStorage.get(metadata, at: 8, bytes: 8))
            let dataOffset = Int(clamping: MILBlobStorage.get(metadata, at: 16, bytes: 8))
            let padding = Int(clamping: MILBlobStorage.get(metadata, at: 24, bytes: 8))
            guard dataOffset == metadataOffset + MILBlobStorage.recordBytes else {
                throw fail("blob \(index) at \(metadataOffset): data offset \(dataOffset) does not follow its metadata")
            }
            guard byteCount <= fileSize - dataOffset else {
                throw fail("blob \(index) at \(metadataOffset): \(byteCount) bytes run past the end of the file")
            }
            guard padding < 8, dataType.bits < 8 || padding == 0 else {
                throw fail("blob \(index) at \(metadataOffset): \(padding) padding bits")
            }
            entries.append(
                Entry(
                    metadataOffset: metadataOffset, dataType: dataType, dataOffset: dataOffset, byteCount: byteCount,
                    paddingBits: padding))
            next = dataOffset + byteCount
        }
        guard next == fileSize else { throw fail("\(fileSize - next) bytes after the last of \(count) blobs") }
        self.entries = entries
    }

    /// The data of the blob whose metadata record is at `metadataOffset`.
    /// - Throws: `CoreMLError.invalidPackage` when no blob starts there or the read fails.
    public func data(atMetadataOffset metadataOffset: Int) throws -> (entry: Entry, bytes: [UInt8]) {
        let entry = try entry(atMetadataOffset: metadataOffset)
        return (entry, try bytes(of: entry, range: 0..<entry.byteCount))
    }

    /// The blob whose metadata record is at `metadataOffset`.
    /// - Throws: `CoreMLError.invalidPackage` when no blob starts there.
    public func entry(atMetadataOffset metadataOffset: Int) throws -> Entry {
        guard let entry = entries.first(where: { $0.metadataOffset == metadataOffset }) else {
            throw CoreMLError.invalidPackage(path: path, reason: "no blob at offset \(metadataOffset)")
        }
        return entry
    }

    /// Bytes `range` of the blob `entry`'s data: a large blob can be read a piece at a time.
    /// - Throws: `CoreMLError.invalidPackage` when the range lies outside the blob or the read fails.
    public func bytes(of entry: Entry, range: Range<Int>) throws -> [UInt8] {
        guard range.lowerBound >= 0, range.upperBound <= entry.byteCount else {
            throw CoreMLError.invalidPackage(
                path: path,
                reason: "bytes \(range) lie outside the \(entry.byteCount)-byte blob at \(entry.metadataOffset)")
        }
        let offset = entry.dataOffset + range.lowerBound
        guard let reader = try? ReadOnlyFile(path: path) else {
            throw CoreMLError.invalidPackage(path: path, reason: "cannot open")
        }
        guard let bytes = try? reader.bytes(at: offset, count: range.count) else {
            throw CoreMLError.invalidPackage(path: path, reason: "short read at \(offset)")
        }
        return bytes
    }
}
