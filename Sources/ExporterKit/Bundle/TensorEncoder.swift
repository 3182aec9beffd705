/// One part's payload: an array of plain values written as its bytes, without a copy.
struct Blob {
    /// Bytes it holds.
    let byteCount: Int
    /// Appends the bytes to a file.
    let write: (OutputFile) throws -> Void

    init<Element>(_ values: [Element]) {
        byteCount = values.count * MemoryLayout<Element>.stride
        write = { file in try values.withUnsafeBytes { try file.write($0) } }
    }
}

/// One tensor turned into its parts (docs/FORMAT.md), with its SQNR.
struct EncodedTensor {
    /// Part payloads in file order.
    let blobs: [Blob]
    /// SQNR in dB against the source weights; nil when stored exactly.
    let sqnr: Double?
}

/// Reads a tensor from a source and stores it by its scheme: kept, palettised or quantised.
struct TensorEncoder {
    let precision: ComputePrecision

    func encode(_ tensor: PlannedTensor, from source: WeightSource) throws -> EncodedTensor {
        let spec = tensor.spec
        let (rows, columns) = spec.matrixShape
        switch tensor.scheme.mode {
        case .keep:
            switch precision {
            case .float16:
                let values = try readFloat16(spec, source)
                return EncodedTensor(blobs: [Blob(values)], sqnr: nil)
            case .float32:
                let values = try readFloat(spec, source)
                return EncodedTensor(blobs: [Blob(values)], sqnr: nil)
            case .bfloat16:
                let values = try readFloat(spec, source)
                let bits = values.map { PrecisionConversion.bfloat16Bits($0) }
                return EncodedTensor(blobs: [Blob(bits)], sqnr: nil)
            }
        case .palettize:
            let values = try readFloat16(spec, source)
            let granularity: PaletteGranularity =
                tensor.scheme.granularity == .perGroupedChannel
                ? .perGroupedChannel(groupSize: tensor.scheme.groupSize ?? rows) : .perTensor
            let palette = try values.withUnsafeBufferPointer {
                try Palettizer.palettize(
                    $0, rows: rows, columns: columns, spec: PaletteSpec(bits: tensor.scheme.bits ?? 4, granularity: granularity),
                    name: spec.name)
            }
            return EncodedTensor(
                blobs: [Blob(palette.lut), Blob(palette.packedIndices)], sqnr: palette.sqnrDecibels)
        case .linear:
            let values = try readFloat16(spec, source)
            let quantized = try values.withUnsafeBufferPointer {
                try LinearQuantizer.quantizeInt8(
                    $0, rows: rows, columns: columns,
                    granularity: tensor.scheme.granularity == .perChannel ? .perOutputChannel : .perTensor, name: spec.name)
            }
            return EncodedTensor(
                blobs: [Blob(quantized.scales), Blob(quantized.values)],
                sqnr: quantized.sqnrDecibels)
        }
    }

    /// Fresh arrays are not zero-filled first: the source writes every element, and zeroing
    /// half a gigabyte of embedding costs as much as reading it.
    private func readFloat16(_ spec: TensorSpec, _ source: WeightSource) throws -> [Float16] {
        try [Float16](unsafeUninitializedCapacity: spec.elementCount) { buffer, count in
            try source.readFloat16(spec, into: buffer)
            count = spec.elementCount
        }
    }

    private func readFloat(_ spec: TensorSpec, _ source: WeightSource) throws -> [Float] {
        try [Float](unsafeUninitializedCapacity: spec.elementCount) { buffer, count in
            try source.readFloat(spec, into: buffer)
            count = spec.elementCount
        }
    }
}
