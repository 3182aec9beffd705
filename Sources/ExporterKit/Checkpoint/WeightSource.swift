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
}
