import Foundation
import TestSupport
import Testing

@testable import ExporterKit

/// Bundles whose manifest lies about their files: the reader reports each lie as an error
/// naming the file or tensor, and never traps (negative or huge offsets, overflowing shapes).
@Suite("hostile inputs: artifacts whose manifests lie")
struct LyingManifestTests {
    /// A freshly exported tiny bundle (4-bit palettised, iOS: int8 embedding).
    private func bundle() throws -> URL {
        let checkpoint = try Fixtures.syntheticCheckpoint()
        let plan = try Fixtures.plan(checkpoint)
        return try ExportRunner.run(plan, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory()))
            .bundleURL
    }

    /// Rewrites the bundle's manifest through `edit` (on its JSON object).
    private func editManifest(_ bundle: URL, _ edit: (inout [String: Any]) throws -> Void) throws {
        let url = bundle.appendingPathComponent("manifest.json")
        var object = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any])
        try edit(&object)
        try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]).write(to: url)
    }

    /// Edits tensor `name` of the manifest.
    private func editTensor(_ bundle: URL, _ name: String, _ edit: @escaping (inout [String: Any]) -> Void) throws {
        try editManifest(bundle) { manifest in
            var tensors = try #require(manifest["tensors"] as? [[String: Any]])
            let index = try #require(tensors.firstIndex { $0["name"] as? String == name })
            edit(&tensors[index])
            manifest["tensors"] = tensors
        }
    }

    private func editPart(_ bundle: URL, _ name: String, part: Int, _ key: String, _ value: Any) throws {
        try editTensor(bundle, name) { tensor in
            var parts = tensor["parts"] as? [[String: Any]] ?? []
            parts[part][key] = value
            tensor["parts"] = parts
        }
    }

    /// The error opening the bundle (without the CRC check, so the lie reaches the decoder) and
    /// decoding every tensor ends with.
    private func failure(_ bundle: URL, verifyFiles: Bool = false) -> BundleError? {
        do {
            let reader = try BundleReader(url: bundle, verifyFiles: verifyFiles)
            for name in reader.tensorNames { _ = try reader.dequantize(name) }
            return nil
        } catch let error as BundleError {
            return error
        } catch {
            Issue.record("not a BundleError: \(error)")
            return nil
        }
    }

    static let norm = "model.layers.0.input_layernorm.weight"
    static let projection = "model.layers.0.self_attn.q_proj.weight"

    @Test("every lie also fails 'exporter verify' run as a child process: exit 1, no signal, the culprit named")
    func throughTheCommandLine() throws {
        let lies: [(String, (URL) throws -> Void)] = [
            (
                "model.layers.0.self_attn.q_proj.weight",
                { try self.editPart($0, Self.projection, part: 1, "offset", 1 << 40) }
            ),
            (
                "model.layers.0.self_attn.q_proj.weight",
                { try self.editPart($0, Self.projection, part: 0, "offset", -64) }
            ),
            (
                "model.layers.0.input_layernorm.weight",
                { try self.editTensor($0, Self.norm) { $0["shape"] = [Int.max, 4] } }
            ),
            (
                "model.layers.0.input_layernorm.weight",
                { try self.editTensor($0, Self.norm) { $0["stored_bytes"] = Int.max } }
            ),
            (
                "model.layers.0.self_attn.q_proj.weight",
                {
                    try self.editTensor($0, Self.projection) { tensor in
                        var compression = tensor["compression"] as? [String: Any] ?? [:]
                        compression["bits"] = 5
                        tensor["compression"] = compression
                    }
                }
            ),
            (
                "../outside",
                {
                    try self.editManifest($0) { manifest in
                        var files = manifest["files"] as? [[String: Any]] ?? []
                        files[0]["path"] = "../outside"
                        manifest["files"] = files
                    }
                }
            ),
        ]
        let pristine = try bundle()
        for (culprit, lie) in lies {
            let bundle = try bundle()
            try lie(bundle)
            let inspect = try BuiltExporter.run(["inspect", bundle.path])
            #expect(inspect.exitedNormally, "\(culprit): inspect ended by a signal")
            let diff = try BuiltExporter.run(["diff", pristine.path, bundle.path, "--max-size-growth", "1"])
            #expect(diff.exitedNormally, "\(culprit): diff ended by a signal")
            let run = try BuiltExporter.run(["verify", bundle.path])
            #expect(run.exitedNormally, "\(culprit): ended by a signal")
            #expect(run.status == 1, "\(culprit): \(run.error)")
            #expect(run.error.hasPrefix("Error: "), "\(culprit)")
            #expect(run.error.contains(culprit), "\(culprit) not named in: \(run.error)")
        }
    }

    @Test("a part past the end of the weights file, or at a negative offset")
    func offsets() throws {
        let a = try bundle()
        let size = try #require(
            try FileManager.default.attributesOfItem(atPath: a.appendingPathComponent("weights.bin").path)[.size]
                as? Int)
        try editPart(a, Self.norm, part: 0, "offset", 1 << 40)
        #expect(
            failure(a)
                == .fileMismatch(
                    path: "weights.bin",
                    reason:
                        "tensor '\(Self.norm)': 128 bytes at offset 1099511627776 lie outside the file's \(size) bytes")
        )
        let b = try bundle()
        try editPart(b, Self.norm, part: 0, "offset", -64)
        #expect(
            failure(b)
                == .fileMismatch(
                    path: "weights.bin",
                    reason: "tensor '\(Self.norm)': 128 bytes at offset -64 lie outside the file's \(size) bytes"))
        let c = try bundle()
        try editPart(c, Self.norm, part: 0, "offset", Int.max - 63)
        // Aligned, and offset + bytes would overflow: still just outside the file.
        #expect(
            failure(c)
                == .fileMismatch(
                    path: "weights.bin",
                    reason:
                        "tensor '\(Self.norm)': 128 bytes at offset \(Int.max - 63) lie outside the file's \(size) bytes"
                ))
        let d = try bundle()
        try editPart(d, Self.norm, part: 0, "offset", size - 64)
        // Starts inside the file, ends 64 bytes past it: refused on opening, naming the tensor.
        #expect(
            failure(d)
                == .fileMismatch(
                    path: "weights.bin",
                    reason:
                        "tensor '\(Self.norm)': 128 bytes at offset \(size - 64) lie outside the file's \(size) bytes"
                ))
    }

    @Test("a part whose byte count disagrees with the shape and scheme")
    func byteCounts() throws {
        let a = try bundle()
        try editPart(a, Self.norm, part: 0, "bytes", 127)
        #expect(
            failure(a)
                == .invalidTensor(tensor: Self.norm, reason: "values holds 127 bytes, its shape and scheme need 128"))
        let b = try bundle()
        try editPart(b, Self.norm, part: 0, "bytes", -1)
        #expect(
            failure(b)
                == .invalidTensor(tensor: Self.norm, reason: "values holds -1 bytes, its shape and scheme need 128"))
    }

    @Test("a shape that lies, is empty, negative or overflows")
    func shapes() throws {
        let cases: [([Int], String)] = [
            ([65], "values holds 128 bytes, its shape and scheme need 130"),
            ([], "invalid shape []"),
            ([0], "invalid shape [0]"),
            ([-64], "invalid shape [-64]"),
            ([1 << 62, 4], "shape [\(1 << 62), 4] is too large"),
        ]
        for (shape, reason) in cases {
            let bundle = try bundle()
            try editTensor(bundle, Self.norm) { $0["shape"] = shape }
            #expect(failure(bundle) == .invalidTensor(tensor: Self.norm, reason: reason), "\(shape)")
        }
    }

    @Test("palette bits that lie")
    func bits() throws {
        let a = try bundle()
        try editTensor(a, Self.projection) { tensor in
            var compression = tensor["compression"] as? [String: Any] ?? [:]
            compression["bits"] = 5
            tensor["compression"] = compression
        }
        #expect(failure(a) == .invalidTensor(tensor: Self.projection, reason: "palette of 5 bits"))
        let b = try bundle()
        try editTensor(b, Self.projection) { tensor in
            var compression = tensor["compression"] as? [String: Any] ?? [:]
            compression["bits"] = 8
            tensor["compression"] = compression
        }
        #expect(
            failure(b)
                == .invalidTensor(tensor: Self.projection, reason: "lut holds 64 bytes, its shape and scheme need 1024")
        )
    }

    @Test("files whose size or CRC-32 the manifest misstates")
    func files() throws {
        let a = try bundle()
        try editManifest(a) { manifest in
            var files = manifest["files"] as? [[String: Any]] ?? []
            files[0]["bytes"] = 1
            manifest["files"] = files
        }
        #expect(
            failure(a, verifyFiles: true)
                == .fileMismatch(path: "config.json", reason: "size is 322 bytes, the manifest says 1"))
        let b = try bundle()
        var crc = ""
        try editManifest(b) { manifest in
            var files = manifest["files"] as? [[String: Any]] ?? []
            crc = files[0]["crc32"] as? String ?? ""
            files[0]["crc32"] = "00000000"
            manifest["files"] = files
        }
        #expect(
            failure(b, verifyFiles: true)
                == .fileMismatch(path: "config.json", reason: "CRC-32 is \(crc), the manifest says 00000000"))
        let c = try bundle()
        try editManifest(c) { manifest in
            var files = manifest["files"] as? [[String: Any]] ?? []
            files[0]["bytes"] = -5
            manifest["files"] = files
        }
        #expect(failure(c) == .fileMismatch(path: "config.json", reason: "the manifest gives a negative size -5"))
    }

    @Test("paths escaping the bundle, in the file list or in a tensor part")
    func escapingPaths() throws {
        for path in ["../x", "/etc/passwd", "a//b", "./weights.bin", ""] {
            let bundle = try bundle()
            try editManifest(bundle) { manifest in
                var files = manifest["files"] as? [[String: Any]] ?? []
                files.append(["path": path, "bytes": 0, "crc32": "00000000"])
                manifest["files"] = files
            }
            #expect(
                failure(bundle) == .fileMismatch(path: path, reason: "the manifest names a file outside the bundle"),
                "\(path)")
        }
        let bundle = try bundle()
        try editPart(bundle, Self.norm, part: 0, "file", "../../../etc/passwd")
        #expect(
            failure(bundle)
                == .fileMismatch(
                    path: "../../../etc/passwd", reason: "tensor '\(Self.norm)' names a file the manifest does not list"
                ))
    }

    @Test("a schema from the future, no schema, no manifest")
    func schemas() throws {
        let a = try bundle()
        try editManifest(a) { $0["schema"] = "exporter.manifest/9" }
        let path = a.appendingPathComponent("manifest.json").path
        #expect(
            failure(a) == .unsupportedSchema(path: path, found: "exporter.manifest/9", supported: "exporter.manifest/1")
        )
        let b = try bundle()
        try Data("{\"tensors\": []}".utf8).write(to: b.appendingPathComponent("manifest.json"))
        #expect(
            failure(b)
                == .notABundle(
                    path: b.appendingPathComponent("manifest.json").path, reason: "the manifest has no schema"))
        let c = try bundle()
        try FileManager.default.removeItem(at: c.appendingPathComponent("manifest.json"))
        #expect(failure(c) == .notABundle(path: c.path, reason: "no readable manifest.json"))
    }

    @Test("empty and oversized documents (the fuzzer's empty manifest leaked a buffer in Data(contentsOf:))")
    func documents() throws {
        let a = try bundle()
        let manifest = a.appendingPathComponent("manifest.json")
        try Data().write(to: manifest)
        try Data().write(to: a.appendingPathComponent("graph.json"))
        #expect(
            failure(a)
                == .notABundle(
                    path: manifest.path, reason: "the manifest is not valid JSON: unexpected end of data at byte 0"))
        let b = try bundle()
        let huge = b.appendingPathComponent("manifest.json")
        let handle = try FileHandle(forWritingTo: huge)
        try handle.truncate(atOffset: UInt64(BundleReader.largestDocumentBytes + 1))
        try handle.close()
        #expect(
            failure(b)
                == .notABundle(
                    path: huge.path,
                    reason: "\(BundleReader.largestDocumentBytes + 1) bytes is more than the limit of 268435456"))
    }

    @Test("a weights header disagreeing with the manifest and the file")
    func weightsHeader() throws {
        let a = try bundle()
        let url = a.appendingPathComponent("weights.bin")
        var bytes = [UInt8](try Data(contentsOf: url))
        let size = bytes.count
        bytes[16] = 99
        try Data(bytes).write(to: url)
        #expect(
            failure(a)
                == .fileMismatch(path: "weights.bin", reason: "the header counts 99 tensors, the manifest lists 26"))
        let b = try bundle()
        let weights = b.appendingPathComponent("weights.bin")
        var truncated = [UInt8](try Data(contentsOf: weights))
        truncated.removeLast(64)
        try Data(truncated).write(to: weights)
        #expect(
            failure(b)
                == .fileMismatch(
                    path: "weights.bin", reason: "the header says \(size) bytes, the file has \(size - 64)"))
        let d = try bundle()
        let versioned = d.appendingPathComponent("weights.bin")
        var newer = [UInt8](try Data(contentsOf: versioned))
        newer[8] = 2
        try Data(newer).write(to: versioned)
        #expect(
            failure(d)
                == .fileMismatch(path: "weights.bin", reason: "format version 2; this version reads 1"))
        let c = try bundle()
        try Data([UInt8](repeating: 0, count: 10)).write(to: c.appendingPathComponent("weights.bin"))
        #expect(
            failure(c)
                == .fileMismatch(path: "weights.bin", reason: "64 bytes at offset 0 lie outside the file's 10 bytes"))
    }
}
