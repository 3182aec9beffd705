import Foundation

/// Peak memory of converting a plan: tensors are converted one at a time, so the peak is
/// the largest tensor's working buffers plus what the process holds throughout.
public struct ConversionMemoryEstimate: Equatable, Sendable {
    /// The process throughout: runtime and code, plan, manifest, read buffers (256 KiB per read).
    public static let fixedOverheadBytes = 64 << 20
    /// The weights file's write buffer.
    public static let outputBufferBytes = 4 << 20
    /// One palettising worker's scratch: a float16 histogram of 65,536 patterns (about 39 bytes
    /// each across its tables) and k-means buffers.
    public static let paletteWorkerBytes = 3 << 20

    /// The tensor whose conversion needs the most memory.
    public let largestTensor: String
    /// That tensor's working buffers.
    public let tensorBytes: Int
    /// The peak: fixed overhead, output buffer and the largest tensor's buffers.
    public let totalBytes: Int
}

extension ExportPlan {
    /// What converting this plan needs at its peak (docs: README "Resource limits").
    ///
    /// Per tensor of E elements (TensorEncoder): kept in float16, its float16 copy (2E); in
    /// float32, 4E; in bfloat16, a float32 copy and the bfloat16 result (6E). Palettised: the
    /// float16 copy, the packed indices (E·bits/8), the LUTs and per-group statistics, and each
    /// worker's scratch. Linear int8: the float16 copy, the int8 values (E) and the scales.
    public func conversionMemory(
        workers: Int = ProcessInfo.processInfo.activeProcessorCount
    ) -> ConversionMemoryEstimate {
        var largest = (name: "", bytes: 0)
        for tensor in tensors {
            let bytes = ExportPlan.workingBytes(tensor, precision: precision, workers: max(1, workers))
            if bytes > largest.bytes { largest = (tensor.spec.name, bytes) }
        }
        let total = Saturating.sum([
            ConversionMemoryEstimate.fixedOverheadBytes, ConversionMemoryEstimate.outputBufferBytes, largest.bytes,
        ])
        return ConversionMemoryEstimate(largestTensor: largest.name, tensorBytes: largest.bytes, totalBytes: total)
    }

    /// Bytes the bundle will take on disk: the weights file (exact), the tokenizer files, and
    /// an allowance for `graph.json` and `manifest.json` (a few KiB, about 1 KiB per tensor).
    public func estimatedBundleBytes(tokenizerBytes: Int) -> Int {
        Saturating.sum([estimatedWeightsBytes, tokenizerBytes, 64 << 10, Saturating.product([tensors.count, 1 << 10])])
    }

    static func workingBytes(_ tensor: PlannedTensor, precision: ComputePrecision, workers: Int) -> Int {
        let elements = Saturating.product(tensor.spec.shape)
        let rows = tensor.spec.matrixShape.rows
        let float16Copy = Saturating.product([elements, 2])
        switch tensor.scheme.mode {
        case .keep:
            switch precision {
            case .float16: return float16Copy
            case .float32: return Saturating.product([elements, 4])
            case .bfloat16: return Saturating.product([elements, 6])
            }
        case .palettize:
            let bits = tensor.scheme.bits ?? 4
            let groups = tensor.scheme.groupCount(rows: rows)
            let packed = Saturating.product([elements, bits]) / 8 + 1
            let perGroup = Saturating.product([groups, (1 << bits) * 2 + 64])
            let scratch = Saturating.product([workers, ConversionMemoryEstimate.paletteWorkerBytes])
            return Saturating.sum([float16Copy, packed, perGroup, scratch])
        case .linear:
            return Saturating.sum([float16Copy, elements, Saturating.product([rows, 4])])
        }
    }
}

/// Arithmetic that stops at `Int.max` instead of trapping: estimates of absurd plans stay absurd.
enum Saturating {
    static func product(_ factors: [Int]) -> Int {
        var result = 1
        for factor in factors {
            let (value, overflow) = result.multipliedReportingOverflow(by: factor)
            if overflow { return Int.max }
            result = value
        }
        return result
    }

    static func sum(_ terms: [Int]) -> Int {
        var result = 0
        for term in terms {
            let (value, overflow) = result.addingReportingOverflow(term)
            if overflow { return Int.max }
            result = value
        }
        return result
    }
}
