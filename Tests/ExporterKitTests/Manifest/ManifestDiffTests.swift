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

    private func regressions(_ before: Manifest, _ after: Manifest, growth: Double? = nil, drop: Double? = nil)
        -> [String]
    {
        ManifestDiff(
            before: InspectionSummary(manifest: before), after: InspectionSummary(manifest: after), beforeName: "a",
            afterName: "b"
        ).regressions(maxSizeGrowthPercent: growth, maxSQNRDrop: drop)
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
