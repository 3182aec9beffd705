import Foundation

/// Where one tensor lives: its file, dtype, shape and the bytes holding its data.
public struct TensorDescriptor: Equatable, Sendable {
    /// The tensor's name, e.g. `model.layers.0.mlp.down_proj.weight`.
    public let name: String
    /// The safetensors file holding the data.
    public let fileURL: URL
    /// The element type as stored.
    public let dtype: TensorDType
    /// Dimensions, outermost first; `[]` is a scalar.
    public let shape: [Int]
    /// The product of `shape` (1 for a scalar).
    public let elementCount: Int
    /// The data's bytes as absolute file offsets (the header's `data_offsets` plus 8 + header length).
    public let byteRange: Range<Int>

    /// Describes a tensor; `SafetensorsFile` builds these after validating the header.
    public init(name: String, fileURL: URL, dtype: TensorDType, shape: [Int], elementCount: Int, byteRange: Range<Int>)
    {
        self.name = name
        self.fileURL = fileURL
        self.dtype = dtype
        self.shape = shape
        self.elementCount = elementCount
        self.byteRange = byteRange
    }
}

/// How values beyond float16's range (±65504) are treated when reading as float16.
public enum Float16RangePolicy: Sendable {
    /// Throw `CheckpointError.float16RangeExceeded` (the default).
    case refuse
    /// Clamp them to ±65504 and report how many were.
    case clamp
}

/// What a successful float16 read changed.
public struct Float16ReadReport: Equatable, Sendable {
    /// Values clamped to ±65504 (always 0 under `Float16RangePolicy.refuse`).
    public let clampedCount: Int
}

/// One safetensors file, opened and validated; tensor data is read on demand with bounded
/// positioned reads, so files larger than memory are fine.
///
/// Layout: an 8-byte little-endian header length N, N bytes of JSON header mapping tensor
/// names to `{"dtype", "shape", "data_offsets": [begin, end]}` (offsets relative to the data
/// section at 8 + N) plus an optional `"__metadata__"` string map, then the data. Opening checks
/// everything a reader later relies on: sizes against the file, offsets against shapes, that
/// ranges neither overlap nor leave bytes unclaimed (as the format requires).
///
/// Safe to share between threads: every read is positioned and the state is immutable.
public final class SafetensorsFile: Sendable {
    /// Headers beyond this are refused before anything is allocated (real ones are well under 1 MB).
    public static let maximumHeaderLength = 100_000_000

    /// The file.
    public let url: URL
    /// The file's size in bytes.
    public let byteCount: Int
    /// Offset of the data section: 8 + the header length.
    public let dataStart: Int
    /// The header's `__metadata__` map (empty when absent).
    public let metadata: [String: String]
    /// Tensor names in ascending order.
    public let tensorNames: [String]
    /// Every tensor, by name.
    public let tensors: [String: TensorDescriptor]

    private let file: ReadOnlyFile

    /// Opens and validates `url`.
    /// - Throws: `CheckpointError` naming the file (and tensor) for anything malformed:
    ///   short file, header length past the end or over `maximumHeaderLength`, invalid JSON,
    ///   unknown dtype, bad shape or offsets, overlapping or unclaimed data.
    public init(url: URL) throws {
        let path = url.path
        let file = try ReadOnlyFile(path: path)
        guard file.byteCount >= 8 else { throw CheckpointError.fileTooShort(path: path, byteCount: file.byteCount) }
        var lengthBytes: UInt64 = 0
        try withUnsafeMutableBytes(of: &lengthBytes) { try file.read(into: $0, at: 0) }
        let headerLength = UInt64(littleEndian: lengthBytes)
        let bytesAfterLength = file.byteCount - 8
        guard headerLength <= UInt64(bytesAfterLength) else {
            throw CheckpointError.headerTruncated(
                path: path, headerLength: headerLength, bytesAvailable: bytesAfterLength)
        }
        guard headerLength <= UInt64(SafetensorsFile.maximumHeaderLength) else {
            throw CheckpointError.headerTooLarge(
                path: path, headerLength: headerLength, limit: SafetensorsFile.maximumHeaderLength)
        }
        let header = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(headerLength), alignment: 8)
        defer { header.deallocate() }
        try file.read(into: header, at: 8)
        let json: JSONValue
        do {
            json = try JSONParser.parse(UnsafeRawBufferPointer(header))
        } catch let error as JSONParseError {
            throw CheckpointError.headerNotJSON(path: path, reason: error.description)
        }
        let dataStart = 8 + Int(headerLength)
        let parsed = try SafetensorsFile.parseHeader(
            json, url: url, dataStart: dataStart, dataLength: file.byteCount - dataStart)
        self.url = url
        self.file = file
        self.byteCount = file.byteCount
        self.dataStart = dataStart
        self.metadata = parsed.metadata
        self.tensors = parsed.tensors
        self.tensorNames = parsed.tensors.keys.sorted()
    }

    /// The tensor called `name`.
    /// - Throws: `CheckpointError.tensorNotFound` when the file has no such tensor.
    public func tensor(named name: String) throws -> TensorDescriptor {
        guard let tensor = tensors[name] else { throw CheckpointError.tensorNotFound(path: url.path, tensor: name) }
        return tensor
    }

    // MARK: Header validation

    private static func parseHeader(
        _ json: JSONValue, url: URL, dataStart: Int, dataLength: Int
    ) throws -> (metadata: [String: String], tensors: [String: TensorDescriptor]) {
        let path = url.path
        guard let object = json.objectValue else {
            throw CheckpointError.invalidHeader(
                path: path, reason: "expected a JSON object, found \(json.typeDescription)")
        }
        var metadata: [String: String] = [:]
        var tensors: [String: TensorDescriptor] = [:]
        var dataRanges: [(name: String, range: Range<Int>)] = []
        for (key, value) in object.members {
            if key == "__metadata__" {
                metadata = try parseMetadata(value, path: path)
                continue
            }
            let entry = try parseTensorEntry(name: key, value, path: path, dataLength: dataLength)
            dataRanges.append((key, entry.dataOffsets))
            let byteRange = (dataStart + entry.dataOffsets.lowerBound)..<(dataStart + entry.dataOffsets.upperBound)
            tensors[key] = TensorDescriptor(
                name: key, fileURL: url, dtype: entry.dtype, shape: entry.shape,
                elementCount: entry.elementCount, byteRange: byteRange)
        }
        try checkCoverage(of: dataRanges, dataLength: dataLength, path: path)
        return (metadata, tensors)
    }

    private static func parseMetadata(_ value: JSONValue, path: String) throws -> [String: String] {
        guard let object = value.objectValue else {
            throw CheckpointError.invalidHeader(
                path: path, reason: "__metadata__ must be an object, found \(value.typeDescription)")
        }
        var metadata: [String: String] = [:]
        for (key, item) in object.members {
            guard let text = item.stringValue else {
                throw CheckpointError.invalidHeader(
                    path: path, reason: "__metadata__ value '\(key)' must be a string, found \(item.typeDescription)")
            }
            metadata[key] = text
        }
        return metadata
    }

    private static func parseTensorEntry(
        name: String, _ value: JSONValue, path: String, dataLength: Int
    ) throws -> (dtype: TensorDType, shape: [Int], elementCount: Int, dataOffsets: Range<Int>) {
        func invalid(_ reason: String) -> CheckpointError {
            .invalidTensorEntry(path: path, tensor: name, reason: reason)
        }
        guard let entry = value.objectValue else { throw invalid("expected an object, found \(value.typeDescription)") }
        for key in entry.keys where !["dtype", "shape", "data_offsets"].contains(key) {
            throw invalid("unexpected key '\(key)'")
        }
        guard let dtypeValue = entry["dtype"] else { throw invalid("missing 'dtype'") }
        guard let dtypeName = dtypeValue.stringValue else {
            throw invalid("'dtype' must be a string, found \(dtypeValue.typeDescription)")
        }
        guard let dtype = TensorDType(rawValue: dtypeName) else {
            throw CheckpointError.unknownDType(path: path, tensor: name, dtype: dtypeName)
        }

        guard let shapeValue = entry["shape"] else { throw invalid("missing 'shape'") }
        guard let shapeItems = shapeValue.arrayValue else {
            throw invalid("'shape' must be an array of integers, found \(shapeValue.typeDescription)")
        }
        var shape: [Int] = []
        for item in shapeItems {
            // As safetensors reads them: written as integers, `64.0` is not one.
            guard let dimension = item.integerLiteralValue else {
                throw invalid("'shape' must be an array of integers")
            }
            shape.append(dimension)
        }
        if let negative = shape.first(where: { $0 < 0 }) {
            throw invalid("negative dimension \(negative) in shape \(shape)")
        }
        var elementCount = 1
        for dimension in shape {
            let (product, overflow) = elementCount.multipliedReportingOverflow(by: dimension)
            guard !overflow else { throw invalid("element count of shape \(shape) overflows") }
            elementCount = product
        }

        guard let offsetsValue = entry["data_offsets"] else { throw invalid("missing 'data_offsets'") }
        guard let offsets = offsetsValue.arrayValue, offsets.count == 2,
            let begin = offsets[0].integerLiteralValue, let end = offsets[1].integerLiteralValue, begin >= 0, end >= 0
        else { throw invalid("'data_offsets' must be two non-negative integers") }
        guard begin <= end else { throw invalid("'data_offsets' begin \(begin) is after end \(end)") }
        guard end <= dataLength else {
            throw invalid("'data_offsets' end \(end) is past the \(dataLength)-byte data section")
        }
        guard let byteCount = dtype.byteCount(elementCount: elementCount) else {
            throw invalid("\(elementCount) elements of \(dtype) do not fill whole bytes or overflow")
        }
        guard byteCount == end - begin else {
            throw invalid("shape \(shape) of \(dtype) needs \(byteCount) bytes but 'data_offsets' span \(end - begin)")
        }
        return (dtype, shape, elementCount, begin..<end)
    }

    /// The format requires the data section to be exactly covered: no overlap (two tensors
    /// sharing bytes) and no holes (room for hidden content).
    private static func checkCoverage(
        of ranges: [(name: String, range: Range<Int>)], dataLength: Int, path: String
    ) throws {
        let sorted = ranges.sorted {
            ($0.range.lowerBound, $0.range.upperBound, $0.name) < ($1.range.lowerBound, $1.range.upperBound, $1.name)
        }
        var covered = 0
        var lastName: String?
        for (name, range) in sorted {
            if range.lowerBound < covered, let lastName {
                throw CheckpointError.overlappingTensors(path: path, first: lastName, second: name)
            }
            if range.lowerBound > covered {
                throw CheckpointError.unclaimedData(path: path, byteRange: covered..<range.lowerBound)
            }
            covered = range.upperBound
            lastName = name
        }
        if covered < dataLength {
            throw CheckpointError.unclaimedData(path: path, byteRange: covered..<dataLength)
        }
    }
}

// MARK: Reading

extension SafetensorsFile {
    /// Bytes read per positioned read: small enough to stay in the CPU cache between the
    /// read and the conversion, large enough that system calls cost nothing noticeable.
    static let readChunkBytes = 256 * 1024

    /// Starts reading the tensor's bytes into the system's cache (a hint; unknown names are ignored).
    public func willRead(_ name: String) {
        guard let tensor = try? tensor(named: name) else { return }
        file.willNeed(tensor.byteRange)
    }

    /// Copies the tensor's stored bytes starting `byteOffset` bytes into its data, filling `destination`.
    /// - Throws: `CheckpointError.tensorNotFound`, `.byteRangeOutOfBounds`, `.readFailed`.
    public func readRawBytes(of name: String, byteOffset: Int = 0, into destination: UnsafeMutableRawBufferPointer)
        throws
    {
        let tensor = try tensor(named: name)
        let tensorBytes = tensor.byteRange.count
        guard byteOffset >= 0, byteOffset <= tensorBytes, destination.count <= tensorBytes - byteOffset else {
            throw CheckpointError.byteRangeOutOfBounds(
                tensor: name, offset: byteOffset, count: destination.count, byteCount: tensorBytes)
        }
        try file.read(into: destination, at: tensor.byteRange.lowerBound + byteOffset)
    }

    /// Reads the whole tensor as float16 into `destination`, which must hold `elementCount` values.
    /// - Throws: `CheckpointError.unsupportedDType` for a dtype other than BF16/F16/F32,
    ///   `.destinationSizeMismatch`, `.nonFiniteValues` (NaN/infinity, always refused),
    ///   `.float16RangeExceeded` (values beyond ±65504 under `.refuse`), `.readFailed`.
    ///   Counts cover the whole tensor; on error the destination's content is unspecified.
    @discardableResult
    public func readFloat16(
        _ name: String, into destination: UnsafeMutableBufferPointer<Float16>, outOfRange: Float16RangePolicy = .refuse
    ) throws -> Float16ReadReport {
        let tensor = try tensor(named: name)
        return try readFloat16(name, elements: 0..<tensor.elementCount, into: destination, outOfRange: outOfRange)
    }

    /// Reads elements `elements` (in row-major order) of the tensor as float16 into `destination`,
    /// which must hold exactly `elements.count` values. Lets a caller stream a large tensor
    /// through a small buffer; errors then count only the values of that range.
    /// - Throws: as `readFloat16(_:into:outOfRange:)`, plus `.elementRangeOutOfBounds`.
    @discardableResult
    public func readFloat16(
        _ name: String, elements: Range<Int>, into destination: UnsafeMutableBufferPointer<Float16>,
        outOfRange: Float16RangePolicy = .refuse
    ) throws -> Float16ReadReport {
        let tensor = try tensor(named: name)
        let clamping = outOfRange == .clamp
        let statistics: ConversionStatistics
        switch tensor.dtype {
        case .bf16:
            statistics = try readConverted(tensor, elements: elements, into: destination, sourceType: UInt16.self) {
                PrecisionConversion.toFloat16(bfloat16Bits: $0, into: $1, clampingOutOfRange: clamping)
            }
        case .f16:
            statistics = try readConverted(tensor, elements: elements, into: destination, sourceType: UInt16.self) {
                PrecisionConversion.toFloat16(float16Bits: $0, into: $1)
            }
        case .f32:
            statistics = try readConverted(tensor, elements: elements, into: destination, sourceType: UInt32.self) {
                source, output in
                source.withMemoryRebound(to: Float.self) {
                    PrecisionConversion.toFloat16(float32: $0, into: output, clampingOutOfRange: clamping)
                }
            }
        default:
            throw CheckpointError.unsupportedDType(path: url.path, tensor: name, dtype: tensor.dtype)
        }
        guard statistics.nonFiniteCount == 0 else {
            throw CheckpointError.nonFiniteValues(path: url.path, tensor: name, count: statistics.nonFiniteCount)
        }
        guard statistics.outOfRangeCount == 0 || clamping else {
            throw CheckpointError.float16RangeExceeded(
                path: url.path, tensor: name, count: statistics.outOfRangeCount,
                largestMagnitude: statistics.largestOutOfRangeMagnitude)
        }
        return Float16ReadReport(clampedCount: statistics.outOfRangeCount)
    }

    /// Reads elements `elements` of a float32 tensor as float16 bit patterns, rounded as
    /// ``readFloat16(_:elements:into:outOfRange:)`` rounds, without checking them: a value
    /// float16 cannot hold comes out as an infinity or NaN, for the caller to find. Lets
    /// compression count and stream a float32 tensor as it does a float16 one.
    /// - Throws: `CheckpointError.unsupportedDType` for another dtype, `.elementRangeOutOfBounds`,
    ///   `.destinationSizeMismatch`, `.readFailed`.
    public func readFloat16Patterns(
        _ name: String, elements: Range<Int>, into destination: UnsafeMutableBufferPointer<UInt16>
    ) throws {
        let tensor = try tensor(named: name)
        guard tensor.dtype == .f32 else {
            throw CheckpointError.unsupportedDType(path: url.path, tensor: name, dtype: tensor.dtype)
        }
        try destination.withMemoryRebound(to: Float16.self) { halves in
            _ = try readConverted(tensor, elements: elements, into: halves, sourceType: UInt32.self) { source, output in
                source.withMemoryRebound(to: Float.self) {
                    PrecisionConversion.toFloat16(float32: $0, into: output, clampingOutOfRange: false)
                }
            }
        }
    }

    /// Reads the whole tensor as float32 into `destination`, which must hold `elementCount` values.
    /// - Throws: `CheckpointError.unsupportedDType`, `.destinationSizeMismatch`,
    ///   `.nonFiniteValues`, `.readFailed`.
    public func readFloat(_ name: String, into destination: UnsafeMutableBufferPointer<Float>) throws {
        let tensor = try tensor(named: name)
        try readFloat(name, elements: 0..<tensor.elementCount, into: destination)
    }

    /// Reads elements `elements` of the tensor as float32 into `destination`, which must hold
    /// exactly `elements.count` values.
    /// - Throws: as `readFloat(_:into:)`, plus `.elementRangeOutOfBounds`.
    public func readFloat(_ name: String, elements: Range<Int>, into destination: UnsafeMutableBufferPointer<Float>)
        throws
    {
        let tensor = try tensor(named: name)
        let statistics: ConversionStatistics
        switch tensor.dtype {
        case .bf16:
            statistics = try readConverted(tensor, elements: elements, into: destination, sourceType: UInt16.self) {
                PrecisionConversion.toFloat(bfloat16Bits: $0, into: $1)
            }
        case .f16:
            statistics = try readConverted(tensor, elements: elements, into: destination, sourceType: UInt16.self) {
                PrecisionConversion.toFloat(float16Bits: $0, into: $1)
            }
        case .f32:
            statistics = try readConverted(tensor, elements: elements, into: destination, sourceType: UInt32.self) {
                source, output in
                source.withMemoryRebound(to: Float.self) { PrecisionConversion.toFloat(float32: $0, into: output) }
            }
        default:
            throw CheckpointError.unsupportedDType(path: url.path, tensor: name, dtype: tensor.dtype)
        }
        guard statistics.nonFiniteCount == 0 else {
            throw CheckpointError.nonFiniteValues(path: url.path, tensor: name, count: statistics.nonFiniteCount)
        }
    }

    /// Reads `elements` chunk by chunk into a small scratch buffer, turns each chunk to host
    /// byte order and hands it to `convert` with the matching slice of `destination`.
    private func readConverted<Source: FixedWidthInteger, Element>(
        _ tensor: TensorDescriptor, elements: Range<Int>, into destination: UnsafeMutableBufferPointer<Element>,
        sourceType: Source.Type,
        convert: (UnsafeBufferPointer<Source>, UnsafeMutableBufferPointer<Element>) -> ConversionStatistics
    ) throws -> ConversionStatistics {
        guard elements.lowerBound >= 0, elements.upperBound <= tensor.elementCount else {
            throw CheckpointError.elementRangeOutOfBounds(
                tensor: tensor.name, requested: elements, elementCount: tensor.elementCount)
        }
        guard destination.count == elements.count else {
            throw CheckpointError.destinationSizeMismatch(
                tensor: tensor.name, expected: elements.count, actual: destination.count)
        }
        var statistics = ConversionStatistics()
        guard !elements.isEmpty else { return statistics }
        let elementSize = MemoryLayout<Source>.size
        let chunkElements = min(SafetensorsFile.readChunkBytes / elementSize, elements.count)
        let scratch = UnsafeMutableBufferPointer<Source>.allocate(capacity: chunkElements)
        defer { scratch.deallocate() }
        var next = elements.lowerBound
        while next < elements.upperBound {
            let count = min(chunkElements, elements.upperBound - next)
            let chunk = UnsafeMutableBufferPointer(rebasing: scratch[0..<count])
            try file.read(
                into: UnsafeMutableRawBufferPointer(chunk), at: tensor.byteRange.lowerBound + next * elementSize)
            #if _endian(big)
                for index in chunk.indices { chunk[index] = Source(littleEndian: chunk[index]) }
            #endif
            let outputStart = next - elements.lowerBound
            let output = UnsafeMutableBufferPointer(rebasing: destination[outputStart..<(outputStart + count)])
            statistics.merge(convert(UnsafeBufferPointer(chunk), output))
            next += count
        }
        return statistics
    }
}
