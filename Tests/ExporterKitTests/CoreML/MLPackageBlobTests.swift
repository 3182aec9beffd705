import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("Core ML package: every blob of weight.bin")
struct MLPackageBlobTests {
    /// A blob docs/FORMAT.md ("Blobs that are not tensors") says the program adds: its const op,
    /// and its bytes of float16.
    struct Extra: Equatable, CustomStringConvertible {
        let name: String
        let bytes: Int
        var description: String { "\(name) (\(bytes) bytes)" }
    }

    /// The extra blobs of a tiny model in file order, from the rules of docs/FORMAT.md alone:
    /// the two RoPE tables, then per layer the zero biases of q, k, v (when the family has no
    /// bias), o, gate, up and down, then the head's; a zero bias of 16 values or fewer is inline.
    static func documentedExtras(
        layers: Int, hidden: Int, intermediate: Int, heads: Int, kvHeads: Int, headDim: Int, vocabulary: Int,
        context: Int, qkvBias: Bool
    ) -> [Extra] {
        var extras = [
            Extra(name: "rope_cos_table", bytes: context * headDim * 2),
            Extra(name: "rope_sin_table", bytes: context * headDim * 2),
        ]
        for layer in 0..<layers {
            var biases: [(String, Int)] = []
            if !qkvBias {
                biases += [("q_proj", heads * headDim), ("k_proj", kvHeads * headDim), ("v_proj", kvHeads * headDim)]
            }
            biases += [
                ("o_proj", hidden), ("gate_proj", intermediate), ("up_proj", intermediate), ("down_proj", hidden),
            ]
            extras += biases.filter { $0.1 > 16 }.map { Extra(name: "layers_\(layer)_\($0.0)_bias", bytes: $0.1 * 2) }
        }
        return extras + [Extra(name: "logits_bias", bytes: vocabulary * 2)]
    }

    @Test(
        "every blob of weight.bin is a manifest tensor's or one of the extra blobs FORMAT documents, in order",
        arguments: [("qwen2", 11), ("qwen3", 17)])
    func everyBlobAccounted(modelType: String, extraCount: Int) throws {
        // The fixture: 2 layers, hidden 64, intermediate 128, 4 heads and 2 KV heads of 16, vocabulary
        // 256, tied embeddings; qwen2 has q, k, v biases, qwen3 none.
        let (plan, package, manifest) = try convertedTinyFixture(modelType)
        let expected = Self.documentedExtras(
            layers: 2, hidden: 64, intermediate: 128, heads: 4, kvHeads: 2, headDim: 16, vocabulary: 256,
            context: plan.contextLength, qkvBias: modelType == "qwen2")
        #expect(expected.count == extraCount)
        let file = try MILBlobFile(url: package.appendingPathComponent(MLPackageWriter.weightsPath))
        let tensorBlobs = Dictionary(
            uniqueKeysWithValues: manifest.tensors.flatMap { tensor in tensor.blobs.map { ($0.offset, $0.bytes) } })
        var extras: [MILBlobFile.Entry] = []
        for entry in file.entries {
            if let bytes = tensorBlobs[entry.metadataOffset] {
                #expect(bytes == entry.byteCount)
            } else {
                extras.append(entry)
            }
        }
        #expect(file.entries.count == tensorBlobs.count + expected.count)
        #expect(extras.map(\.byteCount) == expected.map(\.bytes))
        #expect(extras.allSatisfy { $0.dataType == .float16 })
        // Zero biases hold zeros; at position 0 the cos table is 1 and the sin table 0.
        for (entry, extra) in zip(extras, expected) {
            let bytes = try file.bytes(of: entry, range: 0..<entry.byteCount)
            if extra.name.hasSuffix("_bias") { #expect(bytes.allSatisfy { $0 == 0 }, "\(extra)") }
        }
        let firstRow = 16 * 2
        #expect(
            try file.bytes(of: extras[0], range: 0..<firstRow)
                == Array(repeating: [0x00, 0x3C], count: 16).flatMap { $0 })
        #expect(try file.bytes(of: extras[1], range: 0..<firstRow).allSatisfy { $0 == 0 })
        // The manifest lists them as FORMAT names them.
        let constants = try #require(manifest.constants)
        #expect(constants.map { Extra(name: $0.name, bytes: $0.bytes) } == expected)
        #expect(constants.map(\.offset) == extras.map(\.metadataOffset))
        #expect(
            constants.map(\.kind) == ["rope_cos", "rope_sin"] + Array(repeating: "zero_bias", count: extraCount - 2))
        #expect(constants[0].shape == [plan.contextLength, 16] && constants.allSatisfy { $0.dtype == "fp16" })
    }

    @Test("verify refuses a blob that no tensor or constant claims, one claimed twice, and a zero bias not zero")
    func strayBlobs() throws {
        let (_, package, manifest) = try convertedTinyFixture("qwen2")
        let url = package.appendingPathComponent(MLPackageManifest.path)
        let constants = try #require(manifest.constants)
        func verify(_ edited: MLPackageManifest) throws {
            try Data(try CanonicalJSON.encode(edited)).write(to: url)
            _ = try MLPackageVerifier.verify(package: package)
        }
        var dropped = manifest
        dropped.constants = Array(constants.dropFirst())
        #expect(
            throws: CoreMLError.invalidPackage(
                path: MLPackageWriter.weightsPath,
                reason: "the blob at \(constants[0].offset) is neither a tensor's nor a constant's")
        ) { try verify(dropped) }
        var twice = manifest
        twice.constants![1].offset = constants[0].offset
        #expect(
            throws: CoreMLError.invalidPackage(
                path: MLPackageWriter.weightsPath,
                reason: "the blob at \(constants[0].offset) is listed for both 'rope_cos_table' and 'rope_sin_table'")
        ) { try verify(twice) }
        // A bias that is not zero: the rope table's blob called a zero bias.
        var notZero = manifest
        notZero.constants![0].kind = "zero_bias"
        #expect(
            throws: CoreMLError.invalidPackage(
                path: MLPackageWriter.weightsPath, reason: "constant 'rope_cos_table': a zero bias that is not zero")
        ) { try verify(notZero) }
        // A package written before constants were listed verifies as it did.
        var older = manifest
        older.constants = nil
        try verify(older)
        #expect(try String(contentsOf: url, encoding: .utf8).contains("\"constants\" : null"))
    }
}
