import Foundation
import TestSupport
import Testing

@testable import ExporterKit

/// Manifest fields `verify` recomputes from the artifact alone: each doctored on its own, in
/// valid JSON with every listed file's CRC-32 intact (the manifest does not list itself).
@Suite("artifact verifier: derived figures and implied fields")
struct ArtifactVerifierFiguresTests {
    /// A fresh iOS bundle (int8 embedding, 4-bit group 8) of a tiny qwen3 whose `tokenizer.json`
    /// holds `<think>` when `reasoning`.
    private func bundle(reasoning: Bool = false) throws -> URL {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3", reasoning: reasoning)
        let plan = try Fixtures.plan(checkpoint, compression: .named("4bit_weight_palettized_group8"))
        return try ExportRunner.run(plan, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory()))
            .bundleURL
    }

    /// The failures of `artifact` once `edit` has rewritten its manifest (restored after).
    private func failures(_ artifact: URL, _ edit: (inout Manifest) -> Void) throws -> [String] {
        let url = artifact.appendingPathComponent("manifest.json")
        let original = try Data(contentsOf: url)
        defer { try? original.write(to: url) }
        var manifest = try Manifest.decoded(from: original, path: url.path)
        edit(&manifest)
        try Data(try manifest.canonicalJSON()).write(to: url)
        return ArtifactVerifier.verify(try LoadedArtifact(url: artifact)).failures.map(\.description)
    }

    @Test("the tokenizer's files, reasoning marker and response budget, recomputed from the files carried")
    func tokenizer() throws {
        let thinking = try bundle(reasoning: true)
        #expect(try failures(thinking) { _ in } == [])
        #expect(
            try failures(thinking) { $0.tokenizer?.defaultResponseTokens = 512 } == [
                "'manifest.json': tokenizer.default_response_tokens is 512, the artifact's tokenizer files give 2048 "
                    + "(reasoning marker <think>)"
            ])
        #expect(
            try failures(thinking) { $0.tokenizer?.reasoningMarker = nil } == [
                "'manifest.json': tokenizer.reasoning_marker is null, the artifact's tokenizer files give <think>"
            ])
        #expect(
            try failures(thinking) { $0.tokenizer?.files = ["tokenizer/tokenizer.json", "tokenizer/vocab.json"] } == [
                "'manifest.json': tokenizer.files is [tokenizer/tokenizer.json, tokenizer/vocab.json], the artifact "
                    + "holds [tokenizer/tokenizer.json]"
            ])
        let plain = try bundle()
        #expect(
            try failures(plain) {
                $0.tokenizer?.reasoningMarker = "<|reasoning_start|>"
                $0.tokenizer?.defaultResponseTokens = 2048
            } == [
                "'manifest.json': tokenizer.reasoning_marker is <|reasoning_start|>, the artifact's tokenizer files "
                    + "give null",
                "'manifest.json': tokenizer.default_response_tokens is 2048, the artifact's tokenizer files give 512 "
                    + "(reasoning marker null)",
            ])
        #expect(
            try failures(plain) { $0.tokenizer = nil } == [
                "'manifest.json': tokenizer is null, but an export from a checkpoint records one",
                "'manifest.json': tokenizer is null but the artifact holds tokenizer/tokenizer.json",
            ])
    }

    @Test("bits per weight, overall and by role, by the writer's formula and rounding")
    func bitsPerWeight() throws {
        let artifact = try bundle()
        let manifest = try Manifest.decoded(
            from: Data(contentsOf: artifact.appendingPathComponent("manifest.json")), path: "manifest.json")
        #expect(manifest.sizes.estimatedBundleBytes == 58_368)
        #expect(manifest.parameters == 90_496)
        // 8 × 58,368 / 90,496 = 5.1598
        #expect(manifest.sizes.bitsPerWeight == 5.16)
        #expect(try failures(artifact) { _ in } == [])
        #expect(
            try failures(artifact) { $0.sizes.bitsPerWeight = 3 } == [
                "'manifest.json': sizes.bits_per_weight is 3, 8 × sizes.estimated_bundle_bytes (58368) / parameters "
                    + "(90496) rounded to two decimals is 5.16"
            ])
        // Unrounded, it is a figure the writer never writes.
        let unrounded = 8.0 * 58_368 / 90_496
        #expect(
            try failures(artifact) { $0.sizes.bitsPerWeight = unrounded } == [
                "'manifest.json': sizes.bits_per_weight is \(unrounded), 8 × sizes.estimated_bundle_bytes (58368) / "
                    + "parameters (90496) rounded to two decimals is 5.16"
            ])
        // 8 × 27,136 / 49,152 = 4.4167
        #expect(
            try failures(artifact) { $0.sizes.byRole["mlp"]?.bitsPerWeight = 16 } == [
                "'manifest.json': sizes.by_role.mlp.bits_per_weight is 16, 8 × its bytes (27136) / its parameters "
                    + "(49152) rounded to two decimals is 4.42"
            ])
    }

    @Test("a plan's manifest has no bundle bytes: one that claims some is refused")
    func planBundleBytes() throws {
        let plan = try Fixtures.plan(try Fixtures.syntheticCheckpoint(modelType: "qwen3"))
        let file = try Fixtures.temporaryDirectory().appendingPathComponent("plan.json")
        var manifest = Manifest(plan: plan)
        try Data(try manifest.canonicalJSON()).write(to: file)
        #expect(ArtifactVerifier.verify(try LoadedArtifact(url: file)).failures.isEmpty)
        manifest.sizes.bundleBytes = 5
        try Data(try manifest.canonicalJSON()).write(to: file)
        #expect(
            ArtifactVerifier.verify(try LoadedArtifact(url: file)).failures.map(\.description) == [
                "'plan.json': sizes.bundle_bytes is 5, but a plan has no files: null"
            ])
    }

    @Test("a plan's verdict whose words contradict its own numbers is refused; its warnings say what to do")
    func planVerdicts() throws {
        let plan = try Fixtures.plan(try Fixtures.syntheticCheckpoint(modelType: "qwen3"))
        let file = try Fixtures.temporaryDirectory().appendingPathComponent("plan.json")
        let fitting = Manifest.Verdict(
            architecture: "h99p", platform: "iOS", chip: "A99", memory: .needsEntitlement, totalBytes: 3_000,
            appMemoryLimitBytes: 2_000, increasedMemoryLimitBytes: 3_000, entitlements: ["e1", "e2"],
            neuralEngine: .regionsOverBudget, regionBudgetBytes: 500, regions: 4, regionsOverBudget: [0, 3])
        func failures(twice: Bool = false, _ change: (inout Manifest.Verdict) -> Void) throws -> [String] {
            var manifest = Manifest(plan: plan)
            var verdict = fitting
            change(&verdict)
            manifest.verdicts = twice ? [fitting, verdict] : [verdict]
            try Data(try manifest.canonicalJSON()).write(to: file)
            return ArtifactVerifier.verify(try LoadedArtifact(url: file)).failures.map(\.description)
        }
        #expect(try failures { _ in } == [])
        let prefix = "'plan.json': the verdict of h99p (iOS): "
        // Sizes that cannot be, a platform that does not load the bundle, a device given twice.
        #expect(try failures { $0.totalBytes = -5 } == [prefix + "total_bytes is -5, not positive"])
        #expect(try failures { $0.regions = 0 } == [prefix + "regions is 0, not positive"])
        #expect(try failures { $0.appMemoryLimitBytes = 0 } == [prefix + "app_memory_limit_bytes is 0, not positive"])
        #expect(try failures { $0.regionBudgetBytes = 0 } == [prefix + "region_budget_bytes is 0, not positive"])
        #expect(
            try failures { $0.increasedMemoryLimitBytes = 1_000 } == [
                prefix + "increased_memory_limit_bytes is 1000, below app_memory_limit_bytes 2000"
            ])
        // A raised limit equal to the default one is what a device table may give (each limit inclusive).
        #expect(
            try failures {
                $0.increasedMemoryLimitBytes = 2_000
                $0.totalBytes = 2_000
                $0.memory = .fits
                $0.entitlements = []
            } == [])
        #expect(
            try failures { $0.platform = "watchOS" } == [
                "'plan.json': the verdict of h99p (watchOS): the bundle, exported for iOS, does not load on that platform"
            ])
        #expect(
            try failures { $0.platform = "macOS" } == [
                "'plan.json': the verdict of h99p (macOS): the bundle, exported for iOS, does not load on that platform"
            ])
        #expect(
            try failures(twice: true) { $0.architecture = "H99P" } == [
                "'plan.json': the verdict of H99P (iOS): given twice"
            ])
        #expect(try failures(twice: true) { $0.platform = "visionOS" } == [])
        #expect(
            try failures { $0.architecture = "" } == [
                "'plan.json': the verdict of  (iOS): architecture '' is not an id (letters, digits, '-' or '_')"
            ])
        #expect(
            try failures { $0.architecture = "h17p:iOS" } == [
                "'plan.json': the verdict of h17p:iOS (iOS): architecture 'h17p:iOS' is not an id (letters, digits, "
                    + "'-' or '_')"
            ])
        #expect(try failures { $0.entitlements = ["e1", ""] } == [prefix + "an entitlement name is empty"])
        #expect(try failures { $0.entitlements = ["e1", "e1"] } == [prefix + "entitlements names one twice"])
        // A verdict naming what no device table could is not read further: its numbers go unchecked.
        #expect(
            try failures {
                $0.entitlements = ["e1", ""]
                $0.memory = .fits
            } == [prefix + "an entitlement name is empty"])
        #expect(
            try failures { $0.memory = .fits } == [
                prefix + "memory is fits, but 3000 bytes against limits of 2000 and 3000 with the entitlements is "
                    + "needs-entitlement"
            ])
        #expect(
            try failures { $0.totalBytes = 3_001 } == [
                prefix + "memory is needs-entitlement, but 3001 bytes against limits of 2000 and 3000 with the "
                    + "entitlements is does-not-fit"
            ])
        #expect(
            try failures { $0.entitlements = [] } == [
                prefix + "memory is needs-entitlement, but entitlements names none to add"
            ])
        #expect(
            try failures {
                $0.totalBytes = 2_000
                $0.memory = .fits
            } == [prefix + "entitlements lists what to add, but memory is fits"])
        #expect(
            try failures { $0.regionsOverBudget = [3, 0] } == [
                prefix + "regions_over_budget must list distinct region indices below regions (4), in order"
            ])
        for indices in [[0, 4], [0, 0, 3], [-1, 3]] {
            #expect(
                try failures { $0.regionsOverBudget = indices } == [
                    prefix + "regions_over_budget must list distinct region indices below regions (4), in order"
                ])
        }
        #expect(
            try failures { $0.neuralEngine = .allRegionsWithinBudget } == [
                prefix + "neural_engine is all-regions-within-budget, but regions_over_budget lists 2 regions"
            ])
        #expect(
            try failures { $0.regionsOverBudget = [] } == [
                prefix + "neural_engine is regions-over-budget, but regions_over_budget lists 0 regions"
            ])
        #expect(
            fitting.warnings == [
                "h99p (iOS): 3000 bytes exceed the app memory limit of 2000; add the entitlements e1, e2, or the app "
                    + "is killed at load",
                "h99p (iOS): regions 0, 3 of 4 are over the Neural Engine budget of 500 bytes; they will run on a "
                    + "slower compute unit, and generation can be many times slower",
            ])
        var lost = fitting
        lost.memory = .doesNotFit
        lost.totalBytes = 3_001
        lost.entitlements = []
        lost.regionsOverBudget = []
        lost.neuralEngine = .allRegionsWithinBudget
        #expect(
            lost.warnings == [
                "h99p (iOS): 3001 bytes exceed the app memory limit of 2000 and the raised limit of 3000: the app is "
                    + "killed at load"
            ])
        #expect(lost.contradiction == nil)
        lost.increasedMemoryLimitBytes = nil
        #expect(
            lost.memoryWarning
                == "h99p (iOS): 3001 bytes exceed the app memory limit of 2000, which no entitlement raises: the app is "
                + "killed at load")
        // A Mac kills no app: past the working set it swaps.
        lost.platform = "macOS"
        #expect(
            lost.memoryWarning
                == "h99p (macOS): 3001 bytes exceed the 2000 a model should stay within on this Mac (about the "
                + "recommended working set, 75% of its RAM): the system will swap, and generation slow down")
        // Apple Vision Pro kills an app over its limit, as an iPhone does: only a Mac swaps.
        lost.platform = "visionOS"
        #expect(
            lost.memoryWarning
                == "h99p (visionOS): 3001 bytes exceed the app memory limit of 2000, which no entitlement raises: the "
                + "app is killed at load")
        // A verdict written before `ahead_of_time` existed was of an ahead-of-time device.
        let written = String(decoding: try JSONEncoder().encode(fitting), as: UTF8.self)
        #expect(written.contains(#""ahead_of_time":true"#))
        let older = written.replacingOccurrences(of: #","ahead_of_time":true"#, with: "")
            .replacingOccurrences(of: #""ahead_of_time":true,"#, with: "")
        #expect(!older.contains("ahead_of_time"))
        #expect(try JSONDecoder().decode(Manifest.Verdict.self, from: Data(older.utf8)) == fitting)
        let null = written.replacingOccurrences(of: #""ahead_of_time":true"#, with: #""ahead_of_time":null"#)
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(Manifest.Verdict.self, from: Data(null.utf8)) }
        var portable = fitting
        portable.aheadOfTime = false
        let decoded = try JSONDecoder().decode(Manifest.Verdict.self, from: try JSONEncoder().encode(portable))
        #expect(decoded.aheadOfTime == false && decoded == portable)
    }

    @Test("a macOS plan's verdicts: Macs only, and no entitlement raises a Mac's limit")
    func macPlanVerdicts() throws {
        let plan = try Fixtures.plan(try Fixtures.syntheticCheckpoint(modelType: "qwen3"), platform: .macOS)
        let file = try Fixtures.temporaryDirectory().appendingPathComponent("plan.json")
        let mac = Manifest.Verdict(
            architecture: "m99", platform: "macOS", chip: "M99", memory: .fits, totalBytes: 1_000,
            appMemoryLimitBytes: 2_000, increasedMemoryLimitBytes: nil, entitlements: [],
            neuralEngine: .allRegionsWithinBudget, regionBudgetBytes: 500, regions: 4, regionsOverBudget: [])
        func failures(_ change: (inout Manifest.Verdict) -> Void) throws -> [String] {
            var manifest = Manifest(plan: plan)
            var verdict = mac
            change(&verdict)
            manifest.verdicts = [verdict]
            try Data(try manifest.canonicalJSON()).write(to: file)
            return ArtifactVerifier.verify(try LoadedArtifact(url: file)).failures.map(\.description)
        }
        #expect(try failures { _ in } == [])
        #expect(
            try failures { $0.increasedMemoryLimitBytes = 3_000 } == [
                "'plan.json': the verdict of m99 (macOS): increased_memory_limit_bytes must be null on a Mac: no "
                    + "entitlement raises it"
            ])
        // Apple Vision Pro loads iOS bundles, not a Mac's.
        #expect(
            try failures { $0.platform = "visionOS" } == [
                "'plan.json': the verdict of m99 (visionOS): the bundle, exported for macOS, does not load on that "
                    + "platform"
            ])
    }

    @Test("the platform against the iOS embedding's int8 and rules; experimental against the preset")
    func implications() throws {
        let artifact = try bundle()
        #expect(
            try failures(artifact) { $0.platform = "macOS" } == [
                "'manifest.json': compression.ios_embedding_int8 is true, which only an iOS export sets, but "
                    + "platform is 'macOS'"
            ])
        #expect(
            try failures(artifact) { $0.compression.iosEmbeddingInt8 = false } == [
                "'manifest.json': compression.ios_embedding_int8 is false but tensor 'model.embed_tokens.weight' has "
                    + "rule 'ios-embedding'"
            ])
        #expect(
            try failures(artifact) {
                $0.platform = "macOS"
                $0.compression.iosEmbeddingInt8 = false
                $0.tensors[0].rule = "ios-embedding-kept"
            } == [
                "tensor 'model.embed_tokens.weight': rule 'ios-embedding-kept' is the iOS token embedding's, but "
                    + "platform is 'macOS'"
            ])
        #expect(
            try failures(artifact) { $0.model.experimental = false } == [
                "'manifest.json': model.experimental is false but model.preset is null"
            ])
        #expect(
            try failures(artifact) { $0.model.weights = "synthetic" } == [
                "'manifest.json': model.weights is 'synthetic' but model.source.files lists 1 checkpoint file",
                "'manifest.json': tokenizer is set, but model.weights 'synthetic' has no tokenizer: expected null",
            ])
        #expect(
            try failures(artifact) { $0.model.weights = "none" } == [
                "'manifest.json': model.weights is 'none', expected checkpoint or synthetic for a manifest of kind "
                    + "'bundle'",
                "'manifest.json': model.weights is 'none' but model.source.files lists 1 checkpoint file",
                "'manifest.json': tokenizer is set, but model.weights 'none' has no tokenizer: expected null",
            ])
    }

    @Test("the KV cache's element type and the working memory the graph's dimensions give")
    func memory() throws {
        let artifact = try bundle()
        #expect(
            try failures(artifact) { $0.kvCache.dtype = "bfloat16" } == [
                "'manifest.json': kv_cache.dtype is bfloat16, compute_precision is float16"
            ])
        #expect(
            try failures(artifact) {
                $0.memory.workingBytes += 1
                $0.memory.totalBytes += 1
            } == [
                // 4·128·64·4 + 2·128·128·4 + 4 heads·128·512·4 + 256·4
                "'manifest.json': memory.working_bytes is 1311745, graph.json's dimensions with memory.prefill_chunk "
                    + "128 give 1311744"
            ])
        #expect(
            try failures(artifact) { $0.memory.prefillChunk = 1 } == [
                "'manifest.json': memory.prefill_chunk is 1, not 128 at a context of 512 tokens"
            ])
        // At 64 tokens the chunk is 64; a manifest of 0.7.3 or earlier says 128, with its figures.
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
        let short = try Fixtures.export(checkpoint, contextLength: 64)
        #expect(try failures(short) { _ in } == [])
        #expect(
            try failures(short) {
                $0.memory.prefillChunk = 128
                $0.memory.workingBytes = 4 * 128 * 64 * 4 + 2 * 128 * 128 * 4 + 4 * 128 * 64 * 4 + 256 * 4
                $0.memory.totalBytes = $0.memory.weightsBytes + $0.memory.kvCacheBytes + $0.memory.workingBytes
            } == [])
        #expect(
            try failures(short) { $0.memory.prefillChunk = 32 } == [
                "'manifest.json': memory.prefill_chunk is 32, not 64 at a context of 64 tokens"
            ])
    }

    @Test("a compiled artifact's portable figures, platform, regions, memory plan and verdict, planned again")
    func compiled() throws {
        let request = CompileRequest(
            platform: .iOS, devices: [CompileFixture.wide], minimumDeploymentVersion: .minimum,
            outputDirectory: try Fixtures.temporaryDirectory())
        let artifact = try #require(try Compiler.compile(bundleURL: try bundle(), request: request).first).url
        #expect(try failures(artifact) { _ in } == [])
        #expect(
            try failures(artifact) {
                $0.sizes.estimatedBundleBytes += 64
                $0.sizes.bitsPerWeight = 5.17
            } == [
                "'manifest.json': memory.weights_bytes is 58368, sizes.estimated_bundle_bytes is 58432",
                "'manifest.json': sizes.estimated_bundle_bytes is 58432, the portable weights.bin its tensors' parts "
                    + "lay out is 58368 bytes",
            ])
        #expect(
            try failures(artifact) {
                $0.memory.weightsBytes -= 64
                $0.memory.totalBytes -= 64
            } == ["'manifest.json': memory.weights_bytes is 58304, sizes.estimated_bundle_bytes is 58368"])
        #expect(
            try failures(artifact) { $0.compiled?.platform = "macOS" } == [
                "'manifest.json': compiled.platform is 'macOS', which compiles macOS bundles, but platform is 'iOS'",
                "'manifest.json': compiled.verdict.platform is iOS, the compiler's plan of the artifact gives macOS",
            ])
        // Regions: embedding, layers 0–1, head; the layers' working memory is the peak, 1,310,720 bytes.
        #expect(
            try failures(artifact) { $0.compiled?.regions[1].workingBytes = 1 } == [
                "'manifest.json': compiled.regions[1].working_bytes is 1, the compiler's plan of the artifact gives 1310720"
            ])
        #expect(
            try failures(artifact) { $0.compiled?.regions[1].withinBudget = false } == [
                "'manifest.json': compiled.regions[1].within_budget is false, the compiler's plan of the artifact gives true"
            ])
        #expect(
            try failures(artifact) {
                $0.compiled?.memory.tablesBytes += 1
                $0.compiled?.memory.totalBytes += 1
                $0.compiled?.verdict.totalBytes += 1
            } == [
                "'manifest.json': compiled.memory.tables_bytes is 32769, the compiler's plan of the artifact gives 32768",
                "'manifest.json': compiled.verdict.total_bytes is 1564673, the compiler's plan of the artifact gives 1564672",
            ])
        // 1,564,672 bytes against the limits the verdict records: 2,000,000 by default, 4,000,000 entitled.
        #expect(
            try failures(artifact) { $0.compiled?.verdict.memory = .doesNotFit } == [
                "'manifest.json': compiled.verdict.memory is does-not-fit, the compiler's plan of the artifact gives fits"
            ])
        #expect(
            try failures(artifact) { $0.compiled?.verdict.appMemoryLimitBytes = 1_000_000 } == [
                "'manifest.json': compiled.verdict.memory is fits, the compiler's plan of the artifact gives "
                    + "needs-entitlement"
            ])
        #expect(
            try failures(artifact) { $0.compiled?.minDeploymentVersion = "26.0" } == [
                "'manifest.json': compiled.min_deployment_version: "
                    + CompileError.deploymentVersionTooLow(given: "26.0", minimum: "27.0").description
            ])
        #expect(try failures(artifact) { $0.compiled?.minDeploymentVersion = "28.1" } == [])
        #expect(
            try failures(artifact) { $0.verdicts = $0.compiled.map { [$0.verdict] } ?? [] } == [
                "'manifest.json': verdicts lists 1, but only a plan has them"
            ])
        // What a device table could not say, in a compiled artifact's own verdict too.
        #expect(
            try failures(artifact) {
                $0.compiled?.verdict.entitlements = ["e", "e"]
                $0.compiled?.verdict.architecture = ""
            }.filter { $0.contains("compiled.verdict: ") } == [
                "'manifest.json': compiled.verdict: architecture '' is not an id (letters, digits, '-' or '_')",
                "'manifest.json': compiled.verdict: entitlements names one twice",
            ])
        // The fixture's device raises its limit to 4,000,000 bytes: a Mac's verdict cannot say so.
        #expect(
            try failures(artifact) { $0.compiled?.verdict.platform = "macOS" }.filter {
                $0.contains("compiled.verdict: ")
            } == [
                "'manifest.json': compiled.verdict: increased_memory_limit_bytes must be null on a Mac: no entitlement "
                    + "raises it"
            ])
        #expect(
            try failures(artifact) { $0.compiled?.verdict.aheadOfTime = false } == [
                "'manifest.json': compiled.verdict.ahead_of_time is false, the compiler's plan of the artifact gives true"
            ])
    }
}
