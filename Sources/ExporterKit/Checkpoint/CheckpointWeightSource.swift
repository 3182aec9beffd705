import Foundation

/// Weights read from a checkpoint's safetensors files.
public struct CheckpointWeightSource: WeightSource {
    /// The checkpoint.
    public let weights: CheckpointWeights
    /// What to do with bfloat16/float32 values beyond float16's range.
    public let outOfRange: Float16RangePolicy
    /// Counts values clamped under `.clamp`, for the manifest's warnings.
    public let clampLog: ClampLog

    /// Values clamped to the float16 range, by tensor.
    public final class ClampLog: @unchecked Sendable {
        private let lock = NSLock()
        /// Clamped values by tensor: a tensor read again (a second pass) counts once.
        private var counts: [String: Int] = [:]

        /// Tensors with clamped values and how many, in the order of `tensors` (workers read
        /// in any order; a manifest must not depend on it), then any others by name.
        public func entries(in tensors: [String]) -> [(tensor: String, count: Int)] {
            let recorded = lock.withLock { counts }
            let position = Dictionary(tensors.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
            return recorded.sorted {
                (position[$0.key] ?? .max, $0.key) < (position[$1.key] ?? .max, $1.key)
            }.map { (tensor: $0.key, count: $0.value) }
        }

        func record(_ tensor: String, _ count: Int) {
            guard count > 0 else { return }
            lock.withLock { counts[tensor] = count }
        }
    }

    /// A source over `weights`.
    public init(weights: CheckpointWeights, outOfRange: Float16RangePolicy) {
        self.weights = weights
        self.outOfRange = outOfRange
        self.clampLog = ClampLog()
    }

    /// `checkpoint`.
    public var weightsKind: String { "checkpoint" }

    /// Starts reading `tensor`'s bytes from disk ahead of the read that needs them.
    public func willRead(_ tensor: TensorSpec) { weights.willRead(tensor.name) }

    /// bfloat16 and float16 as stored; float32 as float16, converted as it is read.
    public func storedPatterns(_ tensor: TensorSpec) -> SourcePatterns? { storedDType(tensor)?.compressionPatterns }

    /// True for a tensor stored as bfloat16 or float32; false for float16 or a tensor not found.
    public func mayExceedFloat16(_ tensor: TensorSpec) -> Bool { storedDType(tensor)?.mayExceedFloat16 ?? false }

    private func storedDType(_ tensor: TensorSpec) -> TensorDType? {
        guard let stored = try? weights.tensor(named: tensor.name), stored.elementCount == tensor.elementCount else {
            return nil
        }
        return stored.dtype
    }

    /// Reads the range as stored (little-endian on disk), or, for float32, converts it to
    /// float16 patterns in parts side by side when it is large.
    /// - Throws: `CheckpointError` from the safetensors reader: unknown tensor, range out of
    ///   bounds, short read.
    public func readStoredPatterns(
        _ tensor: TensorSpec, elements: Range<Int>, into buffer: UnsafeMutableBufferPointer<UInt16>
    ) throws {
        if storedDType(tensor) == .f32 {
            // A large range is converted in parts side by side: the int8 codes and kept tensors
            // are made on the write queue, one thread (a palette's workers read small ranges).
            let (name, weights) = (tensor.name, self.weights)
            let results = Self.inParts(elements.count, minimumPart: Self.parallelConversionElements) { range in
                try weights.readFloat16Patterns(
                    name, elements: (elements.lowerBound + range.lowerBound)..<(elements.lowerBound + range.upperBound),
                    into: UnsafeMutableBufferPointer(rebasing: buffer[range]))
            }
            guard let results else {
                try weights.readFloat16Patterns(name, elements: elements, into: buffer)
                return
            }
            for result in results { try result.get() }
            return
        }
        let elementSize = MemoryLayout<UInt16>.stride
        try weights.readRawBytes(
            of: tensor.name, byteOffset: elements.lowerBound * elementSize, into: UnsafeMutableRawBufferPointer(buffer))
        #if _endian(big)
            for index in buffer.indices { buffer[index] = UInt16(littleEndian: buffer[index]) }
        #endif
    }

    /// Tensors at least this large are read in one part per core.
    static let parallelReadElements = 1 << 22
    /// float32 ranges at least this large are converted to float16 patterns in one part per core.
    static let parallelConversionElements = 1 << 19

    /// Reads and converts `tensor` (in parts side by side when large), recording values clamped
    /// under `.clamp` in ``clampLog``.
    /// - Throws: `CheckpointError` from the safetensors reader: unknown tensor, short read, or
    ///   values beyond float16's range under `.refuse`.
    public func readFloat16(_ tensor: TensorSpec, into buffer: UnsafeMutableBufferPointer<Float16>) throws {
        // A large tensor (the embedding above all, read while nothing else can run) is read
        // and converted in parts side by side. Should a part fail, the whole tensor is read
        // again in one piece below, so the error counts all of its values.
        let (name, policy, weights) = (tensor.name, outOfRange, self.weights)
        let parts = Self.inParts(buffer.count, minimumPart: Self.parallelReadElements) { range in
            try weights.readFloat16(
                name, elements: range, into: UnsafeMutableBufferPointer(rebasing: buffer[range]), outOfRange: policy
            ).clampedCount
        }
        if let clamped = try? parts?.map({ try $0.get() }) {
            clampLog.record(tensor.name, clamped.reduce(0, +))
            return
        }
        let report = try weights.readFloat16(tensor.name, into: buffer, outOfRange: outOfRange)
        clampLog.record(tensor.name, report.clampedCount)
    }

    /// Reads `tensor` widened to float32, for the reference forward pass.
    /// - Throws: `CheckpointError` from the safetensors reader: unknown tensor, short read.
    public func readFloat(_ tensor: TensorSpec, into buffer: UnsafeMutableBufferPointer<Float>) throws {
        try weights.readFloat(tensor.name, into: buffer)
    }
}

extension CheckpointWeightSource {
    /// `body` over `0..<count` split into one part per core, side by side, each part at least
    /// `minimumPart` elements: each part's result, in order; nil (nothing run) when the count
    /// does not make two parts. Each part must touch only its own range of any output.
    static func inParts<Value>(
        _ count: Int, minimumPart: Int, _ body: (Range<Int>) throws -> Value
    ) -> [Result<Value, Error>]? {
        let parts = min(SystemResources.activeCores, count / minimumPart)
        guard parts > 1 else { return nil }
        let results = WorkerResults<Result<Value, Error>?>(count: parts, initial: nil)
        DispatchQueue.concurrentPerform(iterations: parts) { part in
            results[part] = Result { try body((count * part / parts)..<(count * (part + 1) / parts)) }
        }
        return results.values.compactMap { $0 }
    }
}
