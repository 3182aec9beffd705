/// Where an export's weights come from, tensor by tensor: a checkpoint on disk or the
/// synthetic generator. One tensor is asked for at a time, so memory holds one tensor.
public protocol WeightSource: Sendable {
    /// `checkpoint` or `synthetic`, recorded as the manifest's `model.weights`.
    var weightsKind: String { get }

    /// Fills `buffer` with `tensor`'s values converted to float16, row-major.
    /// - Throws: the source's errors (missing tensor, range, non-finite values).
    func readFloat16(_ tensor: TensorSpec, into buffer: UnsafeMutableBufferPointer<Float16>) throws

    /// Fills `buffer` with `tensor`'s values as float32, row-major.
    /// - Throws: the source's errors (missing tensor, non-finite values).
    func readFloat(_ tensor: TensorSpec, into buffer: UnsafeMutableBufferPointer<Float>) throws

    /// The 16-bit patterns `tensor` is read as by ``readStoredPatterns(_:elements:into:)``,
    /// which reads any range of them: as stored (bfloat16 or float16), or float32 converted
    /// to float16 as it is read (values float16 cannot hold come out as patterns without a
    /// finite value). Compression then counts patterns rather than convert every weight
    /// first, and reads a large tensor a block at a time; a pattern without a finite float16
    /// value sends the tensor through `readFloat16`, which reports or clamps. Nil for other
    /// storage, read through `readFloat16`.
    func storedPatterns(_ tensor: TensorSpec) -> SourcePatterns?

    /// Whether `tensor`'s stored values can lie beyond float16's range (bfloat16, float32):
    /// with clamping allowed, such a tensor may be converted whole after all.
    func mayExceedFloat16(_ tensor: TensorSpec) -> Bool

    /// Fills `buffer` with the patterns of elements `elements` of `tensor` (row-major), which
    /// must have ``storedPatterns(_:)``. Called from several threads at once.
    /// - Throws: the source's read errors.
    func readStoredPatterns(_ tensor: TensorSpec, elements: Range<Int>, into buffer: UnsafeMutableBufferPointer<UInt16>)
        throws

    /// A hint that `tensor` will be read soon: a source on disk starts reading it now.
    func willRead(_ tensor: TensorSpec)
}

extension WeightSource {
    /// Not stored as 16-bit patterns: read through `readFloat16`.
    public func storedPatterns(_ tensor: TensorSpec) -> SourcePatterns? { nil }

    /// bfloat16 patterns can exceed float16's range.
    public func mayExceedFloat16(_ tensor: TensorSpec) -> Bool { storedPatterns(tensor) == .bfloat16 }

    /// Never called when ``storedPatterns(_:)`` is nil.
    /// - Throws: `CheckpointError.unsupportedDType` always: this source has no stored patterns.
    public func readStoredPatterns(
        _ tensor: TensorSpec, elements: Range<Int>, into buffer: UnsafeMutableBufferPointer<UInt16>
    ) throws {
        throw CheckpointError.unsupportedDType(path: weightsKind, tensor: tensor.name, dtype: .bf16)
    }

    /// Nothing to start ahead.
    public func willRead(_ tensor: TensorSpec) {}
}
