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

    /// `tensor`'s values as their stored bfloat16 bit patterns, row-major, when the source
    /// stores it as bfloat16 and every value converts to a finite float16; nil otherwise
    /// (`readFloat16` then converts it, and reports or clamps what it must). Palettisation
    /// counts these patterns directly rather than converting every weight first.
    /// - Throws: the source's read errors.
    func readBFloat16Bits(_ tensor: TensorSpec) throws -> [UInt16]?

    /// A hint that `tensor` will be read soon: a source on disk starts reading it now.
    func willRead(_ tensor: TensorSpec)
}

extension WeightSource {
    /// Nothing to start ahead.
    public func willRead(_ tensor: TensorSpec) {}

    /// No stored bfloat16 patterns: the source is read through `readFloat16`.
    public func readBFloat16Bits(_ tensor: TensorSpec) throws -> [UInt16]? { nil }
}
