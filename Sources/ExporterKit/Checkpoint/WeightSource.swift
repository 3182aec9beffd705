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

    /// Whether `tensor` is stored as bfloat16, so that ``readBFloat16Bits(_:elements:into:)``
    /// can read its bit patterns: compression can then count patterns rather than convert
    /// every weight first.
    func storesBFloat16(_ tensor: TensorSpec) -> Bool

    /// Fills `buffer` with the stored bfloat16 bit patterns of elements `elements` of
    /// `tensor` (row-major), which must be stored as bfloat16.
    /// - Throws: the source's read errors.
    func readBFloat16Bits(_ tensor: TensorSpec, elements: Range<Int>, into buffer: UnsafeMutableBufferPointer<UInt16>) throws

    /// A hint that `tensor` will be read soon: a source on disk starts reading it now.
    func willRead(_ tensor: TensorSpec)
}

extension WeightSource {
    /// Not stored as bfloat16: read through `readFloat16`.
    public func storesBFloat16(_ tensor: TensorSpec) -> Bool { false }

    /// Never called when ``storesBFloat16(_:)`` is false.
    public func readBFloat16Bits(
        _ tensor: TensorSpec, elements: Range<Int>, into buffer: UnsafeMutableBufferPointer<UInt16>
    ) throws {
        throw CheckpointError.unsupportedDType(path: weightsKind, tensor: tensor.name, dtype: .bf16)
    }

    /// Nothing to start ahead.
    public func willRead(_ tensor: TensorSpec) {}
}
