import Foundation

/// How well an artifact keeps its checkpoint's predictions over a token sequence: the
/// perplexity of each, the mean KL divergence and top-1 agreement per position, and the bits
/// stored per weight of the linear layers. What `exporter eval` reports.
public struct FidelityEvaluation: Sendable {
    /// The compression config's name.
    public let compression: String
    /// Tokens evaluated (positions scored: one fewer).
    public let tokenCount: Int
    /// Bits stored per weight over the attention and MLP matrices (LUTs, scales and outliers included).
    public let linearBitsPerWeight: Double
    /// Bits per weight of the whole artifact's weights file.
    public let bitsPerWeight: Double
    /// The position-by-position comparison.
    public let comparison: ForwardComparison

    /// Perplexity under the checkpoint.
    public var sourcePerplexity: Double { comparison.sourcePerplexity ?? .nan }
    /// Perplexity under the artifact.
    public var artifactPerplexity: Double { comparison.artifactPerplexity ?? .nan }
    /// Relative perplexity increase, in percent.
    public var perplexityIncreasePercent: Double { (artifactPerplexity / sourcePerplexity - 1) * 100 }

    /// Bits per weight of the attention and MLP matrices of `manifest`.
    public static func linearBitsPerWeight(_ manifest: Manifest) -> Double {
        let linear = manifest.tensors.filter { ($0.role == "attention" || $0.role == "mlp") && $0.shape.count == 2 }
        let weights = linear.reduce(0) { $0 + $1.shape.reduce(1, *) }
        let bytes = linear.reduce(0) { $0 + $1.storedBytes }
        return weights == 0 ? 0 : Double(bytes * 8) / Double(weights)
    }

    /// Runs `tokens` through the checkpoint and the artifact (each one prefill of the whole
    /// sequence) and compares them.
    /// - Throws: `ReferenceModelError` for unusable tokens or mismatched architectures; read errors.
    /// - Parameter progress: told after every layer of each pass (``ArtifactVerifier/compareForward(artifact:checkpoint:tokens:checkingFiles:progress:)``).
    public static func evaluate(
        artifact: LoadedArtifact, checkpoint: URL, tokens: [Int], progress: (WorkProgress) -> Void = { _ in }
    ) throws -> FidelityEvaluation {
        guard tokens.count >= 2 else { throw ReferenceModelError.invalidTokens("perplexity needs at least 2 tokens") }
        let comparison = try ArtifactVerifier.compareForward(
            artifact: artifact, checkpoint: checkpoint, tokens: tokens, checkingFiles: true, progress: progress)
        let manifest = artifact.manifest
        return FidelityEvaluation(
            compression: manifest.compression.config, tokenCount: tokens.count,
            linearBitsPerWeight: linearBitsPerWeight(manifest), bitsPerWeight: manifest.sizes.bitsPerWeight,
            comparison: comparison)
    }
}
