import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("diff: the release gate's thresholds")
struct ManifestDiffTests {
    /// A tiny bundle's manifest.
    private func manifest() throws -> Manifest {
        let plan = try Fixtures.plan(try Fixtures.syntheticCheckpoint())
        return try ExportRunner.run(plan, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory()))
            .manifest
    }

    private func regressions(
        _ before: Manifest, _ after: Manifest, growth: Double? = nil, memory: Double? = nil, drop: Double? = nil,
        verdicts: Bool = false
    ) -> [String] {
        ManifestDiff(
            before: InspectionSummary(manifest: before), after: InspectionSummary(manifest: after), beforeName: "a",
            afterName: "b"
        ).regressions(
            ManifestDiff.ReleaseGate(
                maxSizeGrowthPercent: growth, maxMemoryGrowthPercent: memory, maxSQNRDrop: drop,
                verdictsMustHold: verdicts))
    }

    @Test("memory growth and a worse verdict fail their gates; one id on two platforms is two devices")
    func memoryAndVerdictGates() throws {
        var before = try manifest()
        before.kind = "plan"
        before.memory.totalBytes = 1_000
        let verdict = Manifest.Verdict(
            architecture: "h14g", platform: "macOS", chip: "M2", memory: .fits, totalBytes: 1_000,
            appMemoryLimitBytes: 1_000, increasedMemoryLimitBytes: 2_000, entitlements: [],
            neuralEngine: .allRegionsWithinBudget, regionBudgetBytes: 10, regions: 1, regionsOverBudget: [])
        var vision = verdict
        vision.platform = "visionOS"
        before.verdicts = [verdict, vision]
        var after = before
        after.memory.totalBytes = 1_100
        #expect(regressions(before, after, memory: 10) == [])
        after.memory.totalBytes = 1_101
        #expect(
            regressions(before, after, memory: 10) == [
                "memory grew by 10.10% (1000 → 1101 bytes), more than --max-memory-growth 10%"
            ])
        #expect(regressions(before, after, growth: 0) == [])
        after.verdicts[1].memory = .needsEntitlement
        #expect(regressions(before, after) == [])
        #expect(
            regressions(before, after, verdicts: true) == [
                "verdict of h14g visionOS: fits → needs-entitlement, against --no-verdict-regression"
            ])
        let diff = ManifestDiff(
            before: InspectionSummary(manifest: before), after: InspectionSummary(manifest: after), beforeName: "a",
            afterName: "b")
        #expect(
            diff.textChanges == [.init(field: "verdict: h14g visionOS", before: "fits", after: "needs-entitlement")])
        // Better is no regression.
        #expect(regressions(after, before, verdicts: true) == [])
        // Without --no-verdict-regression, the other gates let a worse verdict pass.
        #expect(regressions(before, after, growth: 50, memory: 50, drop: 100) == [])
        // needs-entitlement to does-not-fit is worse still; the way back is not.
        var lost = after
        lost.verdicts[1].memory = .doesNotFit
        #expect(
            regressions(after, lost, verdicts: true) == [
                "verdict of h14g visionOS: needs-entitlement → does-not-fit, against --no-verdict-regression"
            ])
        #expect(regressions(lost, after, verdicts: true) == [])
        // An id spelt in another case is the same device.
        after.verdicts[1].architecture = "H14G"
        #expect(
            regressions(before, after, verdicts: true) == [
                "verdict of h14g visionOS: fits → needs-entitlement, against --no-verdict-regression"
            ])
    }

    @Test(
        "growing by exactly the limit passes, a byte more fails; an SQNR drop of exactly the limit passes, as written")
    func exactLimits() throws {
        var before = try manifest()
        var after = before
        before.sizes.bundleBytes = 100
        after.sizes.bundleBytes = 107
        #expect(regressions(before, after, growth: 7) == [])
        after.sizes.bundleBytes = 108
        #expect(regressions(before, after, growth: 7).count == 1)
        after.sizes.bundleBytes = 100
        let index = try #require(before.tensors.firstIndex { $0.sqnrDB != nil })
        // 21.26 − 18.45 is 2.8100000000000023 in binary: the manifests' two decimals decide.
        before.tensors[index].sqnrDB = 21.26
        after.tensors[index].sqnrDB = 18.45
        #expect(regressions(before, after, drop: 2.81) == [])
        #expect(regressions(before, after, drop: 2.8).count == 1)
    }

    @Test("a size that was 0 fails a growth gate only when it grows; an SQNR lost from exact fell by ∞ dB")
    func fromNothing() throws {
        var before = try manifest()
        var after = before
        before.sizes.bundleBytes = 0
        after.sizes.bundleBytes = 0
        #expect(regressions(before, after, growth: 0) == [])
        after.sizes.bundleBytes = 100
        let grown = regressions(before, after, growth: 5)
        #expect(grown == ["size on disk grew from nothing (0 → 100 bytes), more than --max-size-growth 5%"])
        // A bundle's tensor without SQNR is stored exactly.
        after = before
        let index = try #require(before.tensors.firstIndex { $0.sqnrDB == nil })
        after.tensors[index].sqnrDB = 30
        #expect(
            regressions(before, after, drop: 5) == [
                "tensor '\(before.tensors[index].name)': SQNR fell by ∞ dB (exact → 30.00 dB), more than "
                    + "--min-sqnr-drop 5 dB"
            ])
    }

    @Test("a changed compute precision is a text change, before and after as written")
    func precisionChange() throws {
        let before = try manifest()
        var after = before
        after.computePrecision = "bfloat16"
        let diff = ManifestDiff(
            before: InspectionSummary(manifest: before), after: InspectionSummary(manifest: after), beforeName: "a",
            afterName: "b")
        #expect(diff.textChanges == [.init(field: "precision", before: "float16", after: "bfloat16")])
    }

    @Test("a tensor the later manifest lacks is listed last, with its earlier storage, bytes and SQNR only")
    func removedTensor() throws {
        let before = try manifest()
        var after = before
        let removed = after.tensors.remove(at: 0)
        let changed = try #require(after.tensors.firstIndex { $0.sqnrDB != nil })
        after.tensors[changed].sqnrDB = (after.tensors[changed].sqnrDB ?? 0) - 1
        let diff = ManifestDiff(
            before: InspectionSummary(manifest: before), after: InspectionSummary(manifest: after), beforeName: "a",
            afterName: "b")
        #expect(diff.tensorChanges.map(\.name) == [after.tensors[changed].name, removed.name])
        let last = try #require(diff.tensorChanges.last)
        #expect(last.storageBefore == removed.compression.label(precision: .float16))
        #expect(last.storageAfter == nil)
        #expect(last.bytesBefore == removed.storedBytes)
        #expect(last.bytesAfter == nil)
        #expect(last.sqnrBefore == removed.sqnrDB ?? .infinity)
        #expect(last.sqnrAfter == nil)
    }

    @Test(
        "two compiled artifacts compare their device plans' totals; beside a bundle, a compiled one counts as its bundle"
    )
    func compiledMemory() throws {
        let plan = try Fixtures.plan(try Fixtures.syntheticCheckpoint())
        let bundle = try ExportRunner.run(
            plan, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory()))
        let table = try DeviceTable.load(presetsDirectory: Fixtures.presetsDirectory)
        let request = CompileRequest(
            platform: .iOS, devices: try table.select(["h17p"], platform: .iOS), minimumDeploymentVersion: .minimum,
            outputDirectory: try Fixtures.temporaryDirectory())
        let compiled = try #require(try Compiler.compile(bundleURL: bundle.bundleURL, request: request).first).manifest
        let deviceTotal = try #require(compiled.compiled?.memory.totalBytes)
        #expect(deviceTotal != compiled.memory.totalBytes)
        func quantity(_ field: String, _ a: Manifest, _ b: Manifest) throws -> ManifestDiff.Quantity {
            let diff = ManifestDiff(
                before: InspectionSummary(manifest: a), after: InspectionSummary(manifest: b), beforeName: "a",
                afterName: "b")
            return try #require(diff.quantities.first { $0.field == field })
        }
        let mixed = try quantity("memory", compiled, bundle.manifest)
        #expect(mixed.before == Double(bundle.manifest.memory.totalBytes))
        #expect(mixed.after == Double(bundle.manifest.memory.totalBytes))
        let size = try quantity("size on disk", bundle.manifest, compiled)
        #expect(size.before == Double(try #require(bundle.manifest.sizes.bundleBytes)))
        #expect(!size.changed)
        var larger = compiled
        larger.compiled?.memory.totalBytes += 10
        let both = try quantity("memory", compiled, larger)
        #expect(both.before == Double(deviceTotal))
        #expect(both.after == Double(deviceTotal + 10))
    }

    @Test("a plan knows no SQNR yet: against its bundle no SQNR falls; a bundle's tensor without SQNR is exact")
    func planSQNRUnknown() throws {
        let plan = try Fixtures.plan(try Fixtures.syntheticCheckpoint())
        let planned = Manifest(plan: plan)
        let bundle = try ExportRunner.run(
            plan, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory())
        ).manifest
        #expect(regressions(planned, bundle, drop: 0) == [])
        let diff = ManifestDiff(
            before: InspectionSummary(manifest: planned), after: InspectionSummary(manifest: bundle), beforeName: "a",
            afterName: "b")
        let lossy = try #require(bundle.tensors.first { $0.sqnrDB != nil })
        let exact = try #require(bundle.tensors.first { $0.sqnrDB == nil })
        let sqnr = { (name: String) in
            diff.tensorChanges.first { $0.name == name }.map { [$0.sqnrBefore, $0.sqnrAfter] }
        }
        #expect(sqnr(lossy.name) == [nil, lossy.sqnrDB])
        #expect(sqnr(exact.name) == [nil, .infinity])
    }

    @Test("a growth whose two decimals equal the limit is printed with the decimals that show it above")
    func growthAboveItsRoundedLimit() throws {
        var before = try manifest()
        var after = before
        before.sizes.bundleBytes = 50_000
        after.sizes.bundleBytes = 51_001
        #expect(
            regressions(before, after, growth: 2) == [
                "size on disk grew by 2.002% (50000 → 51001 bytes), more than --max-size-growth 2%"
            ])
        // Nor may a figure round down to below its limit: 2.004% against 2.0039% was "2.00%".
        after.sizes.bundleBytes = 51_002
        #expect(
            regressions(before, after, growth: 2.0039) == [
                "size on disk grew by 2.004% (50000 → 51002 bytes), more than --max-size-growth 2.0039%"
            ])
        after.sizes.bundleBytes = 53_000
        #expect(
            regressions(before, after, growth: 2) == [
                "size on disk grew by 6.00% (50000 → 53000 bytes), more than --max-size-growth 2%"
            ])
    }
}
