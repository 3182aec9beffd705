import ExporterKit
import Foundation

/// Builds safetensors files byte by byte for tests: valid ones and deliberately broken ones.
public enum SafetensorsFixture {
    /// A file's bytes: the little-endian header length (`declaredHeaderLength`, or the real
    /// length of `header`), the header text, then `data`.
    public static func bytes(header: String, data: [UInt8] = [], declaredHeaderLength: UInt64? = nil) -> [UInt8] {
        let headerBytes = Array(header.utf8)
        var bytes: [UInt8] = []
        withUnsafeBytes(of: (declaredHeaderLength ?? UInt64(headerBytes.count)).littleEndian) {
            bytes.append(contentsOf: $0)
        }
        return bytes + headerBytes + data
    }

    /// Writes `bytes` to `directory/name` and returns its URL.
    @discardableResult
    public static func write(_ bytes: [UInt8], named name: String, in directory: URL) throws -> URL {
        let url = directory.appendingPathComponent(name)
        try Data(bytes).write(to: url)
        return url
    }

    /// A tensor for `writeFile`: its name, dtype, shape and stored bytes.
    public struct Tensor {
        /// The tensor's name.
        public let name: String
        /// Its dtype.
        public let dtype: TensorDType
        /// Its shape.
        public let shape: [Int]
        /// Its stored (little-endian) bytes.
        public let bytes: [UInt8]

        /// A tensor of raw bytes.
        public init(_ name: String, _ dtype: TensorDType, _ shape: [Int], bytes: [UInt8]) {
            self.name = name
            self.dtype = dtype
            self.shape = shape
            self.bytes = bytes
        }

        /// A BF16 tensor of `values` (rounded to nearest even).
        public static func bf16(_ name: String, _ shape: [Int], _ values: [Float]) -> Tensor {
            Tensor(name, .bf16, shape, bytes: SafetensorsFixture.bf16Bytes(values))
        }

        /// An F16 tensor of `values`.
        public static func f16(_ name: String, _ shape: [Int], _ values: [Float]) -> Tensor {
            Tensor(
                name, .f16, shape, bytes: SafetensorsFixture.littleEndianBytes(values.map { Float16($0).bitPattern }))
        }

        /// An F32 tensor of `values`.
        public static func f32(_ name: String, _ shape: [Int], _ values: [Float]) -> Tensor {
            Tensor(name, .f32, shape, bytes: SafetensorsFixture.littleEndianBytes(values.map(\.bitPattern)))
        }
    }

    /// Writes a valid file with `SafetensorsWriter`.
    @discardableResult
    public static func writeFile(
        named name: String, in directory: URL, tensors: [Tensor], metadata: [String: String] = [:]
    ) throws -> URL {
        let url = directory.appendingPathComponent(name)
        let writer = try SafetensorsWriter(
            url: url, tensors: tensors.map { .init(name: $0.name, dtype: $0.dtype, shape: $0.shape) },
            metadata: metadata)
        for tensor in tensors.sorted(by: { $0.name < $1.name }) where !tensor.bytes.isEmpty {
            try tensor.bytes.withUnsafeBytes { try writer.write(tensor.name, bytes: $0) }
        }
        try writer.finish()
        return url
    }

    /// BF16 stored bytes of `values`.
    public static func bf16Bytes(_ values: [Float]) -> [UInt8] {
        littleEndianBytes(values.map { PrecisionConversion.bfloat16Bits($0) })
    }

    /// The little-endian bytes of `values`.
    public static func littleEndianBytes<Integer: FixedWidthInteger>(_ values: [Integer]) -> [UInt8] {
        var bytes: [UInt8] = []
        for value in values { withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) } }
        return bytes
    }
}
