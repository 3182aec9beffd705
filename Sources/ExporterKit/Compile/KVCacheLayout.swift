/// Where each layer's K and V buffers sit in the static KV cache: one buffer per layer and
/// kind, `[kv_heads, context_length, head_dim]` in the compute precision, each starting at a
/// multiple of the page size. Written to `static.json` (docs/FORMAT.md).
public struct KVCacheLayout: Equatable, Sendable {
    /// One layer's buffers.
    public struct Layer: Equatable, Sendable {
        /// The decoder layer.
        public let layer: Int
        /// Offset of its K buffer.
        public let keyOffset: Int
        /// Offset of its V buffer.
        public let valueOffset: Int
    }

    /// Bytes of one buffer: `kv_heads × context × head_dim × bytes(dtype)`.
    public let bufferBytes: Int
    /// Bytes between buffers: `bufferBytes` rounded up to the page size.
    public let slotBytes: Int
    /// The page size every buffer is aligned to.
    public let alignment: Int
    /// Every layer, in order.
    public let layers: [Layer]

    /// The whole cache.
    public var totalBytes: Int { 2 * slotBytes * layers.count }

    /// The layout of `graph`'s cache with buffers aligned to `pageSize`.
    public init(graph: GraphDescription, pageSize: Int) {
        let precision = ComputePrecision(rawValue: graph.computePrecision) ?? .float16
        bufferBytes =
            graph.attention.kvHeads * graph.contextLength * graph.attention.headDim * precision.bytesPerElement
        slotBytes = (bufferBytes + pageSize - 1) / pageSize * pageSize
        alignment = pageSize
        let slot = slotBytes
        layers = (0..<graph.layers).map { Layer(layer: $0, keyOffset: 2 * $0 * slot, valueOffset: (2 * $0 + 1) * slot) }
    }
}
