import Dispatch
import Foundation

/// Where the reference forward pass gets its weights: float32, row-major, by checkpoint name.
/// A checkpoint gives its stored values (`CheckpointWeights.readFloat`), a bundle its
/// dequantised ones (`BundleReader.dequantize`).
public protocol ReferenceWeights {
    /// The tensor `name` as float32, row-major.
    /// - Throws: `ReferenceModelError.shapeMismatch` when its shape is not `shape`, and the
    ///   source's errors when it is missing or unreadable.
    func referenceTensor(_ name: String, shape: [Int]) throws -> [Float]

    /// Rows `rows` (of the first dimension) of the tensor `name` as float32, row-major: what
    /// the embedding lookup and the head read, so that neither holds the whole vocabulary.
    /// - Throws: as ``referenceTensor(_:shape:)``.
    func referenceRows(_ name: String, shape: [Int], rows: Range<Int>) throws -> [Float]
}

extension ReferenceWeights {
    /// The rows, cut from the whole tensor.
    /// - Throws: as ``referenceTensor(_:shape:)``, and `ReferenceModelError.rowsOutOfRange`
    ///   when `rows` lies beyond the first dimension.
    public func referenceRows(_ name: String, shape: [Int], rows: Range<Int>) throws -> [Float] {
        try ReferenceModel.rows(rows, of: try referenceTensor(name, shape: shape), shape: shape, name: name)
    }
}

extension CheckpointWeights: ReferenceWeights {
    /// The checkpoint's tensor converted to float32.
    /// - Throws: `CheckpointError.tensorNotFound`, `ReferenceModelError.shapeMismatch`, read errors.
    public func referenceTensor(_ name: String, shape: [Int]) throws -> [Float] {
        try convertedRows(name, shape: shape, rows: nil)
    }

    /// The rows read alone, converted to float32.
    /// - Throws: as ``referenceTensor(_:shape:)``.
    public func referenceRows(_ name: String, shape: [Int], rows: Range<Int>) throws -> [Float] {
        try convertedRows(name, shape: shape, rows: rows)
    }

    /// Rows `rows` (nil: all) of the first dimension, converted to float32.
    private func convertedRows(_ name: String, shape: [Int], rows: Range<Int>?) throws -> [Float] {
        let descriptor = try tensor(named: name)
        guard descriptor.shape == shape else {
            throw ReferenceModelError.shapeMismatch(tensor: name, expected: shape, found: descriptor.shape)
        }
        let columns = shape.dropFirst().reduce(1, *)
        if let rows { try ReferenceModel.checkRows(rows, shape: shape, name: name) }
        let elements = rows.map { ($0.lowerBound * columns)..<($0.upperBound * columns) } ?? 0..<descriptor.elementCount
        var values = [Float](repeating: 0, count: elements.count)
        try values.withUnsafeMutableBufferPointer { try readFloat(name, elements: elements, into: $0) }
        return values
    }
}

/// An artifact whose manifest's tensors decode from its own files: a portable bundle
/// (``BundleReader``) or a compiled artifact (``CompiledArtifactReader``), whose parts point
/// into its region-ordered weights file but hold the same bytes.
public protocol DecodableArtifact: ReferenceWeights {
    /// The manifest.
    var manifest: Manifest { get }
    /// The graph description.
    var graph: GraphDescription { get }
    /// The bytes of `part`.
    /// - Throws: `BundleError` when the part lies outside its file or cannot be read.
    func bytes(of part: Manifest.Part) throws -> [UInt8]
}

extension DecodableArtifact {
    /// `tensor` (or its rows `rows`) dequantised to float32, row-major.
    /// - Throws: `BundleError` when its record breaks a format rule or the rows lie outside it.
    func dequantize(_ tensor: Manifest.Tensor, rows: Range<Int>? = nil) throws -> [Float] {
        try TensorDecoder.decode(tensor, precision: manifest.computePrecision, rows: rows) { try bytes(of: $0) }
    }

    /// The artifact's tensor dequantised to float32.
    /// - Throws: `BundleError.unknownTensor`, `ReferenceModelError.shapeMismatch`, decoding errors.
    public func referenceTensor(_ name: String, shape: [Int]) throws -> [Float] {
        try dequantize(try referenceRecord(name, shape: shape))
    }

    /// The rows of a matrix decoded alone (their indices or values, and the tensor's LUTs or
    /// scales); of a vector, cut from the whole.
    /// - Throws: as ``referenceTensor(_:shape:)``.
    public func referenceRows(_ name: String, shape: [Int], rows: Range<Int>) throws -> [Float] {
        let tensor = try referenceRecord(name, shape: shape)
        guard shape.count >= 2 else {
            return try ReferenceModel.rows(rows, of: try dequantize(tensor), shape: shape, name: name)
        }
        try ReferenceModel.checkRows(rows, shape: shape, name: name)
        return try dequantize(tensor, rows: rows)
    }

    /// The record of `name`, which must have `shape`.
    private func referenceRecord(_ name: String, shape: [Int]) throws -> Manifest.Tensor {
        guard let tensor = manifest.tensors.first(where: { $0.name == name }) else {
            throw BundleError.unknownTensor(name)
        }
        guard tensor.shape == shape else {
            throw ReferenceModelError.shapeMismatch(tensor: name, expected: shape, found: tensor.shape)
        }
        return tensor
    }
}

extension BundleReader: DecodableArtifact {
    /// The part's bytes in the bundle's weights file.
    /// - Throws: `BundleError.fileMismatch` when the part lies outside its file,
    ///   `BundleError.readFailed` on a short read.
    public func bytes(of part: Manifest.Part) throws -> [UInt8] {
        try readBytes(file: part.file, offset: part.offset, count: part.bytes)
    }
}

extension CompiledArtifactReader: DecodableArtifact {
    /// The part's bytes in the compiled artifact's file.
    /// - Throws: `BundleError.fileMismatch` when the part lies outside the artifact,
    ///   `BundleError.readFailed` on a short read.
    public func bytes(of part: Manifest.Part) throws -> [UInt8] {
        try read(offset: part.offset, count: part.bytes, file: part.file)
    }
}

/// A plain, CPU-only forward pass of the Qwen2/2.5, Qwen3 and Mistral decoders, following the
/// Hugging Face `transformers` definitions: token embedding; per layer RMSNorm, q/k/v
/// projections (with biases for Qwen2), per-head q/k RMSNorm (Qwen3), rotary embeddings with
/// `rotate_half`, grouped-query causal attention through a static KV cache, output
/// projection, residual, RMSNorm and the SwiGLU MLP `down(silu(gate(x)) · up(x))`; final
/// RMSNorm and a tied or untied head.
///
/// It exists to prove that an artifact computes what its checkpoint computes, not to be
/// fast: float32 throughout, matrix products split over output rows on every core, each
/// output accumulated by one thread in a fixed order, so results do not depend on the core
/// count. Weights are loaded one layer at a time, the embedding a token's row at a time and
/// the head a block of rows at a time, so a 1.5B model needs about 100 MiB.
public struct ReferenceModel {
    /// The model's shape.
    public let architecture: ReferenceArchitecture
    /// Where the weights come from.
    public let weights: ReferenceWeights
    /// Weights of the head read at a time (16 MiB of float32): a block of vocabulary rows.
    var headBlockElements = 1 << 22

    /// Rows `rows` of the first dimension of `values`, a tensor of `shape` named `name`.
    /// - Throws: `ReferenceModelError.rowsOutOfRange` when they lie outside it.
    static func rows(_ rows: Range<Int>, of values: [Float], shape: [Int], name: String) throws -> [Float] {
        try checkRows(rows, shape: shape, name: name)
        let columns = shape.dropFirst().reduce(1, *)
        guard rows.upperBound * columns <= values.count else {
            throw ReferenceModelError.rowsOutOfRange(
                tensor: name, rows: rows, available: values.count / max(columns, 1))
        }
        return Array(values[(rows.lowerBound * columns)..<(rows.upperBound * columns)])
    }

    /// - Throws: `ReferenceModelError.rowsOutOfRange` when `rows` lie outside the first dimension of `shape`.
    static func checkRows(_ rows: Range<Int>, shape: [Int], name: String) throws {
        let available = shape.first ?? 1
        guard rows.lowerBound >= 0, rows.upperBound <= available else {
            throw ReferenceModelError.rowsOutOfRange(tensor: name, rows: rows, available: available)
        }
    }

    /// A model of `architecture` reading `weights`.
    public init(architecture: ReferenceArchitecture, weights: ReferenceWeights) {
        self.architecture = architecture
        self.weights = weights
    }

    /// The logits of every position of `tokens` (position `t` predicts token `t + 1`), each
    /// `vocab_size` long.
    /// - Throws: `ReferenceModelError.invalidTokens` for an empty sequence, a token outside the
    ///   vocabulary or more tokens than the context holds; the weights' errors.
    public func logits(tokens: [Int]) throws -> [[Float]] {
        try logits(tokens: tokens, observe: nil)
    }

    /// The logits of every position, calling `observe` with the input of every decoder linear
    /// layer before it is applied: the weight's name, the `[positions, width]` activations, and
    /// `positions` and `width` (what calibration measures); and `progress` with the steps done,
    /// 0 first, then after every layer and the head (``stepCount`` in all).
    /// - Throws: as ``logits(tokens:)``.
    public func logits(
        tokens: [Int], observe: ((String, [Float], Int, Int) -> Void)?, progress: (Int) -> Void = { _ in }
    ) throws -> [[Float]] {
        let a = architecture
        let count = tokens.count
        guard count > 0 else { throw ReferenceModelError.invalidTokens("no tokens to run") }
        guard count <= a.contextLength else {
            throw ReferenceModelError.invalidTokens("\(count) tokens exceed the context length of \(a.contextLength)")
        }
        if let bad = tokens.first(where: { $0 < 0 || $0 >= a.vocabularySize }) {
            throw ReferenceModelError.invalidTokens("token \(bad) is outside the vocabulary of \(a.vocabularySize)")
        }
        let hidden = a.hiddenSize
        let queryWidth = a.heads * a.headDim
        let kvWidth = a.kvHeads * a.headDim

        // The embedding and the head are read a row or a block of rows at a time: the whole
        // vocabulary (933 MB in float32 for Qwen2.5-1.5B) is never held.
        let embeddingName = "model.embed_tokens.weight"
        let vocabularyShape = [a.vocabularySize, hidden]
        var x = [Float](repeating: 0, count: count * hidden)
        for (position, token) in tokens.enumerated() {
            let row = try weights.referenceRows(embeddingName, shape: vocabularyShape, rows: token..<(token + 1))
            x.replaceSubrange((position * hidden)..<((position + 1) * hidden), with: row)
        }

        // The static KV cache of one layer: [kv_heads, context_length, head_dim] for K and for V,
        // reused layer after layer (the whole sequence runs through a layer before the next).
        var keyCache = [Float](repeating: 0, count: a.kvHeads * a.contextLength * a.headDim)
        var valueCache = keyCache
        let rotary = RotaryTable(architecture: a, positions: count)
        progress(0)

        for layer in 0..<a.layers {
            let prefix = "model.layers.\(layer)."
            func tensor(_ name: String, _ shape: [Int]) throws -> [Float] {
                try weights.referenceTensor(prefix + name, shape: shape)
            }
            var normed = ReferenceKernels.rmsNorm(
                x, rows: count, width: hidden, weight: try tensor("input_layernorm.weight", [hidden]),
                epsilon: a.rmsNormEpsilon)
            func bias(_ name: String, _ width: Int) throws -> [Float]? {
                a.qkvBias ? try tensor("self_attn.\(name).bias", [width]) : nil
            }
            observe?(prefix + "self_attn.q_proj.weight", normed, count, hidden)
            observe?(prefix + "self_attn.k_proj.weight", normed, count, hidden)
            observe?(prefix + "self_attn.v_proj.weight", normed, count, hidden)
            var queries = ReferenceKernels.linear(
                normed, rows: count, input: hidden,
                weight: try tensor("self_attn.q_proj.weight", [queryWidth, hidden]),
                output: queryWidth, bias: try bias("q_proj", queryWidth))
            var keys = ReferenceKernels.linear(
                normed, rows: count, input: hidden, weight: try tensor("self_attn.k_proj.weight", [kvWidth, hidden]),
                output: kvWidth, bias: try bias("k_proj", kvWidth))
            let values = ReferenceKernels.linear(
                normed, rows: count, input: hidden, weight: try tensor("self_attn.v_proj.weight", [kvWidth, hidden]),
                output: kvWidth, bias: try bias("v_proj", kvWidth))
            if a.qkNorm {
                queries = ReferenceKernels.rmsNorm(
                    queries, rows: count * a.heads, width: a.headDim,
                    weight: try tensor("self_attn.q_norm.weight", [a.headDim]),
                    epsilon: a.rmsNormEpsilon)
                keys = ReferenceKernels.rmsNorm(
                    keys, rows: count * a.kvHeads, width: a.headDim,
                    weight: try tensor("self_attn.k_norm.weight", [a.headDim]),
                    epsilon: a.rmsNormEpsilon)
            }
            rotary.apply(&queries, positions: count, heads: a.heads)
            rotary.apply(&keys, positions: count, heads: a.kvHeads)
            for position in 0..<count {
                for head in 0..<a.kvHeads {
                    let source = (position * a.kvHeads + head) * a.headDim
                    let target = (head * a.contextLength + position) * a.headDim
                    for d in 0..<a.headDim {
                        keyCache[target + d] = keys[source + d]
                        valueCache[target + d] = values[source + d]
                    }
                }
            }
            let attended = ReferenceKernels.attention(
                queries: queries, keyCache: keyCache, valueCache: valueCache, positions: count, architecture: a)
            observe?(prefix + "self_attn.o_proj.weight", attended, count, queryWidth)
            let projected = ReferenceKernels.linear(
                attended, rows: count, input: queryWidth,
                weight: try tensor("self_attn.o_proj.weight", [hidden, queryWidth]),
                output: hidden, bias: nil)
            for index in x.indices { x[index] += projected[index] }

            normed = ReferenceKernels.rmsNorm(
                x, rows: count, width: hidden, weight: try tensor("post_attention_layernorm.weight", [hidden]),
                epsilon: a.rmsNormEpsilon)
            let width = a.intermediateSize
            observe?(prefix + "mlp.gate_proj.weight", normed, count, hidden)
            observe?(prefix + "mlp.up_proj.weight", normed, count, hidden)
            var gate = ReferenceKernels.linear(
                normed, rows: count, input: hidden, weight: try tensor("mlp.gate_proj.weight", [width, hidden]),
                output: width,
                bias: nil)
            let up = ReferenceKernels.linear(
                normed, rows: count, input: hidden, weight: try tensor("mlp.up_proj.weight", [width, hidden]),
                output: width,
                bias: nil)
            for index in gate.indices {
                let g = gate[index]
                gate[index] = g / (1 + exp(-g)) * up[index]
            }
            observe?(prefix + "mlp.down_proj.weight", gate, count, width)
            let down = ReferenceKernels.linear(
                gate, rows: count, input: width, weight: try tensor("mlp.down_proj.weight", [hidden, width]),
                output: hidden,
                bias: nil)
            for index in x.indices { x[index] += down[index] }
            progress(layer + 1)
        }

        let final = ReferenceKernels.rmsNorm(
            x, rows: count, width: hidden, weight: try weights.referenceTensor("model.norm.weight", shape: [hidden]),
            epsilon: a.rmsNormEpsilon)
        let headName = a.tiedEmbeddings ? embeddingName : "lm_head.weight"
        var logits = [[Float]](repeating: [Float](repeating: 0, count: a.vocabularySize), count: count)
        let blockRows = max(1, headBlockElements / max(hidden, 1))
        for first in stride(from: 0, to: a.vocabularySize, by: blockRows) {
            let rows = first..<min(a.vocabularySize, first + blockRows)
            let head = try weights.referenceRows(headName, shape: vocabularyShape, rows: rows)
            // Each logit is one row's dot product, whatever the block: the same values as whole.
            let block = ReferenceKernels.linear(
                final, rows: count, input: hidden, weight: head, output: rows.count, bias: nil)
            for position in 0..<count {
                logits[position].replaceSubrange(
                    rows, with: block[(position * rows.count)..<((position + 1) * rows.count)])
            }
        }
        progress(stepCount)
        return logits
    }

    /// Steps of a forward pass for ``logits(tokens:observe:progress:)``: the layers and the head.
    public var stepCount: Int { architecture.layers + 1 }

    /// What a pass is at once `done` steps are: `layer 3 of 28`, `the head`, `done`.
    static func stage(_ done: Int, of architecture: ReferenceArchitecture) -> String {
        done < architecture.layers
            ? "layer \(done + 1) of \(architecture.layers)" : done == architecture.layers ? "the head" : "done"
    }
}

/// Rotary position embedding, as `transformers` computes it: `inv_freq[i] = θ^(-2i/d)`,
/// angle `position · inv_freq[i]`, cos and sin repeated over both halves, and
/// `x·cos + rotate_half(x)·sin` with `rotate_half(x) = (-x₂, x₁)`.
struct RotaryTable {
    let headDim: Int
    let cosines: [Float]
    let sines: [Float]

    init(architecture: ReferenceArchitecture, positions: Int) {
        headDim = architecture.headDim
        let half = headDim / 2
        var cosines = [Float](repeating: 0, count: positions * half)
        var sines = cosines
        for position in 0..<positions {
            for i in 0..<half {
                let inverseFrequency = 1 / Foundation.pow(architecture.ropeTheta, Double(2 * i) / Double(headDim))
                let angle = Double(position) / architecture.ropeLinearFactor * inverseFrequency
                cosines[position * half + i] = Float(Foundation.cos(angle))
                sines[position * half + i] = Float(Foundation.sin(angle))
            }
        }
        self.cosines = cosines
        self.sines = sines
    }

    /// Rotates every head of every position of `values` (`[positions, heads, head_dim]`).
    func apply(_ values: inout [Float], positions: Int, heads: Int) {
        let half = headDim / 2
        for position in 0..<positions {
            for head in 0..<heads {
                let base = (position * heads + head) * headDim
                for i in 0..<half {
                    let c = cosines[position * half + i]
                    let s = sines[position * half + i]
                    let first = values[base + i]
                    let second = values[base + half + i]
                    values[base + i] = first * c - second * s
                    values[base + half + i] = second * c + first * s
                }
            }
        }
    }
}

/// The numeric kernels of the reference forward pass: float32, deterministic.
enum ReferenceKernels {
    /// `x · rsqrt(mean(x²) + ε) · w` over each row of `width` values.
    static func rmsNorm(_ x: [Float], rows: Int, width: Int, weight: [Float], epsilon: Double) -> [Float] {
        var result = [Float](repeating: 0, count: x.count)
        for row in 0..<rows {
            let base = row * width
            var sum: Float = 0
            for column in 0..<width { sum += x[base + column] * x[base + column] }
            let scale = 1 / (sum / Float(width) + Float(epsilon)).squareRoot()
            for column in 0..<width { result[base + column] = x[base + column] * scale * weight[column] }
        }
        return result
    }

    /// `y[r][o] = Σᵢ w[o][i] · x[r][i] + b[o]` for `rows` inputs of `input` values and a weight
    /// of `[output, input]` (PyTorch's layout); output rows are shared among the cores.
    static func linear(_ x: [Float], rows: Int, input: Int, weight: [Float], output: Int, bias: [Float]?) -> [Float] {
        var result = [Float](repeating: 0, count: rows * output)
        let chunk = 64
        let chunks = (output + chunk - 1) / chunk
        x.withUnsafeBufferPointer { xs in
            weight.withUnsafeBufferPointer { ws in
                result.withUnsafeMutableBufferPointer { out in
                    guard let xBase = xs.baseAddress, let wBase = ws.baseAddress, let outBase = out.baseAddress else {
                        return
                    }
                    let results = UnsafeMutablePointer(outBase)
                    DispatchQueue.concurrentPerform(iterations: chunks) { index in
                        for o in index * chunk..<min(output, (index + 1) * chunk) {
                            let row = wBase + o * input
                            let offset = bias?[o] ?? 0
                            for r in 0..<rows {
                                results[r * output + o] = dot(row, xBase + r * input, input) + offset
                            }
                        }
                    }
                }
            }
        }
        return result
    }

    /// A dot product with 16 float32 lanes, then the tail: a fixed summation order.
    @inline(__always)
    static func dot(_ a: UnsafePointer<Float>, _ b: UnsafePointer<Float>, _ count: Int) -> Float {
        var first = SIMD8<Float>()
        var second = SIMD8<Float>()
        var index = 0
        let rawA = UnsafeRawPointer(a)
        let rawB = UnsafeRawPointer(b)
        let stride = MemoryLayout<Float>.stride
        while index + 16 <= count {
            first +=
                rawA.loadUnaligned(fromByteOffset: index * stride, as: SIMD8<Float>.self)
                * rawB.loadUnaligned(fromByteOffset: index * stride, as: SIMD8<Float>.self)
            second +=
                rawA.loadUnaligned(fromByteOffset: (index + 8) * stride, as: SIMD8<Float>.self)
                * rawB.loadUnaligned(fromByteOffset: (index + 8) * stride, as: SIMD8<Float>.self)
            index += 16
        }
        var sum = (first + second).sum()
        while index < count {
            sum += a[index] * b[index]
            index += 1
        }
        return sum
    }

    /// Causal grouped-query attention of every position over the cached keys and values
    /// (query head `h` reads KV head `h / (heads / kv_heads)`), scaled by `1/√head_dim`,
    /// softmax in float32, restricted to the sliding window when there is one.
    static func attention(
        queries: [Float], keyCache: [Float], valueCache: [Float], positions: Int, architecture a: ReferenceArchitecture
    ) -> [Float] {
        let headDim = a.headDim
        let group = a.heads / a.kvHeads
        let scale = 1 / Float(headDim).squareRoot()
        var result = [Float](repeating: 0, count: positions * a.heads * headDim)
        var scores = [Float](repeating: 0, count: positions)
        for position in 0..<positions {
            let first = a.slidingWindow.map { max(0, position - $0 + 1) } ?? 0
            for head in 0..<a.heads {
                let kvHead = head / group
                let query = (position * a.heads + head) * headDim
                var maximum = -Float.infinity
                for source in first...position {
                    let key = (kvHead * a.contextLength + source) * headDim
                    var sum: Float = 0
                    for d in 0..<headDim { sum += queries[query + d] * keyCache[key + d] }
                    scores[source] = sum * scale
                    maximum = max(maximum, scores[source])
                }
                var total: Float = 0
                for source in first...position {
                    scores[source] = exp(scores[source] - maximum)
                    total += scores[source]
                }
                for source in first...position {
                    let weight = scores[source] / total
                    let value = (kvHead * a.contextLength + source) * headDim
                    for d in 0..<headDim { result[query + d] += weight * valueCache[value + d] }
                }
            }
        }
        return result
    }
}
