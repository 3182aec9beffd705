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
        private var counts: [(String, Int)] = []

        /// Tensors with clamped values and how many, in reading order.
        public var entries: [(tensor: String, count: Int)] { lock.withLock { counts.map { ($0.0, $0.1) } } }

        func record(_ tensor: String, _ count: Int) {
            guard count > 0 else { return }
            lock.withLock { counts.append((tensor, count)) }
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

    public func willRead(_ tensor: TensorSpec) { weights.willRead(tensor.name) }

    /// bfloat16 and float16 as stored; float32 as float16, converted as it is read.
    public func storedPatterns(_ tensor: TensorSpec) -> SourcePatterns? {
        switch storedDType(tensor) {
        case .bf16: return .bfloat16
        case .f16, .f32: return .float16
        default: return nil
        }
    }

    public func mayExceedFloat16(_ tensor: TensorSpec) -> Bool {
        let dtype = storedDType(tensor)
        return dtype == .bf16 || dtype == .f32
    }

    private func storedDType(_ tensor: TensorSpec) -> TensorDType? {
        guard let stored = try? weights.tensor(named: tensor.name), stored.elementCount == tensor.elementCount else {
            return nil
        }
        return stored.dtype
    }

    public func readStoredPatterns(
        _ tensor: TensorSpec, elements: Range<Int>, into buffer: UnsafeMutableBufferPointer<UInt16>
    ) throws {
        if storedDType(tensor) == .f32 {
            // Converted in parts side by side: a streamed block is read on the thread that then
            // shares the block's compression among the cores, which wait meanwhile.
            let parts = min(SystemResources.activeCores, elements.count / Self.parallelConversionElements)
            guard parts > 1 else {
                try weights.readFloat16Patterns(tensor.name, elements: elements, into: buffer)
                return
            }
            let failure = FirstFailure()
            let (shared, name, weights) = (PatternTarget(buffer: buffer), tensor.name, self.weights)
            DispatchQueue.concurrentPerform(iterations: parts) { part in
                let range = (elements.count * part / parts)..<(elements.count * (part + 1) / parts)
                do {
                    try weights.readFloat16Patterns(
                        name, elements: (elements.lowerBound + range.lowerBound)..<(elements.lowerBound + range.upperBound),
                        into: UnsafeMutableBufferPointer(rebasing: shared.buffer[range]))
                } catch {
                    failure.record(error)
                }
            }
            try failure.rethrow()
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

    public func readFloat16(_ tensor: TensorSpec, into buffer: UnsafeMutableBufferPointer<Float16>) throws {
        // A large tensor (the embedding above all, read while nothing else can run) is read
        // and converted in parts side by side. Should a part fail, the whole tensor is read
        // again in one piece below, so the error counts all of its values.
        let parts = min(SystemResources.activeCores, buffer.count / Self.parallelReadElements)
        if parts > 1 {
            var clamped = [Int?](repeating: nil, count: parts)
            clamped.withUnsafeMutableBufferPointer { results in
                let shared = ParallelReadTarget(buffer: buffer, results: results)
                let (name, policy, weights) = (tensor.name, outOfRange, self.weights)
                DispatchQueue.concurrentPerform(iterations: parts) { part in
                    let range = (buffer.count * part / parts)..<(buffer.count * (part + 1) / parts)
                    let destination = UnsafeMutableBufferPointer(rebasing: shared.buffer[range])
                    shared.results[part] = try? weights.readFloat16(
                        name, elements: range, into: destination, outOfRange: policy
                    ).clampedCount
                }
            }
            if !clamped.contains(nil) {
                clampLog.record(tensor.name, clamped.reduce(0) { $0 + ($1 ?? 0) })
                return
            }
        }
        let report = try weights.readFloat16(tensor.name, into: buffer, outOfRange: outOfRange)
        clampLog.record(tensor.name, report.clampedCount)
    }

    public func readFloat(_ tensor: TensorSpec, into buffer: UnsafeMutableBufferPointer<Float>) throws {
        try weights.readFloat(tensor.name, into: buffer)
    }
}

/// Where the parts of a parallel pattern read land; each part writes its own range.
private struct PatternTarget: @unchecked Sendable {
    let buffer: UnsafeMutableBufferPointer<UInt16>
}

/// Where the parts of a parallel read land; each part writes its own range and result slot.
private struct ParallelReadTarget: @unchecked Sendable {
    let buffer: UnsafeMutableBufferPointer<Float16>
    let results: UnsafeMutableBufferPointer<Int?>
}

/// Deterministic generated weights with the exact shapes of the plan (`--synthetic`), as
/// the 16-bit patterns a checkpoint of the config's `torch_dtype` would store: bfloat16
/// patterns for a bfloat16 model, which then takes the same path through the export as its
/// real checkpoint (the same bytes as exporting `exporter synth --dtype BF16`), float16 ones
/// otherwise.
public struct SyntheticWeightSource: WeightSource {
    /// The generator.
    public let generator: SyntheticWeights
    /// The patterns the weights are generated as.
    public let storage: SourcePatterns

    /// A source seeded with `seed`, generating `storage` patterns.
    public init(seed: UInt64, storage: SourcePatterns = .float16) {
        generator = SyntheticWeights(seed: seed)
        self.storage = storage
    }

    /// bfloat16 for a config whose `torch_dtype` is `bfloat16`, float16 for any other.
    public static func storage(for config: ModelConfig) -> SourcePatterns {
        config.torchDType == "bfloat16" ? .bfloat16 : .float16
    }

    /// `synthetic`.
    public var weightsKind: String { "synthetic" }

    public func readFloat16(_ tensor: TensorSpec, into buffer: UnsafeMutableBufferPointer<Float16>) throws {
        try generate(tensor, elements: 0..<tensor.elementCount, count: buffer.count) { elements, offset in
            let part = UnsafeMutableBufferPointer(rebasing: buffer[offset..<(offset + elements.count)])
            switch storage {
            case .float16:
                generator.generate(name: tensor.name, shape: tensor.shape, elements: elements, into: part)
            case .bfloat16:
                // Converted as the checkpoint reader converts bfloat16 (the values stay within ±10).
                withUnsafeTemporaryAllocation(of: UInt16.self, capacity: elements.count) { bits in
                    generator.generateBFloat16Bits(name: tensor.name, shape: tensor.shape, elements: elements, into: bits)
                    _ = PrecisionConversion.toFloat16(
                        bfloat16Bits: UnsafeBufferPointer(bits), into: part, clampingOutOfRange: false)
                }
            }
        }
    }

    public func readFloat(_ tensor: TensorSpec, into buffer: UnsafeMutableBufferPointer<Float>) throws {
        try generate(tensor, elements: 0..<tensor.elementCount, count: buffer.count) { elements, offset in
            let part = UnsafeMutableBufferPointer(rebasing: buffer[offset..<(offset + elements.count)])
            generator.generate(name: tensor.name, shape: tensor.shape, elements: elements, into: part)
            if storage == .bfloat16 {
                for index in part.indices {
                    part[index] = PrecisionConversion.float(bfloat16Bits: PrecisionConversion.bfloat16Bits(part[index]))
                }
            }
        }
    }

    /// Any range can be read as `storage` patterns.
    public func storedPatterns(_ tensor: TensorSpec) -> SourcePatterns? { storage }

    public func readStoredPatterns(
        _ tensor: TensorSpec, elements: Range<Int>, into buffer: UnsafeMutableBufferPointer<UInt16>
    ) throws {
        try generate(tensor, elements: elements, count: buffer.count) { part, offset in
            let slice = UnsafeMutableBufferPointer(rebasing: buffer[offset..<(offset + part.count)])
            switch storage {
            case .float16:
                slice.withMemoryRebound(to: Float16.self) {
                    generator.generate(name: tensor.name, shape: tensor.shape, elements: part, into: $0)
                }
            case .bfloat16:
                generator.generateBFloat16Bits(name: tensor.name, shape: tensor.shape, elements: part, into: slice)
            }
        }
    }

    /// Generates `elements` in chunks over every core (`body` gets a chunk's elements and its
    /// offset in the buffer); values do not depend on the chunking.
    private func generate(
        _ tensor: TensorSpec, elements: Range<Int>, count: Int, chunk body: (Range<Int>, Int) -> Void
    ) throws {
        guard elements.lowerBound >= 0, elements.upperBound <= tensor.elementCount else {
            throw CheckpointError.elementRangeOutOfBounds(tensor: tensor.name, requested: elements, elementCount: tensor.elementCount)
        }
        guard count == elements.count else {
            throw CheckpointError.destinationSizeMismatch(tensor: tensor.name, expected: elements.count, actual: count)
        }
        let chunkSize = 1 << 18
        let chunks = (count + chunkSize - 1) / chunkSize
        DispatchQueue.concurrentPerform(iterations: chunks) { index in
            let offset = index * chunkSize
            body((elements.lowerBound + offset)..<(elements.lowerBound + min(count, offset + chunkSize)), offset)
        }
    }
}
