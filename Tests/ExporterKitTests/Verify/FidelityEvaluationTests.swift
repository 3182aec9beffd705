import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("eval: fidelity figures")
struct FidelityEvaluationTests {
    @Test("linear bits per weight count the attention and MLP matrices only, LUTs included, biases not")
    func linearBitsPerWeight() throws {
        let plan = try Fixtures.plan(
            try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig()),
            compression: .named("4bit_weight_palettized_group32"))
        let manifest = Manifest(plan: plan)
        #expect(manifest.tensors.contains { $0.name == "model.layers.0.self_attn.q_proj.bias" })
        // Per layer: q and o 64×64, k and v 32×64, gate and up 128×64, down 64×128, at 4 bits with
        // 16 float16 entries per 32 rows: 2,112 + 1,056 + 1,056 + 2,112 + 4,224 + 4,224 + 4,160 bytes.
        #expect(FidelityEvaluation.linearBitsPerWeight(manifest) == Double(18_944 * 8) / Double(36_864))
    }

    @Test("the perplexity increase is relative: from 2 to 4 is 100%")
    func perplexityIncrease() {
        // p(next) = 1/2 under the checkpoint, 1/4 under the artifact.
        let comparison = ForwardComparison(
            tokens: [0, 1], source: [[0, 0], [0, 0]], artifact: [[Float(log(3.0)), 0], [0, 0]])
        let evaluation = FidelityEvaluation(
            compression: "c", tokenCount: 2, linearBitsPerWeight: 4, bitsPerWeight: 4, comparison: comparison)
        #expect(abs(evaluation.sourcePerplexity - 2) < 1e-9)
        #expect(abs(evaluation.artifactPerplexity - 4) < 1e-5)
        #expect(abs(evaluation.perplexityIncreasePercent - 100) < 1e-3)
    }
}
