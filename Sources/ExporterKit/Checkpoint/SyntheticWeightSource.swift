import Foundation

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

    /// bfloat16 for a config whose `torch_dtype` is `bfloat16`, float16 for any other (none and
    /// `auto`, the weights' own type, among them: there are no weights to say more).
    public static func storage(for config: ModelConfig) -> SourcePatterns {
        config.torchDType == "bfloat16" ? .bfloat16 : .float16
    }

    /// `synthetic`.
    public var weightsKind: String { "synthetic" }

    /// Generates `tensor`; bfloat16 storage is rounded through bfloat16 as a checkpoint's would be.
    /// - Throws: `CheckpointError.destinationSizeMismatch` when `buffer` is not the tensor's size.
    public func readFloat16(_ tensor: TensorSpec, into buffer: UnsafeMutableBufferPointer<Float16>) throws {
        try generate(tensor, elements: 0..<tensor.elementCount, count: buffer.count) { elements, offset in
            let part = UnsafeMutableBufferPointer(rebasing: buffer[offset..<(offset + elements.count)])
            switch storage {
            case .float16:
                generator.generate(name: tensor.name, shape: tensor.shape, elements: elements, into: part)
            case .bfloat16:
                // Converted as the checkpoint reader converts bfloat16 (the values stay within ±10).
                withUnsafeTemporaryAllocation(of: UInt16.self, capacity: elements.count) { bits in
                    generator.generateBFloat16Bits(
                        name: tensor.name, shape: tensor.shape, elements: elements, into: bits)
                    _ = PrecisionConversion.toFloat16(
                        bfloat16Bits: UnsafeBufferPointer(bits), into: part, clampingOutOfRange: false)
                }
            }
        }
    }

    /// Generates `tensor` as float32, rounded through bfloat16 when that is the storage.
    /// - Throws: `CheckpointError.destinationSizeMismatch` when `buffer` is not the tensor's size.
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

    /// Generates exactly the patterns a full read would hold in that range.
    /// - Throws: `CheckpointError.elementRangeOutOfBounds` or `.destinationSizeMismatch`.
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
            throw CheckpointError.elementRangeOutOfBounds(
                tensor: tensor.name, requested: elements, elementCount: tensor.elementCount)
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
