import Foundation

/// `static.json` of a compiled artifact: what the static context fixes, precomputed once on the
/// build machine (docs/FORMAT.md). Schema `exporter.static/1`.
public struct StaticDescription: Codable, Equatable, Sendable {
    /// The schema this version writes and reads.
    public static let currentSchema = "exporter.static/1"
    /// File name in the artifact.
    public static let fileName = "static.json"
    /// The RoPE cosine table.
    public static let ropeCosName = "tables/rope_cos.f32"
    /// The RoPE sine table.
    public static let ropeSinName = "tables/rope_sin.f32"

    /// `exporter.static/1`.
    public var schema: String
    /// Tokens of context.
    public var contextLength: Int
    /// The causal mask the runtime builds (its shape and rule; it is not stored).
    public var causalMask: CausalMask
    /// The rotary tables.
    public var rope: Rope
    /// The KV cache buffers.
    public var kvCache: KVCache

    /// The causal mask.
    public struct CausalMask: Codable, Equatable, Sendable {
        /// `[context_length, context_length]`.
        public var shape: [Int]
        /// Element type: the compute precision.
        public var dtype: String
        /// `0 where key <= query, -inf elsewhere`.
        public var rule: String
    }

    /// The RoPE tables.
    public struct Rope: Codable, Equatable, Sendable {
        /// Base frequency.
        public var theta: Double
        /// `rope_scaling` type (`linear`) or null.
        @NullEncoded public var scalingType: String?
        /// `rope_scaling` factor or null.
        @NullEncoded public var scalingFactor: Double?
        /// `[context_length, head_dim / 2]`.
        public var shape: [Int]
        /// `float32`.
        public var dtype: String
        /// The cosine table's path.
        public var cos: String
        /// The sine table's path.
        public var sin: String

        enum CodingKeys: String, CodingKey {
            case theta, shape, dtype, cos, sin
            case scalingType = "scaling_type"
            case scalingFactor = "scaling_factor"
        }
    }

    /// The KV cache.
    public struct KVCache: Codable, Equatable, Sendable {
        /// Element type.
        public var dtype: String
        /// Shape of one buffer: `[kv_heads, context_length, head_dim]`.
        public var bufferShape: [Int]
        /// Bytes of one buffer.
        public var bufferBytes: Int
        /// Bytes between buffer starts (a multiple of `alignment`).
        public var slotBytes: Int
        /// Alignment of every buffer (the page size).
        public var alignment: Int
        /// The whole cache.
        public var totalBytes: Int
        /// Every layer's K and V offsets.
        public var layers: [Layer]

        /// One layer.
        public struct Layer: Codable, Equatable, Sendable {
            /// The decoder layer.
            public var layer: Int
            /// Offset of its K buffer.
            public var kOffset: Int
            /// Offset of its V buffer.
            public var vOffset: Int

            enum CodingKeys: String, CodingKey {
                case layer
                case kOffset = "k_offset"
                case vOffset = "v_offset"
            }
        }

        enum CodingKeys: String, CodingKey {
            case dtype, alignment, layers
            case bufferShape = "buffer_shape"
            case bufferBytes = "buffer_bytes"
            case slotBytes = "slot_bytes"
            case totalBytes = "total_bytes"
        }
    }

    enum CodingKeys: String, CodingKey {
        case schema, rope
        case contextLength = "context_length"
        case causalMask = "causal_mask"
        case kvCache = "kv_cache"
    }

    /// The description of `plan`'s static context.
    public init(plan: CompilePlan) {
        let graph = plan.subject.graph
        schema = StaticDescription.currentSchema
        contextLength = graph.contextLength
        causalMask = CausalMask(
            shape: [graph.contextLength, graph.contextLength], dtype: graph.computePrecision,
            rule: "0 where key <= query, -inf elsewhere")
        rope = Rope(
            theta: graph.rope.theta, scalingType: graph.rope.scalingType, scalingFactor: graph.rope.scalingFactor,
            shape: [graph.contextLength, graph.attention.headDim / 2], dtype: "float32",
            cos: StaticDescription.ropeCosName, sin: StaticDescription.ropeSinName)
        let layout = plan.kvCache
        kvCache = KVCache(
            dtype: graph.computePrecision,
            bufferShape: [graph.attention.kvHeads, graph.contextLength, graph.attention.headDim],
            bufferBytes: layout.bufferBytes, slotBytes: layout.slotBytes, alignment: layout.alignment,
            totalBytes: layout.totalBytes,
            layers: layout.layers.map { KVCache.Layer(layer: $0.layer, kOffset: $0.keyOffset, vOffset: $0.valueOffset) }
        )
    }
}

/// The rotary tables: `cos[p][i]` and `sin[p][i]` of `p' × θ^(−2i/d)` for position `p`
/// (`p' = p / factor` with linear scaling), `i < d/2`, computed in double precision and stored as float32.
public enum RopeTables {
    /// The two tables of `graph`, row-major `[context, head_dim / 2]`.
    /// - Throws: `BundleError.invalidGraph` for a linear scaling without a positive factor
    ///   (``GraphDescription/Rope/problem``; a bundle's reader refuses it first),
    ///   `CompileError.unsupportedRopeScaling` for scalings other than none (also written
    ///   `default`) and `linear`.
    public static func make(_ graph: GraphDescription) throws -> (cos: [Float], sin: [Float]) {
        if let problem = graph.rope.problem {
            throw BundleError.invalidGraph(path: BundleWriter.graphName, reason: problem)
        }
        // Positions are divided by the linear factor, as the reference forward pass does.
        var factor = 1.0
        if let type = graph.rope.scalingType, type != "default" {
            guard type == "linear", let linear = graph.rope.scalingFactor else {
                throw CompileError.unsupportedRopeScaling(type)
            }
            factor = linear
        }
        let half = graph.attention.headDim / 2
        let frequencies = (0..<half).map { 1 / pow(graph.rope.theta, Double(2 * $0) / Double(graph.attention.headDim)) }
        var cosines = [Float](repeating: 0, count: graph.contextLength * half)
        var sines = [Float](repeating: 0, count: graph.contextLength * half)
        for position in 0..<graph.contextLength {
            let p = Double(position) / factor
            for (index, frequency) in frequencies.enumerated() {
                let angle = p * frequency
                cosines[position * half + index] = Float(cos(angle))
                sines[position * half + index] = Float(sin(angle))
            }
        }
        return (cosines, sines)
    }
}
