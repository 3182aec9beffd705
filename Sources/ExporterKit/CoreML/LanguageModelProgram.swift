import Foundation

/// Where one tensor of a bundle sits in an `.mlpackage`: what `verify` compares with the bundle.
public struct MLPackageTensor: Codable, Equatable, Sendable {
    /// One blob of the tensor in `weight.bin`.
    public struct Blob: Codable, Equatable, Sendable {
        /// `values`, `lut`, `indices`, `scales` or `outlier_values`, as in the bundle's parts; or
        /// `outlier_mask` (uint1, the outliers' positions) and `outlier_flags` (uint8 ones).
        public var kind: String
        /// MIL type: `fp16`, `int8`, `uint4`…
        public var dtype: String
        /// Offset of the blob's metadata record in `weight.bin` (what the program refers to).
        public var offset: Int
        /// Bytes of data.
        public var bytes: Int
        /// The tensor's shape in the program.
        public var shape: [Int]
    }

    /// The bundle's tensor name.
    public var name: String
    /// The op that holds it: `const`, `constexpr_lut_to_dense`, `constexpr_blockwise_shift_scale`,
    /// or `select` (a palette with sparse outliers: `<name>_palette`, `<name>_outliers`).
    public var op: String
    /// Its blobs (an int8 scale given inline has none).
    public var blobs: [Blob]
    /// LUTs in the package; more than the bundle's when its last group is smaller (each LUT
    /// then covers `lut_group_rows` rows and repeats the LUT of the bundle's group holding them).
    @NullEncoded public var lutGroups: Int?
    /// Rows per LUT in the package.
    @NullEncoded public var lutGroupRows: Int?

    enum CodingKeys: String, CodingKey {
        case name, op, blobs
        case lutGroups = "lut_groups"
        case lutGroupRows = "lut_group_rows"
    }
}

/// A blob of `weight.bin` that holds no bundle tensor: a RoPE table or a zero bias
/// (docs/FORMAT.md, "Blobs").
public struct MLPackageConstant: Codable, Equatable, Sendable {
    /// The `const` op that holds it: `rope_cos_table`, `rope_sin_table`, or `<linear>_bias`
    /// (`layers_0_o_proj_bias`…, `logits_bias`).
    public var name: String
    /// `rope_cos`, `rope_sin` or `zero_bias`.
    public var kind: String
    /// MIL type: `fp16`.
    public var dtype: String
    /// Offset of the blob's metadata record in `weight.bin`.
    public var offset: Int
    /// Bytes of data.
    public var bytes: Int
    /// Its shape in the program.
    public var shape: [Int]
}

/// The decoder-only language model of a bundle as a Core ML ML program (iOS 18 opset):
///
/// - inputs: `input_ids` (int32 `[1, N]`, N flexible from 1 to the context length),
///   `causal_mask` (float16 `[1, 1, N, context]`, added to the attention scores: 0 where a
///   query may attend, -inf elsewhere), `current_position` (int32 `[1]`, the position of the
///   first of the N tokens);
/// - states: `key_cache` and `value_cache`, float16 `[layers, kv_heads, context, head_dim]`;
///   each layer writes its N new keys and values at `current_position` (`read_state`,
///   `slice_update`, `write_state`) and attends over its whole context row;
/// - output: `logits`, float16 `[1, N, vocab]`.
///
/// Embedding by `gather`; RMSNorm in float32 from primitives (`mul`, `reduce_mean`, `rsqrt`);
/// rotary embeddings from float16 cos/sin tables sliced at the positions; grouped-query
/// attention by `scaled_dot_product_attention` with the query heads of each KV head folded
/// into its sequence axis; SwiGLU; a tied or untied head. Palettised weights are
/// `constexpr_lut_to_dense` of the bundle's LUT and index bytes (with sparse outliers,
/// `select` of `constexpr_sparse_to_dense` of the outliers over it); int8 weights
/// `constexpr_blockwise_shift_scale` of its int8 bytes.
public struct LanguageModelProgram {
    /// The model message.
    public let model: CoreMLSpec.Model
    /// The blobs of `weight.bin`.
    public let blobs: MILBlobStorage.Layout
    /// Op type → count.
    public let opCounts: [String: Int]
    /// Where every bundle tensor went.
    public let tensors: [MLPackageTensor]
    /// The other blobs, in file order: RoPE tables and zero biases.
    public let constants: [MLPackageConstant]

    /// Builds the program of the bundle read by `bundle`.
    /// - Throws: `CoreMLError` when the bundle is not float16, its family has no program here,
    ///   a tensor is missing or stored in a way Core ML cannot hold as is.
    public static func build(bundle: BundleReader) throws -> LanguageModelProgram {
        var emitter = try Emitter(
            ProgramSource(
                graph: bundle.graph, tensors: bundle.manifest.tensors, modelName: bundle.manifest.model.name,
                toolVersion: bundle.manifest.tool.version,
                weightsPath: bundle.url.appendingPathComponent(BundleWriter.weightsName).path,
                read: { try bundle.readBytes(file: $0.file, offset: $0.offset, count: $0.bytes) }))
        return try emitter.build()
    }

    /// The program the bundle of `plan` will convert to, built before the bundle exists: the
    /// same ops and the same blob layout (every part's size follows from the plan), so
    /// `blobs.fileBytes` and the serialized model are the sizes the package will have. Blobs
    /// that would copy the bundle's bytes name a file that does not exist yet, and those derived
    /// from its bytes hold placeholders: this program is for sizes, never for writing.
    /// - Throws: `CoreMLError`, as ``build(bundle:)`` would of the bundle.
    public static func build(plan: ExportPlan) throws -> LanguageModelProgram {
        var tensors = Manifest(plan: plan).tensors
        for (index, parts) in plan.weightsLayout.parts.enumerated() where tensors.indices.contains(index) {
            tensors[index].parts = parts.map {
                Manifest.Part(
                    kind: $0.kind, dtype: $0.dtype, file: BundleWriter.weightsName, offset: $0.offset, bytes: $0.bytes)
            }
        }
        var emitter = try Emitter(
            ProgramSource(
                graph: GraphDescription(plan: plan), tensors: tensors, modelName: plan.outputName,
                toolVersion: ToolVersion.current, weightsPath: BundleWriter.weightsName,
                read: { part in
                    // Outlier indices must rise: 0, 1, 2…; everything else only needs its size.
                    guard part.kind == "outlier_indices" else { return [UInt8](repeating: 0, count: part.bytes) }
                    return (0..<(part.bytes / 4)).flatMap { index in
                        withUnsafeBytes(of: UInt32(truncatingIfNeeded: index).littleEndian, Array.init)
                    }
                }))
        return try emitter.build()
    }

    /// Refuses, before anything is exported, a plan whose bundle could not become a program.
    /// - Throws: `CoreMLError.unsupported`, as ``build(bundle:)`` would.
    public static func checkSupported(_ plan: ExportPlan) throws {
        try Emitter.checkSupported(GraphDescription(plan: plan))
        for tensor in plan.tensors where tensor.scheme.granularity == .perBlock {
            let (rows, columns) = tensor.spec.matrixShape
            try Emitter.checkTiles(
                name: tensor.spec.name, shape: tensor.spec.shape, groupRows: tensor.scheme.groupSize ?? rows,
                blockColumns: tensor.scheme.blockSize ?? columns)
        }
    }
}

/// What a program is built from: a bundle's graph, tensors and bytes, or a plan's.
private struct ProgramSource {
    let graph: GraphDescription
    let tensors: [Manifest.Tensor]
    /// The model's name and the tool's version, for the model's description.
    let modelName: String
    let toolVersion: String
    /// The bundle's `weights.bin`, which blobs of kept bytes copy.
    let weightsPath: String
    /// The bytes of a part.
    let read: (Manifest.Part) throws -> [UInt8]
}

private struct Emitter {
    typealias T = CoreMLSpec.TensorType
    let source: ProgramSource
    let graph: GraphDescription
    let weightsPath: String
    let builder = MILProgramBuilder()
    var cache: [String: MILVariable] = [:]
    var records: [MLPackageTensor] = []
    var constants: [MLPackageConstant] = []

    static let families: Set<String> = ["qwen2", "qwen3", "mistral"]

    init(_ source: ProgramSource) throws {
        self.source = source
        graph = source.graph
        weightsPath = source.weightsPath
        try Emitter.checkSupported(graph)
    }

    /// Refuses `per_block` tiles that do not divide the tensor: Core ML needs equal tiles.
    /// - Throws: `CoreMLError.unsupported` naming the tensor.
    static func checkTiles(name: String, shape: [Int], groupRows: Int, blockColumns: Int) throws {
        let rows = shape.first ?? 1
        let columns = shape.dropFirst().reduce(1, *)
        guard groupRows >= 1, blockColumns >= 1, rows % groupRows == 0, columns % blockColumns == 0 else {
            throw CoreMLError.unsupported(
                reason:
                    "tensor '\(name)': per_block tiles of \(groupRows)x\(blockColumns) do not divide the shape \(shape) "
                    + "(Core ML needs equal tiles)")
        }
    }

    /// Refuses a graph the program cannot express; `exporter <model> --format mlpackage` asks
    /// before exporting, from the plan's graph.
    /// - Throws: `CoreMLError.unsupported`.
    static func checkSupported(_ graph: GraphDescription) throws {
        guard Emitter.families.contains(graph.architecture) else {
            throw CoreMLError.unsupported(
                reason: "no Core ML program for architecture '\(graph.architecture)' (mistral, qwen2, qwen3)")
        }
        guard graph.computePrecision == ComputePrecision.float16.rawValue else {
            throw CoreMLError.unsupported(
                reason: "the bundle computes in \(graph.computePrecision); the program needs float16")
        }
        guard graph.activation == "silu" else {
            throw CoreMLError.unsupported(reason: "activation '\(graph.activation)' (only silu)")
        }
        if let type = graph.rope.scalingType, !["default", "linear"].contains(type) {
            throw CoreMLError.unsupported(reason: "rope scaling '\(type)' (only none and linear)")
        }
        let attention = graph.attention
        guard attention.heads % attention.kvHeads == 0, attention.headDim % 2 == 0 else {
            throw CoreMLError.unsupported(
                reason: "\(attention.heads) heads over \(attention.kvHeads) KV heads of dimension \(attention.headDim)")
        }
    }

    // MARK: Weights

    func tensorRecord(_ name: String) throws -> Manifest.Tensor {
        guard let tensor = source.tensors.first(where: { $0.name == name }) else {
            throw CoreMLError.tensor(name: name, reason: "not in the bundle")
        }
        return tensor
    }

    func part(_ tensor: Manifest.Tensor, _ kind: String) throws -> Manifest.Part {
        guard let part = tensor.parts.first(where: { $0.kind == kind }) else {
            throw CoreMLError.tensor(name: tensor.name, reason: "no \(kind) part")
        }
        guard part.file == BundleWriter.weightsName else {
            throw CoreMLError.tensor(name: tensor.name, reason: "\(kind) part in '\(part.file)'")
        }
        return part
    }

    static func varName(_ tensor: String) -> String {
        tensor.replacingOccurrences(of: ".", with: "_")
    }

    /// The tensor `name` as a float16 variable of its bundle shape.
    mutating func weight(_ name: String) throws -> MILVariable {
        if let known = cache[name] { return known }
        let tensor = try tensorRecord(name)
        let shape = tensor.shape
        let elements = shape.reduce(1, *)
        let rows = shape.count >= 2 ? shape[0] : 1
        let columns = elements / max(rows, 1)
        let output = T(.float16, fixed: shape)
        let base = Emitter.varName(name)
        var record = MLPackageTensor(name: name, op: "const", blobs: [], lutGroups: nil, lutGroupRows: nil)
        let variable: MILVariable
        switch tensor.compression.mode {
        case .keep:
            let values = try part(tensor, "values")
            guard values.bytes == elements * 2 else {
                throw CoreMLError.tensor(
                    name: name, reason: "values hold \(values.bytes) bytes, expected \(elements * 2)")
            }
            let value = builder.blobValue(
                MILBlobStorage.Blob(
                    dataType: .float16, elementCount: elements,
                    source: .fileRange(path: weightsPath, offset: values.offset)),
                type: output)
            record.blobs = [blobRecord("values", value, type: output)]
            variable = builder.constant(base, value, type: output)
        case .palettize:
            guard let bits = tensor.compression.bits, let indexType = CoreMLSpec.DataType.paletteIndices(bits: bits),
                let storage = MILBlobStorage.DataType.paletteIndices(bits: bits), shape.count == 2
            else {
                throw CoreMLError.tensor(
                    name: name, reason: "a palette of \(tensor.compression.bits ?? 0) bits over shape \(shape)")
            }
            let outlierCount = tensor.compression.outlierCount(elements: elements)
            let lutPart = try part(tensor, "lut")
            let indexPart = try part(tensor, "indices")
            let entries = 1 << bits
            let perBlock = tensor.compression.granularity == .perBlock
            let groupRows =
                tensor.compression.granularity == .perGroupedChannel || perBlock
                ? (tensor.compression.groupSize ?? rows) : rows
            guard groupRows > 0 else { throw CoreMLError.tensor(name: name, reason: "group size \(groupRows)") }
            let blockColumns = perBlock ? (tensor.compression.blockSize ?? columns) : columns
            let blocks = perBlock ? columns.dividedRoundingUp(by: max(blockColumns, 1)) : 1
            if perBlock {
                try Emitter.checkTiles(name: name, shape: shape, groupRows: groupRows, blockColumns: blockColumns)
            }
            let groups = rows.dividedRoundingUp(by: groupRows)
            guard lutPart.bytes == groups * blocks * entries * 2, indexPart.bytes == (elements * bits + 7) / 8 else {
                throw CoreMLError.tensor(name: name, reason: "lut or indices of unexpected size")
            }
            // Core ML needs every LUT to cover the same number of rows: with a smaller last
            // group, LUTs cover gcd(group, rows) rows, each a copy of its group's LUT.
            let lutRows = Emitter.gcd(groupRows, rows)
            let lutCount = rows / lutRows
            let lutSource: MILBlobStorage.Source
            if lutRows == groupRows {
                lutSource = .fileRange(path: weightsPath, offset: lutPart.offset)
            } else {
                let stored = try source.read(lutPart)
                var expanded: [UInt8] = []
                expanded.reserveCapacity(lutCount * entries * 2)
                for lut in 0..<lutCount {
                    let group = lut * lutRows / groupRows
                    expanded += stored[(group * entries * 2)..<((group + 1) * entries * 2)]
                }
                lutSource = .bytes(expanded)
            }
            let lutType = T(.float16, fixed: [lutCount, blocks, entries, 1])
            let indexShape = T(indexType, fixed: [rows, columns])
            let indices = builder.blobValue(
                MILBlobStorage.Blob(
                    dataType: storage, elementCount: elements,
                    source: .fileRange(path: weightsPath, offset: indexPart.offset)),
                type: indexShape)
            let lut = builder.blobValue(
                MILBlobStorage.Blob(dataType: .float16, elementCount: lutCount * blocks * entries, source: lutSource),
                type: lutType)
            record.op = "constexpr_lut_to_dense"
            record.blobs = [blobRecord("lut", lut, type: lutType), blobRecord("indices", indices, type: indexShape)]
            record.lutGroups = lutCount
            record.lutGroupRows = lutRows
            if outlierCount == 0 {
                variable = builder.constexpr(
                    "constexpr_lut_to_dense", base, inputs: [("indices", indices), ("lut", lut)], output: output)
            } else {
                let palette = builder.constexpr(
                    "constexpr_lut_to_dense", base + "_palette", inputs: [("indices", indices), ("lut", lut)],
                    output: output)
                variable = try outliers(tensor, count: outlierCount, palette: palette, record: &record)
            }
        case .linear:
            guard shape.count == 2 else { throw CoreMLError.tensor(name: name, reason: "int8 over shape \(shape)") }
            let scalesPart = try part(tensor, "scales")
            let valuesPart = try part(tensor, "values")
            let perChannel = tensor.compression.granularity == .perChannel
            let scaleCount = perChannel ? rows : 1
            guard scalesPart.bytes == scaleCount * 4, valuesPart.bytes == elements else {
                throw CoreMLError.tensor(name: name, reason: "scales or values of unexpected size")
            }
            let stored = try source.read(scalesPart)
            var scaleBytes: [UInt8] = []
            for index in 0..<scaleCount {
                let bits = (0..<4).reduce(UInt32(0)) { $0 | UInt32(stored[index * 4 + $1]) << (8 * UInt32($1)) }
                let half = Float16(Float(bitPattern: bits)).bitPattern
                scaleBytes += [UInt8(truncatingIfNeeded: half), UInt8(truncatingIfNeeded: half >> 8)]
            }
            let scaleType = T(.float16, fixed: [scaleCount, 1])
            let scale: CoreMLSpec.Value
            if scaleCount <= 16 {
                scale = CoreMLSpec.Value(type: .tensor(scaleType), contents: .immediate(.bytes(scaleBytes)))
            } else {
                scale = builder.blobValue(
                    MILBlobStorage.Blob(dataType: .float16, elementCount: scaleCount, source: .bytes(scaleBytes)),
                    type: scaleType)
            }
            let dataType = T(.int8, fixed: [rows, columns])
            let data = builder.blobValue(
                MILBlobStorage.Blob(
                    dataType: .int8, elementCount: elements,
                    source: .fileRange(path: weightsPath, offset: valuesPart.offset)),
                type: dataType)
            record.op = "constexpr_blockwise_shift_scale"
            record.blobs = [blobRecord("values", data, type: dataType)]
            if case .blob = scale.contents { record.blobs.insert(blobRecord("scales", scale, type: scaleType), at: 0) }
            variable = builder.constexpr(
                "constexpr_blockwise_shift_scale", base, inputs: [("data", data), ("scale", scale)], output: output)
        }
        records.append(record)
        cache[name] = variable
        return variable
    }

    /// The palettised weight with its sparse outliers in place, exactly as the bundle decodes it
    /// (docs/FORMAT.md): the outliers replace what their indices decode to. One packed uint1 mask
    /// of the outlier positions (a blob shared by two ops) gives `constexpr_sparse_to_dense` of
    /// the float16 outlier values and of uint8 ones; the ones cast to bool select the outlier
    /// over the palette entry. `select` rather than `add` of differences: a float16 sum does not
    /// always round back to the outlier, and masking by a product loses the sign of a zero.
    mutating func outliers(
        _ tensor: Manifest.Tensor, count: Int, palette: MILVariable, record: inout MLPackageTensor
    ) throws -> MILVariable {
        let name = tensor.name
        let shape = tensor.shape
        let elements = shape.reduce(1, *)
        let indexPart = try part(tensor, "outlier_indices")
        let valuePart = try part(tensor, "outlier_values")
        guard indexPart.bytes == count * 4, valuePart.bytes == count * 2 else {
            throw CoreMLError.tensor(
                name: name, reason: "outlier parts of unexpected size (expected \(count) outliers)")
        }
        let stored = try source.read(indexPart)
        var mask = [UInt8](repeating: 0, count: (elements + 7) / 8)
        var previous = -1
        for index in 0..<count {
            let element = Int((0..<4).reduce(UInt32(0)) { $0 | UInt32(stored[index * 4 + $1]) << (8 * UInt32($1)) })
            guard element > previous, element < elements else {
                throw CoreMLError.tensor(
                    name: name, reason: "outlier index \(element) out of order or past \(elements) elements")
            }
            mask[element / 8] |= 1 << UInt8(element % 8)
            previous = element
        }
        let base = Emitter.varName(name)
        let maskType = T(.uint1, fixed: shape)
        let maskValue = builder.blobValue(
            MILBlobStorage.Blob(dataType: .uint1, elementCount: elements, source: .bytes(mask)), type: maskType)
        let valuesType = T(.float16, fixed: [count])
        let values = builder.blobValue(
            MILBlobStorage.Blob(
                dataType: .float16, elementCount: count, source: .fileRange(path: weightsPath, offset: valuePart.offset)
            ),
            type: valuesType)
        let flagsType = T(.uint8, fixed: [count])
        let flags = builder.blobValue(
            MILBlobStorage.Blob(
                dataType: .uint8, elementCount: count, source: .bytes([UInt8](repeating: 1, count: count))),
            type: flagsType)
        let sparse = builder.constexpr(
            "constexpr_sparse_to_dense", base + "_outliers", inputs: [("nonzero_data", values), ("mask", maskValue)],
            output: palette.type)
        let ones = builder.constexpr(
            "constexpr_sparse_to_dense", base + "_outlier_flags",
            inputs: [("nonzero_data", flags), ("mask", maskValue)],
            output: T(.uint8, fixed: shape))
        let condition = builder.op(
            "cast", base + "_outlier_mask", [("x", .variable(ones)), ("dtype", .string("bool"))],
            output: T(.bool, fixed: shape))
        record.op = "select"
        record.blobs += [
            blobRecord("outlier_mask", maskValue, type: maskType),
            blobRecord("outlier_values", values, type: valuesType),
            blobRecord("outlier_flags", flags, type: flagsType),
        ]
        return builder.op(
            "select", base, [("cond", .variable(condition)), ("a", .variable(sparse)), ("b", .variable(palette))],
            output: palette.type)
    }

    func blobRecord(_ kind: String, _ value: CoreMLSpec.Value, type: T) -> MLPackageTensor.Blob {
        guard case .blob(_, let offset) = value.contents,
            let index = builder.blobs.metadataOffsets.firstIndex(of: offset)
        else {
            return MLPackageTensor.Blob(kind: kind, dtype: type.dataType.milName, offset: -1, bytes: 0, shape: [])
        }
        let shape = type.shape.map { dimension -> Int in
            if case .fixed(let size) = dimension { return size }
            return -1
        }
        return MLPackageTensor.Blob(
            kind: kind, dtype: type.dataType.milName, offset: offset, bytes: builder.blobs.blobs[index].byteCount,
            shape: shape)
    }

    /// Records `variable`, a `const` op of `value`, among the constants when `value` is a blob.
    mutating func constant(_ variable: MILVariable, _ kind: String, _ value: CoreMLSpec.Value) {
        guard case .blob = value.contents else { return }
        let blob = blobRecord(kind, value, type: variable.type)
        constants.append(
            MLPackageConstant(
                name: variable.name, kind: kind, dtype: blob.dtype, offset: blob.offset, bytes: blob.bytes,
                shape: blob.shape))
    }

    static func gcd(_ a: Int, _ b: Int) -> Int { b == 0 ? a : gcd(b, a % b) }

    // MARK: Program

    var n: CoreMLSpec.Dimension { .unknown }

    func tensor(_ shape: [CoreMLSpec.Dimension], _ type: CoreMLSpec.DataType = .float16) -> T { T(type, shape) }

    /// RMSNorm over the last axis, in float32: `w · x / sqrt(mean(x²) + eps)`.
    mutating func rmsNorm(_ x: MILVariable, weight name: String, _ base: String) throws -> MILVariable {
        let weight = try weight(name)
        let shape = x.type.shape
        let x32 = builder.op(
            "cast", base + "_x32", [("x", .variable(x)), ("dtype", .string("fp32"))], output: tensor(shape, .float32))
        let square = builder.op(
            "mul", base + "_square", [("x", .variable(x32)), ("y", .variable(x32))], output: tensor(shape, .float32))
        var reduced = shape
        reduced[reduced.count - 1] = .fixed(1)
        let mean = builder.op(
            "reduce_mean", base + "_mean",
            [("x", .variable(square)), ("axes", .ints([-1])), ("keep_dims", .bools([true], shape: []))],
            output: tensor(reduced, .float32))
        let inverse = builder.op(
            "rsqrt", base + "_rsqrt", [("x", .variable(mean)), ("epsilon", .float32(Float(graph.rmsNormEpsilon)))],
            output: tensor(reduced, .float32))
        let normed32 = builder.op(
            "mul", base + "_normed32", [("x", .variable(x32)), ("y", .variable(inverse))],
            output: tensor(shape, .float32))
        let normed = builder.op(
            "cast", base + "_normed", [("x", .variable(normed32)), ("dtype", .string("fp16"))], output: tensor(shape))
        return builder.op("mul", base, [("x", .variable(normed)), ("y", .variable(weight))], output: tensor(shape))
    }

    /// `x·cos + rotate_half(x)·sin` on `[1, heads, N, head_dim]`.
    func rope(_ x: MILVariable, cos: MILVariable, sin: MILVariable, _ base: String) -> MILVariable {
        let shape = x.type.shape
        var half = shape
        half[3] = .fixed(graph.attention.headDim / 2)
        let halves = builder.op(
            "split", base + "_halves",
            [("x", .variable(x)), ("num_splits", .ints([2], shape: [])), ("axis", .ints([-1], shape: []))],
            outputs: [tensor(half), tensor(half)])
        let negated = builder.op(
            "mul", base + "_neg", [("x", .variable(halves[1])), ("y", .float16(-1))], output: tensor(half))
        let rotated = builder.op(
            "concat", base + "_rotated",
            [
                ("values", .variables([negated, halves[0]])), ("axis", .ints([-1], shape: [])),
                ("interleave", .bools([false], shape: [])),
            ],
            output: tensor(shape))
        let withCos = builder.op(
            "mul", base + "_cos", [("x", .variable(x)), ("y", .variable(cos))], output: tensor(shape))
        let withSin = builder.op(
            "mul", base + "_sin", [("x", .variable(rotated)), ("y", .variable(sin))], output: tensor(shape))
        return builder.op("add", base, [("x", .variable(withCos)), ("y", .variable(withSin))], output: tensor(shape))
    }

    mutating func linear(_ x: MILVariable, _ name: String, bias: String?, outputs: Int, _ base: String) throws
        -> MILVariable
    {
        let weight = try weight(name)
        let biasVariable: MILVariable
        if let bias {
            biasVariable = try self.weight(bias)
        } else {
            let zeros = [UInt8](repeating: 0, count: outputs * 2)
            let type = T(.float16, fixed: [outputs])
            let value =
                outputs <= 16
                ? CoreMLSpec.Value(type: .tensor(type), contents: .immediate(.bytes(zeros)))
                : builder.blobValue(
                    MILBlobStorage.Blob(dataType: .float16, elementCount: outputs, source: .bytes(zeros)), type: type)
            biasVariable = builder.constant(base + "_bias", value, type: type)
            constant(biasVariable, "zero_bias", value)
        }
        var shape = x.type.shape
        shape[shape.count - 1] = .fixed(outputs)
        return builder.op(
            "linear", base, [("x", .variable(x)), ("weight", .variable(weight)), ("bias", .variable(biasVariable))],
            output: tensor(shape))
    }

    /// Float16 cos and sin tables `[context, head_dim]` (HF's `cat(freqs, freqs)` layout),
    /// angles computed in float32 as transformers does.
    func ropeTables() -> (cos: [UInt8], sin: [UInt8]) {
        let dimension = graph.attention.headDim
        let context = graph.contextLength
        let factor = graph.rope.scalingType == "linear" ? Float(graph.rope.scalingFactor ?? 1) : 1
        let inverse = (0..<(dimension / 2)).map {
            1 / Float(pow(Double(Float(graph.rope.theta)), Double(Float(2 * $0) / Float(dimension))))
        }
        var cosBytes: [UInt8] = []
        var sinBytes: [UInt8] = []
        cosBytes.reserveCapacity(context * dimension * 2)
        sinBytes.reserveCapacity(context * dimension * 2)
        for position in 0..<context {
            let t = Float(position) / factor
            for column in 0..<dimension {
                let angle = t * inverse[column % (dimension / 2)]
                let c = Float16(Float(Foundation.cos(Double(angle)))).bitPattern
                let s = Float16(Float(Foundation.sin(Double(angle)))).bitPattern
                cosBytes += [UInt8(truncatingIfNeeded: c), UInt8(truncatingIfNeeded: c >> 8)]
                sinBytes += [UInt8(truncatingIfNeeded: s), UInt8(truncatingIfNeeded: s >> 8)]
            }
        }
        return (cosBytes, sinBytes)
    }

    mutating func build() throws -> LanguageModelProgram {
        let attention = graph.attention
        let heads = attention.heads
        let kvHeads = attention.kvHeads
        let headDim = attention.headDim
        let hidden = graph.hiddenSize
        let context = graph.contextLength
        let layers = graph.layers
        let vocabulary = graph.vocabularySize
        let queriesPerKV = heads / kvHeads
        let cacheShape = [layers, kvHeads, context, headDim]

        let inputIDs = MILVariable(name: "input_ids", type: tensor([.fixed(1), n], .int32))
        let mask = MILVariable(name: "causal_mask", type: tensor([.fixed(1), .fixed(1), n, .fixed(context)]))
        let position = MILVariable(name: "current_position", type: T(.int32, fixed: [1]))
        let keyCache = MILVariable(name: "key_cache", type: T(.float16, fixed: cacheShape))
        let valueCache = MILVariable(name: "value_cache", type: T(.float16, fixed: cacheShape))
        for input in [inputIDs, mask, position, keyCache, valueCache] { builder.reserve(input.name) }

        // Positions: N from the ids' shape; the rows [position, position + N) of the tables and caches.
        let idsShape = builder.op(
            "shape", "input_ids_shape", [("x", .variable(inputIDs))], output: T(.int32, fixed: [2]))
        let count = builder.op(
            "slice_by_index", "token_count", [("x", .variable(idsShape)), ("begin", .ints([1])), ("end", .ints([2]))],
            output: T(.int32, fixed: [1]))
        let endPosition = builder.op(
            "add", "end_position", [("x", .variable(position)), ("y", .variable(count))], output: T(.int32, fixed: [1]))
        let zero = builder.constant(
            "zero_1d", CoreMLSpec.Value(type: .tensor(T(.int32, fixed: [1])), contents: .immediate(.ints([0]))),
            type: T(.int32, fixed: [1]))
        let headDimConst = builder.constant(
            "head_dim_1d",
            CoreMLSpec.Value(type: .tensor(T(.int32, fixed: [1])), contents: .immediate(.ints([Int32(headDim)]))),
            type: T(.int32, fixed: [1]))
        let tableBegin = builder.op(
            "concat", "rope_begin",
            [
                ("values", .variables([position, zero])), ("axis", .ints([0], shape: [])),
                ("interleave", .bools([false], shape: [])),
            ],
            output: T(.int32, fixed: [2]))
        let tableEnd = builder.op(
            "concat", "rope_end",
            [
                ("values", .variables([endPosition, headDimConst])), ("axis", .ints([0], shape: [])),
                ("interleave", .bools([false], shape: [])),
            ],
            output: T(.int32, fixed: [2]))
        let tables = ropeTables()
        let tableType = T(.float16, fixed: [context, headDim])
        let cosValue = builder.blobValue(
            MILBlobStorage.Blob(dataType: .float16, elementCount: context * headDim, source: .bytes(tables.cos)),
            type: tableType)
        let cosTable = builder.constant("rope_cos_table", cosValue, type: tableType)
        constant(cosTable, "rope_cos", cosValue)
        let sinValue = builder.blobValue(
            MILBlobStorage.Blob(dataType: .float16, elementCount: context * headDim, source: .bytes(tables.sin)),
            type: tableType)
        let sinTable = builder.constant("rope_sin_table", sinValue, type: tableType)
        constant(sinTable, "rope_sin", sinValue)
        let cos = builder.op(
            "slice_by_index", "rope_cos",
            [("x", .variable(cosTable)), ("begin", .variable(tableBegin)), ("end", .variable(tableEnd))],
            output: tensor([n, .fixed(headDim)]))
        let sin = builder.op(
            "slice_by_index", "rope_sin",
            [("x", .variable(sinTable)), ("begin", .variable(tableBegin)), ("end", .variable(tableEnd))],
            output: tensor([n, .fixed(headDim)]))
        let groupedMask =
            queriesPerKV == 1
            ? mask
            : builder.op(
                "tile", "causal_mask_grouped",
                [("x", .variable(mask)), ("reps", .ints([1, 1, Int32(queriesPerKV), 1]))],
                output: tensor([.fixed(1), .fixed(1), n, .fixed(context)]))

        let embedding = try weight("model.embed_tokens.weight")
        var x = builder.op(
            "gather", "embedded",
            [
                ("x", .variable(embedding)), ("indices", .variable(inputIDs)), ("axis", .ints([0], shape: [])),
                ("batch_dims", .ints([0], shape: [])), ("validate_indices", .bools([false], shape: [])),
            ],
            output: tensor([.fixed(1), n, .fixed(hidden)]))

        for layer in 0..<layers {
            let prefix = "model.layers.\(layer)."
            let base = "layers_\(layer)_"
            let h = try rmsNorm(x, weight: prefix + "input_layernorm.weight", base + "input_norm")
            func projection(_ name: String, _ width: Int) throws -> MILVariable {
                let bias = attention.qkvBias && name != "o_proj" ? prefix + "self_attn.\(name).bias" : nil
                return try linear(h, prefix + "self_attn.\(name).weight", bias: bias, outputs: width, base + name)
            }
            let q = try projection("q_proj", heads * headDim)
            let k = try projection("k_proj", kvHeads * headDim)
            let v = try projection("v_proj", kvHeads * headDim)
            func split(_ x: MILVariable, _ count: Int, _ name: String) -> MILVariable {
                builder.op(
                    "reshape", base + name + "_heads",
                    [("x", .variable(x)), ("shape", .ints([1, -1, Int32(count), Int32(headDim)]))],
                    output: tensor([.fixed(1), n, .fixed(count), .fixed(headDim)]))
            }
            var qh = split(q, heads, "q")
            var kh = split(k, kvHeads, "k")
            let vh = split(v, kvHeads, "v")
            if attention.qkNorm {
                qh = try rmsNorm(qh, weight: prefix + "self_attn.q_norm.weight", base + "q_norm")
                kh = try rmsNorm(kh, weight: prefix + "self_attn.k_norm.weight", base + "k_norm")
            }
            func headsFirst(_ x: MILVariable, _ count: Int, _ name: String) -> MILVariable {
                builder.op(
                    "transpose", base + name, [("x", .variable(x)), ("perm", .ints([0, 2, 1, 3]))],
                    output: tensor([.fixed(1), .fixed(count), n, .fixed(headDim)]))
            }
            let qt = rope(headsFirst(qh, heads, "q_t"), cos: cos, sin: sin, base + "q_rope")
            let kt = rope(headsFirst(kh, kvHeads, "k_t"), cos: cos, sin: sin, base + "k_rope")
            let vt = headsFirst(vh, kvHeads, "v_t")

            // Write the N new rows of this layer at the position, then read the layer's whole row.
            let layerHead = builder.constant(
                base + "cache_begin_head",
                CoreMLSpec.Value(type: .tensor(T(.int32, fixed: [2])), contents: .immediate(.ints([Int32(layer), 0]))),
                type: T(.int32, fixed: [2]))
            let layerTail = builder.constant(
                base + "cache_end_head",
                CoreMLSpec.Value(
                    type: .tensor(T(.int32, fixed: [2])),
                    contents: .immediate(.ints([Int32(layer + 1), Int32(kvHeads)]))),
                type: T(.int32, fixed: [2]))
            let begin = builder.op(
                "concat", base + "cache_begin",
                [
                    ("values", .variables([layerHead, position, zero])), ("axis", .ints([0], shape: [])),
                    ("interleave", .bools([false], shape: [])),
                ],
                output: T(.int32, fixed: [4]))
            let end = builder.op(
                "concat", base + "cache_end",
                [
                    ("values", .variables([layerTail, endPosition, headDimConst])), ("axis", .ints([0], shape: [])),
                    ("interleave", .bools([false], shape: [])),
                ],
                output: T(.int32, fixed: [4]))
            func cached(_ state: MILVariable, _ update: MILVariable, _ name: String) -> MILVariable {
                let read = builder.op(
                    "read_state", base + name + "_read", [("input", .variable(state))],
                    output: T(.float16, fixed: cacheShape))
                let updated = builder.op(
                    "slice_update", base + name + "_updated",
                    [
                        ("x", .variable(read)), ("update", .variable(update)), ("begin", .variable(begin)),
                        ("end", .variable(end)),
                    ],
                    output: T(.float16, fixed: cacheShape))
                builder.op(
                    "write_state", base + name + "_write", [("input", .variable(state)), ("data", .variable(updated))],
                    outputs: [])
                return builder.op(
                    "slice_by_index", base + name + "_layer",
                    [
                        ("x", .variable(updated)), ("begin", .ints([Int32(layer), 0, 0, 0])),
                        ("end", .ints([Int32(layer + 1), Int32(kvHeads), Int32(context), Int32(headDim)])),
                    ],
                    output: T(.float16, fixed: [1, kvHeads, context, headDim]))
            }
            let keys = cached(keyCache, kt, "key_cache")
            let values = cached(valueCache, vt, "value_cache")
            // Query heads h = g·kvHead + j fold into [1, kv_heads, g·N, head_dim]; the mask is tiled to match.
            let folded =
                queriesPerKV == 1
                ? qt
                : builder.op(
                    "reshape", base + "q_grouped",
                    [("x", .variable(qt)), ("shape", .ints([1, Int32(kvHeads), -1, Int32(headDim)]))],
                    output: tensor([.fixed(1), .fixed(kvHeads), n, .fixed(headDim)]))
            let attended = builder.op(
                "scaled_dot_product_attention", base + "attention",
                [
                    ("query", .variable(folded)), ("key", .variable(keys)), ("value", .variable(values)),
                    ("attn_mask", .variable(groupedMask)),
                ],
                output: tensor([.fixed(1), .fixed(kvHeads), n, .fixed(headDim)]))
            let unfolded =
                queriesPerKV == 1
                ? attended
                : builder.op(
                    "reshape", base + "attention_heads",
                    [("x", .variable(attended)), ("shape", .ints([1, Int32(heads), -1, Int32(headDim)]))],
                    output: tensor([.fixed(1), .fixed(heads), n, .fixed(headDim)]))
            let sequenceFirst = builder.op(
                "transpose", base + "attention_t", [("x", .variable(unfolded)), ("perm", .ints([0, 2, 1, 3]))],
                output: tensor([.fixed(1), n, .fixed(heads), .fixed(headDim)]))
            let merged = builder.op(
                "reshape", base + "attention_merged",
                [("x", .variable(sequenceFirst)), ("shape", .ints([1, -1, Int32(heads * headDim)]))],
                output: tensor([.fixed(1), n, .fixed(heads * headDim)]))
            let output = try linear(
                merged, prefix + "self_attn.o_proj.weight", bias: nil, outputs: hidden, base + "o_proj")
            x = builder.op(
                "add", base + "attention_residual", [("x", .variable(x)), ("y", .variable(output))], output: x.type)

            let m = try rmsNorm(x, weight: prefix + "post_attention_layernorm.weight", base + "post_attention_norm")
            let width = graph.intermediateSize
            let gate = try linear(m, prefix + "mlp.gate_proj.weight", bias: nil, outputs: width, base + "gate_proj")
            let up = try linear(m, prefix + "mlp.up_proj.weight", bias: nil, outputs: width, base + "up_proj")
            let activated = builder.op("silu", base + "gate_silu", [("x", .variable(gate))], output: gate.type)
            let product = builder.op(
                "mul", base + "gate_up", [("x", .variable(activated)), ("y", .variable(up))], output: gate.type)
            let down = try linear(
                product, prefix + "mlp.down_proj.weight", bias: nil, outputs: hidden, base + "down_proj")
            x = builder.op("add", base + "mlp_residual", [("x", .variable(x)), ("y", .variable(down))], output: x.type)
        }
        let final = try rmsNorm(x, weight: "model.norm.weight", "final_norm")
        let head = graph.tieWordEmbeddings ? "model.embed_tokens.weight" : "lm_head.weight"
        let logits = try linear(final, head, bias: nil, outputs: vocabulary, "logits")
        guard logits.name == "logits" else {
            throw CoreMLError.unsupported(reason: "the output name 'logits' is taken")
        }

        let flexibleRows = [(lower: 1, upper: 1), (lower: 1, upper: context)]
        let model = CoreMLSpec.Model(
            inputs: [
                CoreMLSpec.Feature(
                    name: inputIDs.name, summary: "token ids, [1, N], N from 1 to \(context)",
                    array: CoreMLSpec.ArrayFeature(shape: [1, 1], dataType: .int32, ranges: flexibleRows)),
                CoreMLSpec.Feature(
                    name: mask.name,
                    summary: "added to the attention scores: 0 where query i may see position j, -inf elsewhere",
                    array: CoreMLSpec.ArrayFeature(
                        shape: [1, 1, 1, context], dataType: .float16,
                        ranges: [(1, 1), (1, 1), (1, context), (context, context)])),
                CoreMLSpec.Feature(
                    name: position.name, summary: "position of the first token in the KV cache",
                    array: CoreMLSpec.ArrayFeature(shape: [1], dataType: .int32)),
            ],
            outputs: [
                CoreMLSpec.Feature(
                    name: "logits", summary: "next-token logits, [1, N, \(vocabulary)]",
                    array: CoreMLSpec.ArrayFeature(shape: [], dataType: .float16))
            ],
            states: [keyCache, valueCache].map {
                CoreMLSpec.Feature(
                    name: $0.name, summary: "[layers, kv_heads, context, head_dim]",
                    array: CoreMLSpec.ArrayFeature(shape: cacheShape, dataType: .float16), isState: true)
            },
            summary: "\(source.modelName) (\(graph.architecture)), \(context) tokens of context",
            author: "exporter \(source.toolVersion)",
            userDefined: [
                "com.github.exporter.architecture": graph.architecture,
                "com.github.exporter.context_length": String(context),
                "com.github.exporter.source_bundle": source.modelName + ".aimodel",
            ],
            program: CoreMLSpec.Program(
                inputs: [
                    CoreMLSpec.NamedValueType(name: inputIDs.name, type: .tensor(inputIDs.type)),
                    CoreMLSpec.NamedValueType(name: mask.name, type: .tensor(mask.type)),
                    CoreMLSpec.NamedValueType(name: position.name, type: .tensor(position.type)),
                    CoreMLSpec.NamedValueType(name: keyCache.name, type: .state(keyCache.type)),
                    CoreMLSpec.NamedValueType(name: valueCache.name, type: .state(valueCache.type)),
                ],
                operations: builder.operations, outputs: [logits.name]))
        let order = Dictionary(uniqueKeysWithValues: source.tensors.enumerated().map { ($1.name, $0) })
        return LanguageModelProgram(
            model: model, blobs: builder.blobs, opCounts: builder.opCounts,
            tensors: records.sorted { (order[$0.name] ?? 0) < (order[$1.name] ?? 0) }, constants: constants)
    }
}
