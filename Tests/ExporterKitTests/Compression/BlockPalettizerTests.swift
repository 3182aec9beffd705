import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("per-block palettisation, outliers and importance")
struct BlockPalettizerTests {
    /// Deterministic heavy-ish weights whose scale changes along the columns, with a few outliers.
    private func weights(rows: Int, columns: Int) -> [Float16] {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        return (0..<rows * columns).map { index in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let uniform = Double(state >> 11) / Double(1 << 53) - 0.5
            let column = index % columns
            let scale = 0.01 * (1 + Double(column / 16))
            let outlier = index % 97 == 13 ? 40.0 : 1.0
            return Float16(uniform * scale * outlier)
        }
    }

    private func palettize(
        _ values: [Float16], rows: Int, columns: Int, bits: Int = 4, groupRows: Int, blockColumns: Int,
        outliers: Int = 0,
        importance: [Float]? = nil, workers: Int = 2
    ) throws -> BlockPalette {
        try values.withUnsafeBufferPointer {
            try BlockPalettizer.palettize(
                $0, rows: rows, columns: columns, bits: bits, groupRows: groupRows, blockColumns: blockColumns,
                outlierCount: outliers, importance: importance, name: "t", workerCount: workers)
        }
    }

    @Test("known answer: each 1×2 tile holds its own two values")
    func knownAnswer() throws {
        let values: [Float16] = [1, 2, 30, 40, 5, 6, 70, 80]
        let palette = try palettize(values, rows: 2, columns: 4, bits: 2, groupRows: 1, blockColumns: 2)
        #expect(palette.lut == [1, 2, 2, 2, 30, 40, 40, 40, 5, 6, 6, 6, 70, 80, 80, 80])
        #expect(palette.packedIndices == [0b0100_0100, 0b0100_0100])
        #expect(palette.dequantized() == values.map(Float.init))
        #expect(palette.squaredError == 0)
    }

    @Test("known answer: the largest weight is kept exactly as an outlier")
    func knownOutlier() throws {
        let values: [Float16] = [0.1, 0.2, 0.3, 9.25, 0.1, 0.2, 0.3, 0.4]
        let palette = try palettize(values, rows: 1, columns: 8, bits: 2, groupRows: 1, blockColumns: 8, outliers: 1)
        #expect(palette.outlierIndices == [3])
        #expect(palette.outlierValues == [9.25])
        #expect(palette.lut == [0.1, 0.2, 0.3, 0.4])
        #expect(palette.dequantized() == values.map(Float.init))
    }

    @Test("round trip: tiles and outliers beat one LUT per row group, outliers exact")
    func errorBound() throws {
        let (rows, columns) = (16, 128)
        let values = weights(rows: rows, columns: columns)
        let rowGroups = try palettize(values, rows: rows, columns: columns, groupRows: 4, blockColumns: columns)
        let tiles = try palettize(values, rows: rows, columns: columns, groupRows: 4, blockColumns: 32, outliers: 24)
        #expect(tiles.sqnrDecibels > rowGroups.sqnrDecibels + 3)
        #expect(tiles.sqnrDecibels > 20)
        let decoded = tiles.dequantized()
        for index in tiles.outlierIndices { #expect(decoded[Int(index)] == Float(values[Int(index)])) }
        #expect(tiles.outlierIndices == tiles.outlierIndices.sorted())
        let kept = Set(tiles.outlierIndices.map(Int.init))
        let smallestKept = kept.map { abs(Float(values[$0])) }.min() ?? 0
        #expect(values.indices.allSatisfy { kept.contains($0) || abs(Float(values[$0])) <= smallestKept })
    }

    @Test("importance weighting lowers the weighted error of the columns that matter")
    func importance() throws {
        let (rows, columns) = (8, 64)
        let values = weights(rows: rows, columns: columns)
        let energy = (0..<columns).map { $0 < 8 ? Float(100) : Float(0.01) }
        func weightedError(_ palette: BlockPalette) -> Double {
            zip(palette.dequantized(), values).enumerated().reduce(0.0) { total, item in
                let difference = Double(item.element.0) - Double(Float(item.element.1))
                return total + Double(energy[item.offset % columns]) * difference * difference
            }
        }
        let plain = try palettize(values, rows: rows, columns: columns, groupRows: 8, blockColumns: 64)
        let weighted = try palettize(
            values, rows: rows, columns: columns, groupRows: 8, blockColumns: 64, importance: energy)
        #expect(weightedError(weighted) < weightedError(plain) / 2)
    }

    @Test("the same weights give the same bytes whatever the worker count")
    func reproducible() throws {
        let values = weights(rows: 24, columns: 96)
        let energy = (0..<96).map { Float($0 % 7 + 1) }
        let one = try palettize(
            values, rows: 24, columns: 96, groupRows: 5, blockColumns: 40, outliers: 10, importance: energy, workers: 1)
        let three = try palettize(
            values, rows: 24, columns: 96, groupRows: 5, blockColumns: 40, outliers: 10, importance: energy, workers: 3)
        #expect(one.lut == three.lut)
        #expect(one.packedIndices == three.packedIndices)
        #expect(one.outlierIndices == three.outlierIndices)
        #expect(one.squaredError == three.squaredError)
    }

    /// A tile palettised the plain way: its non-outlier (value, importance) pairs sorted, one
    /// histogram entry per distinct value, k-means, then every weight's nearest entry.
    private func referenceTile(
        _ values: [Double], importance: [Double], outlier: [Bool], entries: Int
    ) -> (lut: [Float16], indices: [UInt8]) {
        let pairs = zip(values, importance).enumerated().filter { !outlier[$0.offset] }.map(\.element).sorted {
            $0.0 < $1.0
        }
        var distinct: [Double] = []
        var prefix = (count: [0.0], sum: [0.0], squares: [0.0])
        for (value, weight) in pairs {
            if distinct.last != value {
                distinct.append(value)
                prefix.count.append(prefix.count.last!)
                prefix.sum.append(prefix.sum.last!)
                prefix.squares.append(prefix.squares.last!)
            }
            prefix.count[distinct.count] += weight
            prefix.sum[distinct.count] += weight * value
            prefix.squares[distinct.count] += weight * value * value
        }
        let scratch = KMeansScratch()
        let clusters = distinct.withUnsafeMutableBufferPointer { values in
            prefix.count.withUnsafeMutableBufferPointer { count in
                prefix.sum.withUnsafeMutableBufferPointer { sum in
                    prefix.squares.withUnsafeMutableBufferPointer { squares in
                        KMeans1D.solve(
                            SortedHistogram(
                                count: values.count, values: values.baseAddress!, prefixCount: count.baseAddress!,
                                prefixSum: sum.baseAddress!, prefixSquares: squares.baseAddress!),
                            clusterLimit: entries, elementCount: pairs.count, scratch: scratch)
                    }
                }
            }
        }
        let lut = (0..<entries).map { Float16(scratch.centroids[min($0, clusters - 1)]) }
        let indices = values.map { value in
            UInt8(
                (0..<entries).min {
                    abs(value - Double(Float(lut[$0]))) < abs(value - Double(Float(lut[$1])))
                        || ($0 < $1
                            && abs(value - Double(Float(lut[$0]))) == abs(value - Double(Float(lut[$1]))))
                }!)
        }
        return (lut, indices)
    }

    @Test("counted by bit pattern, each tile gets the LUT and indices of its sorted (value, importance) pairs")
    func sameAsSortedPairs() throws {
        let (rows, columns, groupRows, blockColumns) = (6, 48, 3, 16)
        // Few distinct values (repeats, −0 and +0), spread by column, and two outliers.
        var values = weights(rows: rows, columns: columns).map { Float16(Float(Int(Float($0) * 400)) / 400) }
        values[7] = -0.0
        values[8] = 0.0
        let energy = (0..<columns).map { Float(1 + ($0 * 7) % 5) }
        let palette = try palettize(
            values, rows: rows, columns: columns, bits: 2, groupRows: groupRows, blockColumns: blockColumns,
            outliers: 2,
            importance: energy)
        let importance = BlockPalettizer.normalisedImportance(energy, columns: columns)
        let outliers = Set(palette.outlierIndices.map(Int.init))
        #expect(outliers.count == 2)
        let indices = try palette.packedIndices.withUnsafeBufferPointer {
            try BitPacking.unpack($0, bits: 2, count: rows * columns)
        }
        for group in 0..<(rows / groupRows) {
            for block in 0..<(columns / blockColumns) {
                let elements = (group * groupRows..<(group + 1) * groupRows).flatMap { row in
                    (block * blockColumns..<(block + 1) * blockColumns).map { row * columns + $0 }
                }
                let expected = referenceTile(
                    elements.map { Double(Float(values[$0])) }, importance: elements.map { importance[$0 % columns] },
                    outlier: elements.map(outliers.contains), entries: 4)
                let tile = group * (columns / blockColumns) + block
                #expect(Array(palette.lut[(tile * 4)..<(tile * 4 + 4)]) == expected.lut, "tile \(tile)")
                #expect(elements.map { indices[$0] } == expected.indices, "tile \(tile)")
            }
        }
    }

    @Test("outliers: the largest scores, ties to the lower element, as a sort of every score finds them")
    func outlierSelection() {
        let (rows, columns) = (40, 24)
        // Coarse values: many equal scores, so the last places go to ties.
        let values = weights(rows: rows, columns: columns).map { Float16(Float(Int(Float($0) * 300)) / 300) }
        for importance in [[Double](repeating: 1, count: columns), (0..<columns).map { Double(1 + $0 % 3) }] {
            let scores = values.enumerated().map {
                Double(abs(Float($0.element))) * importance[$0.offset % columns].squareRoot()
            }
            // Descending score, then ascending element.
            let ranked = scores.indices.sorted { scores[$0] != scores[$1] ? scores[$0] > scores[$1] : $0 < $1 }
            for count in [1, 7, 50, 300, rows * columns] {
                let expected = ranked.prefix(count).sorted().map(UInt32.init)
                let chosen = values.withUnsafeBufferPointer {
                    BlockPalettizer.selectOutliers($0, columns: columns, count: count, importance: importance)
                }
                #expect(chosen == expected, "\(count) outliers")
            }
            // The data puts a tie across the boundary of 300: some equal scores are left out.
            #expect(scores[ranked[299]] == scores[ranked[300]])
        }
    }

    @Test("bad inputs are refused with their reasons")
    func refusals() throws {
        let values = weights(rows: 2, columns: 4)
        #expect(throws: CompressionError.invalidGroupSize(0, tensor: "t")) {
            _ = try palettize(values, rows: 2, columns: 4, groupRows: 1, blockColumns: 0)
        }
        #expect(throws: CompressionError.weightCountMismatch(expected: 4, actual: 3, tensor: "t")) {
            _ = try palettize(values, rows: 2, columns: 4, groupRows: 1, blockColumns: 2, importance: [1, 1, 1])
        }
        var bad = values
        bad[5] = .nan
        #expect(throws: CompressionError.nonFiniteWeight(row: 1, column: 1, tensor: "t")) {
            _ = try palettize(bad, rows: 2, columns: 4, groupRows: 1, blockColumns: 2)
        }
    }

    @Test("config: outlier_fraction's bounds 0 and 0.05 are accepted, a step beyond either is refused")
    func outlierFractionBounds() throws {
        func parse(_ fraction: String) throws -> CompressionConfig {
            let text =
                #"{"schema": "exporter.compression/1", "name": "x", "default": {"mode": "palettize", "bits": 4, "outlier_fraction": \#(fraction)}}"#
            return try CompressionConfig(bytes: Array(text.utf8), path: "x.json")
        }
        #expect(try parse("0.05").defaultScheme?.outlierFraction == 0.05)
        #expect(try parse("0").defaultScheme?.outlierFraction == 0)
        for fraction in ["0.0501", "-0.001"] {
            #expect(
                throws: CompressionConfigError.invalid(
                    path: "x.json", reason: "default: 'outlier_fraction' must be a number from 0 to 0.05")
            ) { _ = try parse(fraction) }
        }
    }

    @Test("config: per_block needs block_size; outlier_fraction is bounded")
    func configErrors() throws {
        func parse(_ scheme: String) throws -> CompressionConfig {
            let text = #"{"schema": "exporter.compression/1", "name": "x", "default": \#(scheme)}"#
            return try CompressionConfig(bytes: Array(text.utf8), path: "x.json")
        }
        #expect(
            throws: CompressionConfigError.invalid(
                path: "x.json", reason: "default: 'block_size' must be an integer from 1 to 1048576 for per_block")
        ) {
            _ = try parse(#"{"mode": "palettize", "bits": 4, "granularity": "per_block", "group_size": 4}"#)
        }
        #expect(
            throws: CompressionConfigError.invalid(
                path: "x.json", reason: "default: 'outlier_fraction' must be a number from 0 to 0.05")
        ) {
            _ = try parse(#"{"mode": "palettize", "bits": 4, "outlier_fraction": 0.5}"#)
        }
        #expect(
            throws: CompressionConfigError.invalid(
                path: "x.json", reason: "default: 'block_size' applies to per_block only")
        ) {
            _ = try parse(#"{"mode": "palettize", "bits": 4, "block_size": 32}"#)
        }
        let config = try parse(
            #"{"mode": "palettize", "bits": 4, "granularity": "per_block", "group_size": 4, "block_size": 192, "outlier_fraction": 0.002}"#
        )
        let scheme = try #require(config.defaultScheme)
        #expect(scheme.lutCount(rows: 576, columns: 1536) == 144 * 8)
        #expect(scheme.outlierCount(elements: 576 * 1536) == 1769)
        let spec = TensorSpec(name: "w", shape: [576, 1536], role: .mlp, layer: 0)
        #expect(scheme.storedBytes(for: spec, precision: .float16) == 576 * 1536 / 2 + 144 * 8 * 32 + 1769 * 6)
        #expect(scheme.label(precision: .float16) == "4-bit LUT 4x192 +outliers")
    }
}

@Suite("fidelity modes in bundles")
struct FidelityBundleTests {
    private func configFile(blockSize: Int = 48) throws -> URL {
        let text = """
            {"schema": "exporter.compression/1", "name": "test_quality", "rules": [{"match": "*norm.weight", "mode": "keep"}],
             "default": {"mode": "palettize", "bits": 4, "granularity": "per_block", "group_size": 4, "block_size": \(blockSize),
                         "outlier_fraction": 0.01}}
            """
        let url = try Fixtures.temporaryDirectory().appendingPathComponent("quality.json")
        try Data(text.utf8).write(to: url)
        return url
    }

    private func export(
        _ checkpoint: URL, calibration: [Int]? = nil, blockSize: Int = 48,
        stepProgress: (WorkProgress) -> Void = { _ in }
    ) throws -> ExportResult {
        let plan = try Fixtures.plan(checkpoint, compression: .file(try configFile(blockSize: blockSize)))
        var settings = ExportSettings(outputDirectory: try Fixtures.temporaryDirectory())
        settings.calibrationTokens = calibration
        return try ExportRunner.run(plan, settings: settings, stepProgress: stepProgress)
    }

    @Test("per-block LUTs with outliers verify, decode within their SQNR and rerun byte for byte")
    func roundTrip() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "mistral")
        let first = try export(checkpoint)
        let second = try export(checkpoint)
        let bytes = { (url: URL) in try Data(contentsOf: url.appendingPathComponent("weights.bin")) }
        #expect(try bytes(first.bundleURL) == bytes(second.bundleURL))
        #expect(
            try Data(contentsOf: first.bundleURL.appendingPathComponent("manifest.json"))
                == Data(contentsOf: second.bundleURL.appendingPathComponent("manifest.json")))
        let proj = try #require(first.manifest.tensors.first { $0.name == "model.layers.0.mlp.down_proj.weight" })
        #expect(proj.parts.map(\.kind) == ["lut", "indices", "outlier_indices", "outlier_values"])
        #expect(proj.compression.granularity == .perBlock)
        let artifact = try LoadedArtifact(url: first.bundleURL)
        let report = ArtifactVerifier.verify(
            artifact, against: try CheckpointWeights(directory: checkpoint), minimumSQNR: nil)
        #expect(report.failures.isEmpty, "\(report.failures)")
        #expect(report.passed)
        #expect(first.manifest.compression.calibration == nil)
        let evaluation = try FidelityEvaluation.evaluate(
            artifact: artifact, checkpoint: checkpoint, tokens: [1, 5, 9, 200, 33, 17])
        #expect(evaluation.linearBitsPerWeight > 4 && evaluation.linearBitsPerWeight < 9)
        #expect(evaluation.sourcePerplexity.isFinite && evaluation.artifactPerplexity.isFinite)
    }

    @Test("calibration weights the k-means and is recorded in the manifest")
    func calibration() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "mistral")
        let plain = try export(checkpoint)
        var steps: [WorkProgress] = []
        let calibrated = try export(checkpoint, calibration: [3, 1, 4, 1, 5, 9, 2, 6]) { steps.append($0) }
        // The calibration pass reports its layers (the fixture has 2) before any tensor is written.
        #expect(steps.map(\.done) == [0, 1, 2, 3])
        #expect(steps.map(\.stage).last == "calibration pass, done")
        let record = try #require(calibrated.manifest.compression.calibration)
        #expect(record.weighting == "activation_energy")
        #expect(record.tokens == 8)
        #expect(
            record.tokensCRC32 == BundleWriter.hex(Array("3,1,4,1,5,9,2,6".utf8).withUnsafeBytes { CRC32.checksum($0) })
        )
        #expect(
            try Data(contentsOf: plain.bundleURL.appendingPathComponent("weights.bin"))
                != Data(contentsOf: calibrated.bundleURL.appendingPathComponent("weights.bin")))
        let report = ArtifactVerifier.verify(
            try LoadedArtifact(url: calibrated.bundleURL), against: try CheckpointWeights(directory: checkpoint),
            minimumSQNR: nil)
        #expect(report.passed, "\(report.failures)")
    }

    @Test("the Core ML writer puts outliers over the palette with select, and verify compares their mask and values")
    func coreMLOutliers() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "mistral")
        let bundle = try export(checkpoint, blockSize: 32).bundleURL
        let destination = try Fixtures.temporaryDirectory().appendingPathComponent("Tiny.mlpackage")
        let manifest = try MLPackageWriter.write(bundle: bundle, to: destination, overwrite: false)
        let q = try #require(manifest.tensors.first { $0.name == "model.layers.0.self_attn.q_proj.weight" })
        #expect(q.op == "select")
        #expect(q.blobs.map(\.kind) == ["lut", "indices", "outlier_mask", "outlier_values", "outlier_flags"])
        #expect(q.blobs.map(\.dtype) == ["fp16", "uint4", "uint1", "fp16", "uint8"])
        // 64 x 64 weights, 1 %: 40 outliers; the mask is one bit per weight.
        #expect(q.blobs[2].bytes == 64 * 64 / 8 && q.blobs[2].shape == [64, 64])
        #expect(q.blobs[3].bytes == 40 * 2 && q.blobs[4].bytes == 40)
        #expect(q.blobs[0].shape == [16, 2, 16, 1])
        #expect(manifest.opCounts["constexpr_sparse_to_dense"] == 2 * manifest.opCounts["select", default: 0])
        let report = try MLPackageVerifier.verify(package: destination, bundle: bundle)
        #expect(report.tensorsCompared == manifest.tensors.count)

        // A flipped mask bit is found and named, even with the checksums updated.
        try flipWeightBit(in: destination, atByte: q.blobs[2].offset + 64, manifest: manifest)
        #expect(
            throws: CoreMLError.bundleMismatch(
                tensor: q.name, reason: "outlier_mask blob at \(q.blobs[2].offset) differs from byte 0")
        ) {
            try MLPackageVerifier.verify(package: destination, bundle: bundle)
        }
    }

    @Test("the Core ML writer refuses per-block tiles that do not divide the shape, by name")
    func coreMLRefusesUnevenTiles() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: "mistral")
        let bundle = try export(checkpoint).bundleURL
        let destination = try Fixtures.temporaryDirectory().appendingPathComponent("Tiny.mlpackage")
        let refusal = CoreMLError.unsupported(
            reason: "tensor 'model.layers.0.self_attn.q_proj.weight': per_block tiles of 4x48 do not divide the shape "
                + "[64, 64] (Core ML needs equal tiles)")
        #expect(throws: refusal) { _ = try MLPackageWriter.write(bundle: bundle, to: destination, overwrite: false) }
        // Known from the plan alone: `--format mlpackage` refuses before exporting.
        let plan = try Fixtures.plan(checkpoint, compression: .file(try configFile(blockSize: 48)))
        #expect(throws: refusal) { try LanguageModelProgram.checkSupported(plan) }
    }
}
