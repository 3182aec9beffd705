import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("Manifest: decoding errors in plain words")
struct ManifestDecodingTests {
    /// The manifest of a freshly exported tiny bundle, as a JSON object, and its bytes.
    private static func exported() throws -> (object: [String: Any], data: Data) {
        let plan = try Fixtures.plan(try Fixtures.syntheticCheckpoint())
        let bundle = try ExportRunner.run(
            plan, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory())
        )
        .bundleURL
        let data = try Data(contentsOf: bundle.appendingPathComponent("manifest.json"))
        return (try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any]), data)
    }

    /// The reason decoding `object` (after `edit`) fails with.
    private func reason(_ edit: (inout [String: Any]) throws -> Void) throws -> String? {
        var (object, _) = try Self.exported()
        try edit(&object)
        return reason(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
    }

    private func reason(_ data: Data) -> String? {
        do {
            _ = try Manifest.decoded(from: data, path: "m.json")
            return nil
        } catch BundleError.notABundle(let path, let reason) {
            #expect(path == "m.json")
            return reason
        } catch {
            return "\(error)"
        }
    }

    /// `object["tensors"][index]` edited by `edit`.
    private func editTensor(_ object: inout [String: Any], _ index: Int, _ edit: (inout [String: Any]) -> Void) throws {
        var tensors = try #require(object["tensors"] as? [[String: Any]])
        edit(&tensors[index])
        object["tensors"] = tensors
    }

    @Test("a written manifest decodes exactly as JSONDecoder decodes it")
    func sameAsJSONDecoder() throws {
        let (_, data) = try Self.exported()
        #expect(try Manifest.decoded(from: data, path: "m.json") == JSONDecoder().decode(Manifest.self, from: data))
    }

    @Test("junk after the document, no schema, a schema of the wrong type, not an object")
    func documentErrors() throws {
        let (_, data) = try Self.exported()
        #expect(
            reason(data + Data("junk".utf8))
                == "the manifest is not valid JSON: unexpected data after the document at byte \(data.count)")
        #expect(reason(Data("{\"tensors\": []}".utf8)) == "the manifest has no schema")
        #expect(reason(Data("{\"schema\": 5}".utf8)) == "'schema' should be a string, found a number")
        #expect(reason(Data("[1, 2]".utf8)) == "the manifest is an array, not an object")
        #expect(reason(Data()) == "the manifest is not valid JSON: unexpected end of data at byte 0")
        #expect(
            throws: BundleError.unsupportedSchema(
                path: "m.json", found: "exporter.manifest/9", supported: "exporter.manifest/1")
        ) {
            try Manifest.decoded(from: Data(#"{"schema": "exporter.manifest/9"}"#.utf8), path: "m.json")
        }
    }

    @Test("a value that does not fit its key names the key path and what was found")
    func keyPaths() throws {
        #expect(
            try reason { object in
                try editTensor(&object, 0) { tensor in
                    var parts = tensor["parts"] as? [[String: Any]] ?? []
                    parts[0]["offset"] = 64.5
                    tensor["parts"] = parts
                }
            } == "'tensors[0].parts[0].offset' should be an integer, found 64.5")
        #expect(try reason { try editTensor(&$0, 2) { $0["name"] = nil } } == "'tensors[2].name' is missing")
        #expect(
            try reason { try editTensor(&$0, 2) { $0["shape"] = "x" } }
                == "'tensors[2].shape' should be an array, found a string")
        #expect(
            try reason { try editTensor(&$0, 1) { $0["shape"] = [-3.5, 2] } }
                == "'tensors[1].shape[0]' should be an integer, found -3.5")
        #expect(try reason { $0["context_length"] = NSNull() } == "'context_length' should be an integer, found null")
        #expect(try reason { $0["context_length"] = "512" } == "'context_length' should be an integer, found a string")
        #expect(
            try reason {
                try editTensor(&$0, 1) { tensor in
                    var compression = tensor["compression"] as? [String: Any] ?? [:]
                    compression["mode"] = "zip"
                    tensor["compression"] = compression
                }
            } == "'tensors[1].compression.mode' has an invalid value 'zip'")
        #expect(
            try reason { $0["parameters"] = 1e30 }
                == "'parameters' should be an integer from -9223372036854775808 to 9223372036854775807, found 1e+30")
        #expect(try reason { $0["tensors"] = ["a": 1] } == "'tensors' should be an array, found an object")
    }
}
