/// One tensor turned into the bytes of its parts (docs/FORMAT.md), with its SQNR.
struct EncodedTensor {
    /// Part payloads in file order.
    let blobs: [[UInt8]]
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
                return EncodedTensor(blobs: [values.withUnsafeBytes { Array($0) }], sqnr: nil)
            case .float32:
                var values = [Float](repeating: 0, count: spec.elementCount)
                try values.withUnsafeMutableBufferPointer { try source.readFloat(spec, into: $0) }
                return EncodedTensor(blobs: [values.withUnsafeBytes { Array($0) }], sqnr: nil)
            case .bfloat16:
                var values = [Float](repeating: 0, count: spec.elementCount)
                try values.withUnsafeMutableBufferPointer { try source.readFloat(spec, into: $0) }
                let bits = values.map { PrecisionConversion.bfloat16Bits($0) }
                return EncodedTensor(blobs: [bits.withUnsafeBytes { Array($0) }], sqnr: nil)
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
                blobs: [palette.lut.withUnsafeBytes { Array($0) }, palette.packedIndices], sqnr: palette.sqnrDecibels)
        case .linear:
            let values = try readFloat16(spec, source)
            let quantized = try values.withUnsafeBufferPointer {
                try LinearQuantizer.quantizeInt8(
                    $0, rows: rows, columns: columns,
                    granularity: tensor.scheme.granularity == .perChannel ? .perOutputChannel : .perTensor, name: spec.name)
            }
            return EncodedTensor(
                blobs: [quantized.scales.withUnsafeBytes { Array($0) }, quantized.values.withUnsafeBytes { Array($0) }],
                sqnr: quantized.sqnrDecibels)
        }
    }

    private func readFloat16(_ spec: TensorSpec, _ source: WeightSource) throws -> [Float16] {
        var values = [Float16](repeating: 0, count: spec.elementCount)
        try values.withUnsafeMutableBufferPointer { try source.readFloat16(spec, into: $0) }
        return values
    }
}
