import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("palette search: standard, thorough, exact")
struct PaletteSearchTests {
    private func parse(_ scheme: String) throws -> CompressionConfig {
        let text = #"{"schema": "exporter.compression/1", "name": "x", "default": \#(scheme)}"#
        return try CompressionConfig(bytes: Array(text.utf8), path: "x.json")
    }

    @Test("a config's 'search' is read for palettize rules; 'standard' is the same scheme as none; misuse is refused")
    func configField() throws {
        let exact = try #require(try parse(#"{"mode": "palettize", "bits": 4, "search": "exact"}"#).defaultScheme)
        #expect(exact.search == .exact)
        let thorough = try #require(try parse(#"{"mode": "palettize", "bits": 4, "search": "thorough"}"#).defaultScheme)
        #expect(thorough.search == .thorough)
        let standard = try #require(try parse(#"{"mode": "palettize", "bits": 4, "search": "standard"}"#).defaultScheme)
        let unspecified = try #require(try parse(#"{"mode": "palettize", "bits": 4}"#).defaultScheme)
        #expect(standard == unspecified)
        #expect(standard.search == nil)
        #expect(
            throws: CompressionConfigError.invalid(
                path: "x.json", reason: "default: 'search' must be one of: standard, thorough, exact")
        ) {
            _ = try parse(#"{"mode": "palettize", "bits": 4, "search": "fast"}"#)
        }
        #expect(
            throws: CompressionConfigError.invalid(
                path: "x.json", reason: "default: 'search' applies to palettize only")
        ) {
            _ = try parse(#"{"mode": "linear", "search": "exact"}"#)
        }
        #expect(
            throws: CompressionConfigError.invalid(
                path: "x.json",
                reason:
                    "default: mode 'keep' takes no bits, granularity, group_size, block_size, outlier_fraction or search"
            )
        ) {
            _ = try parse(#"{"mode": "keep", "search": "exact"}"#)
        }
    }

    @Test("on heavy-tailed group-8 weights: exact < thorough < standard in error, and the three LUTs differ")
    func errorOrder() throws {
        // 8 × 1,024 weights a group take thousands of distinct values: the heuristics run.
        let rows = 32
        let columns = 1024
        let weights = HeavyTailedWeights.make(rows: rows, columns: columns, seed: 3)
        let spec = PaletteSpec(bits: 4, granularity: .perGroupedChannel(groupSize: 8))
        func run(_ search: CompressionScheme.Search?) throws -> PalettizedTensor {
            try weights.withUnsafeBufferPointer {
                try Palettizer.palettize(
                    $0, rows: rows, columns: columns, spec: spec, workerCount: 2,
                    clustering: PaletteClustering(search: search))
            }
        }
        let standard = try run(nil)
        let thorough = try run(.thorough)
        let exact = try run(.exact)
        #expect(exact.squaredError < thorough.squaredError)
        #expect(thorough.squaredError < standard.squaredError)
        #expect(thorough.squaredError <= exact.squaredError * 1.005)
        #expect(standard.squaredError <= exact.squaredError * 1.02)
        #expect(standard.lut != thorough.lut)
        #expect(thorough.lut != exact.lut)
        #expect(try run(.standard).packedIndices == standard.packedIndices)
    }

    @Test("tiles (per_block) search as asked too")
    func blockPalettizer() throws {
        let rows = 16
        let columns = 2048
        let weights = HeavyTailedWeights.make(rows: rows, columns: columns, seed: 4)
        func error(_ clustering: PaletteClustering) throws -> Double {
            try weights.withUnsafeBufferPointer {
                try BlockPalettizer.palettize(
                    $0, rows: rows, columns: columns, bits: 4, groupRows: 8, blockColumns: 1024, clustering: clustering)
            }.squaredError
        }
        let standard = try error(.automatic)
        let exact = try error(.exact)
        #expect(exact < standard)
        #expect(try error(.thorough) != standard)
    }

    @Test("--palette-search overrides every palettised tensor's search and leaves the others alone")
    func planOverride() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        var options = ExportOptions(model: checkpoint.path)
        options.experimental = true
        options.computePrecision = .float16
        options.paletteSearch = .exact
        let exact = try ExportPlan.make(options: options, resolver: try Fixtures.resolver())
        let palettized = exact.tensors.filter { $0.scheme.mode == .palettize }
        #expect(!palettized.isEmpty)
        #expect(palettized.allSatisfy { $0.scheme.search == .exact })
        #expect(exact.tensors.filter { $0.scheme.mode != .palettize }.allSatisfy { $0.scheme.search == nil })
        // Standard is spelled as no search at all, so it plans (and builds) exactly as the default.
        options.paletteSearch = .standard
        let standard = try ExportPlan.make(options: options, resolver: try Fixtures.resolver())
        options.paletteSearch = nil
        let unspecified = try ExportPlan.make(options: options, resolver: try Fixtures.resolver())
        #expect(standard.tensors == unspecified.tensors)
        #expect(standard.tensors != exact.tensors)
    }
}
