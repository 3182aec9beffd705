import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("Core ML package")
struct MLPackageTests {
    /// Exports a tiny checkpoint to a bundle and converts it; qwen3 with group 24 gives smaller last groups.
    private func package(
        modelType: String = "qwen3", overrides: [String: Any?] = ["head_dim": 32], output: URL? = nil
    ) throws -> (bundle: URL, package: URL, manifest: MLPackageManifest) {
        let checkpoint = try Fixtures.syntheticCheckpoint(modelType: modelType, overrides: overrides)
        let config = try Fixtures.temporaryDirectory().appendingPathComponent("mixed.json")
        try Data(
            #"""
            {"schema": "exporter.compression/1", "name": "mixed", "description": "test",
             "rules": [{"match": "*norm.weight", "mode": "keep"},
                       {"match": "model.layers.1.*_proj.weight", "mode": "palettize", "bits": 8, "granularity": "per_tensor"}],
             "default": {"mode": "palettize", "bits": 4, "granularity": "per_grouped_channel", "group_size": 24}}
            """#.utf8
        ).write(to: config)
        let plan = try Fixtures.plan(checkpoint, compression: .file(config))
        let result = try ExportRunner.run(
            plan, settings: ExportSettings(outputDirectory: output ?? Fixtures.temporaryDirectory()))
        let destination = MLPackageWriter.defaultDestination(forBundle: result.bundleURL)
        let manifest = try MLPackageWriter.write(bundle: result.bundleURL, to: destination, overwrite: false)
        return (result.bundleURL, destination, manifest)
    }

    @Test("the package has Core ML's layout, a specification-9 model and a manifest that adds up")
    func structure() throws {
        let (bundle, package, manifest) = try package()
        #expect(package.lastPathComponent == "Tiny.mlpackage")
        #expect(package.deletingLastPathComponent() == bundle.deletingLastPathComponent())
        let files = try FileManager.default.subpathsOfDirectory(atPath: package.path).filter {
            !$0.hasSuffix("com.apple.CoreML")
        }
        #expect(
            Set(files).isSuperset(of: [
                "Manifest.json", "Data/com.apple.CoreML/model.mlmodel", "Data/com.apple.CoreML/weights/weight.bin",
                "Data/com.github.exporter/manifest.json",
            ]))
        let packageManifest =
            try JSONSerialization.jsonObject(with: Data(contentsOf: package.appendingPathComponent("Manifest.json")))
            as? [String: Any]
        let entries = packageManifest?["itemInfoEntries"] as? [String: [String: String]] ?? [:]
        let root = packageManifest?["rootModelIdentifier"] as? String ?? ""
        #expect(entries[root]?["path"] == "com.apple.CoreML/model.mlmodel")
        #expect(entries.values.contains { $0["path"] == "com.apple.CoreML/weights" })
        #expect(packageManifest?["fileFormatVersion"] as? String == "1.0.0")
        let model = [UInt8](try Data(contentsOf: package.appendingPathComponent(MLPackageWriter.modelPath)))
        #expect(Array(model.prefix(2)) == [0x08, 0x09])  // specificationVersion: 9
        #expect(
            manifest.deploymentTarget == "iOS18" && manifest.specificationVersion == 9 && manifest.opset == "CoreML8")
        #expect(manifest.packageBytes == manifest.files.reduce(0) { $0 + $1.bytes })
        #expect(manifest.opCounts.values.reduce(0, +) == manifest.operationCount)
        #expect(manifest.opCounts["scaled_dot_product_attention"] == 2)
        #expect(
            manifest.opCounts["read_state"] == 4 && manifest.opCounts["write_state"] == 4
                && manifest.opCounts["slice_update"] == 4)
        #expect(manifest.kvCacheBytes == 2 * 2 * 2 * 32 * 512 * 2)
        // q_proj: 128 rows in groups of 24 (last group 8): 16 LUTs of 8 rows in the package.
        let q = try #require(manifest.tensors.first { $0.name == "model.layers.0.self_attn.q_proj.weight" })
        #expect(q.op == "constexpr_lut_to_dense" && q.lutGroups == 16 && q.lutGroupRows == 8)
        #expect(
            q.blobs.map(\.kind) == ["lut", "indices"] && q.blobs[0].shape == [16, 1, 16, 1]
                && q.blobs[1].dtype == "uint4")
        let embedding = try #require(manifest.tensors.first { $0.name == "model.embed_tokens.weight" })
        #expect(embedding.op == "constexpr_blockwise_shift_scale")
        let eightBit = try #require(manifest.tensors.first { $0.name == "model.layers.1.mlp.up_proj.weight" })
        #expect(eightBit.blobs.map(\.dtype) == ["fp16", "uint8"] && eightBit.lutGroups == 1)
    }

    @Test("verify checks every file and blob, and every LUT and index stream against the bundle")
    func verify() throws {
        let (bundle, package, manifest) = try package()
        let report = try MLPackageVerifier.verify(package: package, bundle: bundle)
        #expect(report.tensorsCompared == manifest.tensors.count)
        #expect(report.blobsChecked == manifest.blobCount)
        let weights = package.appendingPathComponent(MLPackageWriter.weightsPath)
        var bytes = try Data(contentsOf: weights)
        let q = try #require(manifest.tensors.first { $0.name == "model.layers.0.self_attn.q_proj.weight" })
        bytes[q.blobs[0].offset + 64 + 2] ^= 0x01
        try bytes.write(to: weights)
        #expect(throws: BundleError.self) { try MLPackageVerifier.verify(package: package, bundle: bundle) }
    }

    @Test("a package manifest that miscounts the blobs is refused, naming both counts")
    func blobCount() throws {
        let (_, package, manifest) = try package()
        let url = package.appendingPathComponent(MLPackageManifest.path)
        var object = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any])
        object["blob_count"] = manifest.blobCount - 1
        try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]).write(to: url)
        #expect(
            throws: CoreMLError.invalidPackage(
                path: MLPackageWriter.weightsPath,
                reason: "\(manifest.blobCount) blobs, the manifest says \(manifest.blobCount - 1)")
        ) { try MLPackageVerifier.verify(package: package) }
    }

    @Test(
        "a doctored figure of the package manifest is found against the bundle, naming the key",
        arguments: [
            ("context_length", 1024, "'context_length' is 1024, the package and its bundle give 512"),
            ("package_bytes", 1, "'package_bytes' is 1, the package and its bundle give "),
            ("opset", "CoreML7", "'opset' is \"CoreML7\", the package and its bundle give \"CoreML8\""),
            ("architecture", "mistral", "'architecture' is \"mistral\", the package and its bundle give \"qwen3\""),
        ] as [(String, Any, String)])
    func doctoredFigures(_ key: String, _ value: Any, _ message: String) throws {
        let (bundle, package, _) = try package()
        let url = package.appendingPathComponent(MLPackageManifest.path)
        var object = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any])
        object[key] = value
        try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]).write(to: url)
        let error = #expect(throws: CoreMLError.self) { try MLPackageVerifier.verify(package: package, bundle: bundle) }
        #expect(error?.description.contains(message) == true, "\(error?.description ?? "")")
        // A package renamed since it was written is still the same package.
        let renamed = package.deletingLastPathComponent().appendingPathComponent("Renamed.mlpackage")
        try FileManager.default.removeItem(at: package)
        _ = try MLPackageWriter.write(bundle: bundle, to: package, overwrite: false)
        try FileManager.default.moveItem(at: package, to: renamed)
        _ = try MLPackageVerifier.verify(package: renamed, bundle: bundle)
    }

    @Test("a LUT that differs from the bundle's is found, named, even when the checksums are updated")
    func bundleComparison() throws {
        let (bundle, package, manifest) = try package()
        let q = try #require(manifest.tensors.first { $0.name == "model.layers.0.self_attn.q_proj.weight" })
        try flipWeightBit(in: package, atByte: q.blobs[0].offset + 64 + 2, manifest: manifest)
        #expect(
            throws: CoreMLError.bundleMismatch(
                tensor: q.name, reason: "lut blob at \(q.blobs[0].offset) differs from byte 2")
        ) {
            try MLPackageVerifier.verify(package: package, bundle: bundle)
        }
    }

    @Test("a blob copied from the bundle is compared a piece at a time, the first differing byte named from any piece")
    func piecewiseComparison() throws {
        let (bundle, package, manifest) = try package()
        let q = try #require(manifest.tensors.first { $0.name == "model.layers.0.self_attn.q_proj.weight" })
        let indices = q.blobs[1]
        #expect(indices.kind == "indices" && indices.bytes > 1000)
        for pieceBytes in [500, 999, 1000, 1 << 20] {
            #expect(
                try MLPackageVerifier.verify(package: package, bundle: bundle, pieceBytes: pieceBytes).tensorsCompared
                    == manifest.tensors.count)
        }
        try flipWeightBit(in: package, atByte: indices.offset + 64 + 999, manifest: manifest)
        for pieceBytes in [500, 999, 1000, 1 << 20] {
            #expect(
                throws: CoreMLError.bundleMismatch(
                    tensor: q.name, reason: "indices blob at \(indices.offset) differs from byte 999")
            ) {
                try MLPackageVerifier.verify(package: package, bundle: bundle, pieceBytes: pieceBytes)
            }
        }
    }

    @Test("the same bundle gives a byte-identical package")
    func reproducible() throws {
        let first = try package()
        let second = try package()
        for path in [
            MLPackageWriter.packageManifestPath, MLPackageWriter.modelPath, MLPackageWriter.weightsPath,
            MLPackageManifest.path,
        ] {
            let a = try Data(contentsOf: first.package.appendingPathComponent(path))
            let b = try Data(contentsOf: second.package.appendingPathComponent(path))
            #expect(a == b, "\(path) differs")
        }
        #expect(first.manifest == second.manifest)
        let text = try String(contentsOf: first.package.appendingPathComponent(MLPackageManifest.path), encoding: .utf8)
        #expect(!text.contains(NSTemporaryDirectory()))
    }

    @Test("every iOS family converts; bundles Core ML cannot run are refused with a reason")
    func families() throws {
        for modelType in ["qwen2", "mistral"] {
            let result = try package(modelType: modelType, overrides: [:])
            #expect(try MLPackageVerifier.verify(package: result.package, bundle: result.bundle).tensorsCompared > 0)
        }
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let plan = try Fixtures.plan(checkpoint, compression: .named("none"), precision: .float32)
        let bundle = try ExportRunner.run(
            plan, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory())
        ).bundleURL
        #expect(throws: CoreMLError.unsupported(reason: "the bundle computes in float32; the program needs float16")) {
            try MLPackageWriter.write(
                bundle: bundle, to: MLPackageWriter.defaultDestination(forBundle: bundle), overwrite: false)
        }
        #expect(!FileManager.default.fileExists(atPath: MLPackageWriter.defaultDestination(forBundle: bundle).path))
    }

    @Test("the RoPE tables hold cos and sin of position / factor × inv_freq, each half of a row repeating the other")
    func ropeTables() throws {
        let (bundle, package, manifest) = try package(
            modelType: "qwen2", overrides: ["rope_scaling": ["type": "linear", "factor": 2]])
        let graph = try BundleReader(url: bundle).graph
        #expect(graph.rope.scalingType == "linear" && graph.rope.scalingFactor == 2)
        let file = try MILBlobFile(url: package.appendingPathComponent(MLPackageWriter.weightsPath))
        let constants = try #require(manifest.constants)
        let dimension = 16
        // transformers in float32: inv_freq[i] = 1 / θ^(2i/d), angle t · inv_freq[i mod d/2], t = position / factor.
        let inverse = (0..<(dimension / 2)).map {
            1 / Float(pow(Double(Float(graph.rope.theta)), Double(Float(2 * $0) / Float(dimension))))
        }
        for (kind, function) in [("rope_cos", cos), ("rope_sin", sin)] as [(String, (Double) -> Double)] {
            let table = try #require(constants.first { $0.kind == kind })
            #expect(table.shape == [graph.contextLength, dimension])
            let rows = 4
            let bytes = try file.bytes(
                of: file.entry(atMetadataOffset: table.offset), range: 0..<(rows * dimension * 2))
            let expected = (0..<rows).flatMap { position in
                (0..<dimension).flatMap { column -> [UInt8] in
                    let angle = Float(position) / 2 * inverse[column % (dimension / 2)]
                    let bits = Float16(Float(function(Double(angle)))).bitPattern
                    return [UInt8(truncatingIfNeeded: bits), UInt8(truncatingIfNeeded: bits >> 8)]
                }
            }
            #expect(bytes == expected, "\(kind)")
        }
    }

    @Test("every RMSNorm's rsqrt takes the config's rms_norm_eps")
    func normEpsilon() throws {
        let (bundle, _, _) = try package(modelType: "mistral", overrides: ["rms_norm_eps": 1e-5])
        let program = try LanguageModelProgram.build(bundle: try BundleReader(url: bundle))
        let epsilons = program.model.program.operations.filter {
            $0.type == "const" && $0.outputs.first?.name.hasSuffix("_rsqrt_epsilon") == true
        }
        // Two norms in each of the two layers, and the final one.
        #expect(epsilons.count == 5)
        for op in epsilons {
            #expect(op.attributes.first { $0.key == "val" }?.value.contents == .immediate(.floats([Float(1e-5)])))
        }
    }

    @Test("a package manifest naming a file outside the package is refused before that file is read")
    func fileOutsidePackage() throws {
        let (bundle, package, manifest) = try package()
        // The bundle's manifest beside the package, listed with its true size and CRC-32.
        let outside = "../\(bundle.lastPathComponent)/manifest.json"
        let data = try Data(contentsOf: bundle.appendingPathComponent("manifest.json"))
        var crc = CRC32()
        data.withUnsafeBytes { crc.update($0) }
        var edited = manifest
        edited.files.append(Manifest.File(path: outside, bytes: data.count, crc32: BundleWriter.hex(crc.value)))
        try Data(try CanonicalJSON.encode(edited)).write(to: package.appendingPathComponent(MLPackageManifest.path))
        #expect(
            throws: CoreMLError.invalidPackage(path: outside, reason: "the manifest names a file outside the package")
        ) { try MLPackageVerifier.verify(package: package) }
    }

    @Test("an existing package is refused without overwrite")
    func overwrite() throws {
        let (bundle, package, _) = try package()
        #expect(throws: BundleError.outputExists(path: package.path)) {
            try MLPackageWriter.write(bundle: bundle, to: package, overwrite: false)
        }
        try MLPackageWriter.write(bundle: bundle, to: package, overwrite: true)
        _ = try MLPackageVerifier.verify(package: package, bundle: bundle)
    }

    @Test("a package is checked under its staging name before it is published: one that fails is never published")
    func checkedBeforePublishing() throws {
        struct Refused: Error, Equatable {}
        let (bundle, package, manifest) = try package()
        // A file of the package it would replace shows whether that package is still there.
        let marker = package.appendingPathComponent("marker")
        try Data().write(to: marker)
        var staged: URL?
        #expect(throws: Refused()) {
            try MLPackageWriter.write(bundle: bundle, to: package, overwrite: true) {
                staged = $0
                #expect($0.lastPathComponent.hasPrefix(ArtifactDirectory.stagingPrefix))
                #expect(try MLPackageVerifier.verify(package: $0, bundle: bundle).manifest == manifest)
                #expect(FileManager.default.fileExists(atPath: marker.path))
                throw Refused()
            }
        }
        #expect(FileManager.default.fileExists(atPath: marker.path))
        #expect(try !FileManager.default.fileExists(atPath: #require(staged).path))
        let written = try MLPackageWriter.write(bundle: bundle, to: package, overwrite: true) {
            try MLPackageVerifier.verify(package: $0, bundle: bundle)
        }
        #expect(written.checked.tensorsCompared == manifest.tensors.count && written.manifest == manifest)
        #expect(!FileManager.default.fileExists(atPath: marker.path))
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: package.deletingLastPathComponent().path).filter {
                $0.hasPrefix(".")
            } == [])
    }

    @Test(
        "the package's size is known exactly before writing, from the bundle and from the plan alone",
        arguments: ["qwen2", "qwen3", "mistral"])
    func exactSize(modelType: String) throws {
        let (plan, package, manifest) = try convertedTinyFixture(modelType)
        let written = try FileManager.default.subpathsOfDirectory(atPath: package.path).reduce(0) { total, path in
            let attributes = try FileManager.default.attributesOfItem(atPath: package.appendingPathComponent(path).path)
            let isFile = attributes[.type] as? FileAttributeType == .typeRegular
            return total + (isFile ? attributes[.size] as? Int ?? 0 : 0)
        }
        let manifestBytes = try Data(contentsOf: package.appendingPathComponent(MLPackageManifest.path)).count
        #expect(written == manifest.packageBytes + manifestBytes)
        #expect(try MLPackageWriter.packageBytes(plan: plan) == written)
    }

    @Test("convert refuses a package larger than the free space before writing anything; exactly its size is enough")
    func diskSpace() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let plan = try Fixtures.plan(checkpoint)
        let bundle = try ExportRunner.run(
            plan, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory())
        ).bundleURL
        let needed = try MLPackageWriter.packageBytes(plan: plan)
        let folder = try Fixtures.temporaryDirectory()
        let destination = folder.appendingPathComponent("Tiny.mlpackage")
        #expect(
            throws: ResourceError.notEnoughDisk(
                directory: folder.standardizedFileURL.path, neededBytes: needed, availableBytes: needed - 1,
                what: .package)
        ) {
            try MLPackageWriter.write(
                bundle: bundle, to: destination, overwrite: false, availableDiskBytes: needed - 1)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path) == [])
        try MLPackageWriter.write(bundle: bundle, to: destination, overwrite: false, availableDiskBytes: needed)
    }
}

/// Exports the tiny fixture of `modelType` (automatic compression) and converts the bundle to a
/// package beside it.
func convertedTinyFixture(_ modelType: String) throws -> (plan: ExportPlan, package: URL, manifest: MLPackageManifest) {
    let checkpoint = try Fixtures.syntheticCheckpoint(modelType: modelType)
    let plan = try Fixtures.plan(checkpoint)
    let bundle = try ExportRunner.run(
        plan, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory())
    ).bundleURL
    let package = MLPackageWriter.defaultDestination(forBundle: bundle)
    let manifest = try MLPackageWriter.write(bundle: bundle, to: package, overwrite: false)
    return (plan, package, manifest)
}

/// Flips the low bit of byte `offset` of a Core ML package's weight file and records the new
/// CRC-32 in its manifest: damage that only the comparison with the bundle can find.
func flipWeightBit(in package: URL, atByte offset: Int, manifest: MLPackageManifest) throws {
    let weights = package.appendingPathComponent(MLPackageWriter.weightsPath)
    var bytes = try Data(contentsOf: weights)
    bytes[offset] ^= 0x01
    try bytes.write(to: weights)
    var crc = CRC32()
    bytes.withUnsafeBytes { crc.update($0) }
    var edited = manifest
    edited.files = manifest.files.map {
        $0.path == MLPackageWriter.weightsPath
            ? Manifest.File(path: $0.path, bytes: $0.bytes, crc32: BundleWriter.hex(crc.value)) : $0
    }
    try Data(try CanonicalJSON.encode(edited)).write(to: package.appendingPathComponent(MLPackageManifest.path))
}
