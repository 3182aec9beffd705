import Foundation
import TestSupport
import Testing

@testable import ExporterKit

/// Every tensor of `weights` as float32, by name.
func allValues(_ weights: CheckpointWeights) throws -> [String: [Float]] {
    var values: [String: [Float]] = [:]
    for name in weights.tensorNames {
        var buffer = [Float](repeating: .nan, count: try weights.tensor(named: name).elementCount)
        try buffer.withUnsafeMutableBufferPointer { try weights.readFloat(name, into: $0) }
        values[name] = buffer
    }
    return values
}

@Suite("Checkpoint folders: single file, index and shards")
struct CheckpointWeightsTests {
    @Test("reference-written single file and shards read identically")
    func shardedEqualsSingle() throws {
        let single = try CheckpointWeights(directory: checkpointFixtures.appendingPathComponent("single"))
        let sharded = try CheckpointWeights(directory: checkpointFixtures.appendingPathComponent("sharded"))
        let names = ["model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight", "model.norm.weight"]
        #expect(single.tensorNames == names)
        #expect(sharded.tensorNames == names)
        #expect(single.indexURL == nil)
        #expect(sharded.indexURL?.lastPathComponent == "model.safetensors.index.json")
        #expect(sharded.declaredTotalSize == 42)
        #expect(
            sharded.files.map { $0.url.lastPathComponent }
                == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"])
        #expect(sharded.fileSizes["model-00001-of-00002.safetensors"] == 152)
        #expect(sharded.fileMetadata["model-00002-of-00002.safetensors"] == ["format": "pt"])
        let values = try allValues(single)
        #expect(try allValues(sharded) == values)
        #expect(values["model.embed_tokens.weight"] == (0..<12).map { 0.5 * Float($0) - 2 })
        #expect(values["model.layers.0.mlp.down_proj.weight"] == [1, -1, 0.25, -0.25, 8, -8])
        #expect(values["model.norm.weight"] == [1, 1.0078125, 0.9921875])
        for name in names {
            let a = try single.tensor(named: name)
            let b = try sharded.tensor(named: name)
            #expect(a.dtype == b.dtype && a.shape == b.shape && a.byteRange.count == b.byteRange.count)
        }
    }

    @Test("several safetensors files without an index are merged; a name in two files is an error")
    func mergedWithoutIndex() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try SafetensorsFixture.writeFile(named: "b.safetensors", in: directory, tensors: [.f32("y", [1], [2])])
        try SafetensorsFixture.writeFile(named: "a.safetensors", in: directory, tensors: [.f32("x", [2], [1, 3])])
        let weights = try CheckpointWeights(directory: directory)
        #expect(weights.tensorNames == ["x", "y"])
        #expect(try allValues(weights) == ["x": [1, 3], "y": [2]])
        #expect(try weights.file(holding: "y").url.lastPathComponent == "b.safetensors")

        let third = try SafetensorsFixture.writeFile(
            named: "c.safetensors", in: directory, tensors: [.f32("x", [1], [5])])
        #expect(
            throws: CheckpointError.duplicateTensor(
                tensor: "x", firstPath: directory.appendingPathComponent("a.safetensors").path, secondPath: third.path)
        ) { _ = try CheckpointWeights(directory: directory) }
        #expect(
            CheckpointError.duplicateTensor(tensor: "x", firstPath: "a", secondPath: "b").description
                == "tensor 'x' appears in both 'a' and 'b'")
    }

    @Test("two weight files with one name in two Unicode forms are refused, named by their scalars, never merged")
    func equivalentFileNames() throws {
        // é composed (U+00E9) and decomposed (e, U+0301): two files to Linux, one string to Swift.
        let composed = "\u{E9}.safetensors"
        let decomposed = "e\u{301}.safetensors"
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try SafetensorsFixture.writeFile(named: composed, in: directory, tensors: [.f32("x", [1], [1])])
        try SafetensorsFixture.writeFile(named: decomposed, in: directory, tensors: [.f32("y", [1], [2])])
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).count == 2)
        let reason =
            #"the weight files 'e\u{301}.safetensors' and '\u{E9}.safetensors' have one name in two Unicode forms, "#
            + "which this tool (and a Mac's file system) takes as one file; rename one"
        #expect(
            throws: CheckpointError.equivalentFileNames(directory: directory.path, first: decomposed, second: composed)
        ) { _ = try CheckpointWeights(directory: directory) }
        // The error's strings are equal to Swift in either order: its text tells which is which.
        do {
            _ = try CheckpointWeights(directory: directory)
            Issue.record("two forms of one name were read")
        } catch {
            #expect("\(error)" == "'\(directory.path)': " + reason)
        }
        #expect(
            CheckpointError.equivalentFileNames(directory: "/d", first: decomposed, second: composed).description
                == "'/d': " + reason)
        // A control character in a name is shown as a scalar too, never written as it is.
        #expect(
            CheckpointError.equivalentFileNames(directory: "/d", first: "\u{1B}e\u{301}", second: "\u{1B}\u{E9}")
                .description.hasPrefix(#"'/d': the weight files '\u{1B}e\u{301}' and '\u{1B}\u{E9}' have one name"#))
        #expect(CheckpointError.equivalentFileNames(directory: "/d", first: "a", second: "b").exitStatus == .badInput)
        // An index mapping tensors to both: refused as an invalid index, not read as one shard.
        let index = directory.appendingPathComponent("model.safetensors.index.json")
        try Data(#"{"weight_map": {"x": "\#(composed)", "y": "\#(decomposed)"}}"#.utf8).write(to: index)
        #expect(throws: CheckpointError.invalidIndex(path: index.path, reason: reason)) {
            _ = try CheckpointWeights(directory: directory)
        }
    }

    @Test("a hidden *.safetensors file (a writer's temporary) is no weight file of the folder")
    func hiddenWeightFiles() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try SafetensorsFixture.writeFile(named: "weights.safetensors", in: directory, tensors: [.f32("x", [1], [1])])
        try SafetensorsFixture.writeFile(named: ".partial.safetensors", in: directory, tensors: [.f32("y", [1], [2])])
        #expect(try CheckpointWeights(directory: directory).tensorNames == ["x"])
    }

    @Test("a folder without weights")
    func noWeights() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        #expect(throws: CheckpointError.noWeights(directory: directory.path)) {
            _ = try CheckpointWeights(directory: directory)
        }
        #expect(
            CheckpointError.noWeights(directory: "d").description
                == "no model.safetensors, model.safetensors.index.json or other *.safetensors file in 'd'")
        let single = checkpointFixtures.appendingPathComponent("single")
        #expect(throws: CheckpointError.tensorNotFound(path: single.path, tensor: "t")) {
            _ = try CheckpointWeights(directory: single).tensor(named: "t")
        }
    }

    /// A sharded checkpoint of tensors a, b (shard 1) and c (shard 2), with `index` as the index text.
    func shardedFolder(index: String) throws -> URL {
        let directory = try Fixtures.temporaryDirectory()
        try SafetensorsFixture.writeFile(
            named: "model-00001-of-00002.safetensors", in: directory,
            tensors: [.bf16("a", [2], [1, 2]), .bf16("b", [1], [3])])
        try SafetensorsFixture.writeFile(
            named: "model-00002-of-00002.safetensors", in: directory, tensors: [.bf16("c", [1], [4])])
        try Data(index.utf8).write(to: directory.appendingPathComponent("model.safetensors.index.json"))
        return directory
    }

    let one = "model-00001-of-00002.safetensors"
    let two = "model-00002-of-00002.safetensors"

    func expectIndexError(_ weightMap: String, metadata: String = "", _ expected: (String) -> CheckpointError) throws {
        let directory = try shardedFolder(index: "{\(metadata)\"weight_map\": {\(weightMap)}}")
        defer { try? FileManager.default.removeItem(at: directory) }
        let indexPath = directory.appendingPathComponent("model.safetensors.index.json").path
        #expect(throws: expected(indexPath)) { _ = try CheckpointWeights(directory: directory) }
    }

    @Test("index and shards must agree")
    func indexAgreement() throws {
        let good = #""a": "\#(one)", "b": "\#(one)", "c": "\#(two)""#
        let directory = try shardedFolder(index: "{\"weight_map\": {\(good)}}")
        defer { try? FileManager.default.removeItem(at: directory) }
        #expect(try allValues(CheckpointWeights(directory: directory)) == ["a": [1, 2], "b": [3], "c": [4]])

        try expectIndexError(#""a": "\#(one)", "c": "\#(two)""#) {
            .tensorNotInIndex(indexPath: $0, tensor: "b", shard: one)
        }
        try expectIndexError(#""a": "\#(one)", "b": "\#(one)", "c": "\#(two)", "d": "\#(two)""#) {
            .tensorMissingFromShard(indexPath: $0, tensor: "d", shard: two)
        }
        try expectIndexError(#""a": "\#(one)", "b": "\#(two)", "c": "\#(two)""#) {
            .tensorNotInIndex(indexPath: $0, tensor: "b", shard: one)
        }
        try expectIndexError(#""a": "\#(one)", "b": "\#(one)", "c": "model-00003-of-00003.safetensors""#) {
            .missingShard(indexPath: $0, shard: "model-00003-of-00003.safetensors", tensor: "c")
        }
        #expect(
            CheckpointError.tensorNotInIndex(indexPath: "i", tensor: "b", shard: "s").description
                == "'i': tensor 'b' in 's' is not mapped to that shard")
        #expect(
            CheckpointError.tensorMissingFromShard(indexPath: "i", tensor: "d", shard: "s").description
                == "'i': tensor 'd' is mapped to 's', which does not contain it")
        #expect(
            CheckpointError.missingShard(indexPath: "i", shard: "s", tensor: "c").description
                == "'i': shard 's' of tensor 'c' does not exist")
    }

    @Test("shard names that could leave the folder are refused before any file is opened")
    func unsafeShardNames() throws {
        for shard in ["../model-00002-of-00002.safetensors", "/etc/passwd", "sub/../../x.safetensors", "", "./x"] {
            try expectIndexError(#""a": "\#(one)", "b": "\#(one)", "c": "\#(shard)""#) {
                .unsafeShardName(indexPath: $0, shard: shard, tensor: "c")
            }
        }
        #expect(
            CheckpointError.unsafeShardName(indexPath: "i", shard: "../x", tensor: "c").description
                == "'i': shard '../x' of tensor 'c' is not a file name inside the checkpoint folder")
    }

    @Test("malformed index files")
    func malformedIndex() throws {
        func expectIndex(_ text: String, _ reason: String) throws {
            let directory = try shardedFolder(index: text)
            defer { try? FileManager.default.removeItem(at: directory) }
            let indexPath = directory.appendingPathComponent("model.safetensors.index.json").path
            #expect(throws: CheckpointError.invalidIndex(path: indexPath, reason: reason)) {
                _ = try CheckpointWeights(directory: directory)
            }
        }
        try expectIndex("{", "not valid JSON: expected a string key at byte 1")
        try expectIndex("[]", "expected a JSON object, found an array")
        try expectIndex("{}", "missing 'weight_map'")
        try expectIndex(#"{"weight_map": {}}"#, "'weight_map' is empty")
        try expectIndex(#"{"weight_map": []}"#, "'weight_map' must be an object, found an array")
        try expectIndex(
            #"{"weight_map": {"a": 1}}"#, "'weight_map' value of tensor 'a' must be a string, found a number")
        try expectIndex(
            #"{"metadata": {"total_size": "big"}, "weight_map": {}}"#,
            "'metadata.total_size' must be a non-negative integer")
        try expectIndex(#"{"weight_map": {"a": "x", "a": "y"}}"#, #"not valid JSON: duplicate key "a" at byte 26"#)
        #expect(
            CheckpointError.invalidIndex(path: "i", reason: "missing 'weight_map'").description
                == "'i': invalid index: missing 'weight_map'")
    }

    @Test("a weight file linking outside the checkpoint folder is refused; inside is fine")
    func symlinks() throws {
        let outside = try Fixtures.temporaryDirectory()
        let directory = try Fixtures.temporaryDirectory()
        defer {
            try? FileManager.default.removeItem(at: outside)
            try? FileManager.default.removeItem(at: directory)
        }
        let target = try SafetensorsFixture.writeFile(
            named: "elsewhere.safetensors", in: outside, tensors: [.f32("x", [1], [1])])
        let link = directory.appendingPathComponent("model.safetensors")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: target)
        let resolvedTarget = try #require(resolvedRealPath(target.path))
        let resolvedRoot = try #require(resolvedRealPath(directory.path))
        #expect(
            throws: CheckpointError.fileOutsideCheckpoint(
                path: link.path, resolvedPath: resolvedTarget, root: resolvedRoot)
        ) { _ = try CheckpointWeights(directory: directory) }

        // The same link is fine when the containment root covers both folders.
        let common = outside.deletingLastPathComponent()
        #expect(try CheckpointWeights(directory: directory, containmentRoot: common).tensorNames == ["x"])

        // A link that stays inside the folder is fine.
        try FileManager.default.removeItem(at: link)
        try FileManager.default.createDirectory(
            at: directory.appendingPathComponent("blobs"), withIntermediateDirectories: true)
        let blob = try SafetensorsFixture.writeFile(
            named: "abc123", in: directory.appendingPathComponent("blobs"), tensors: [.f32("y", [1], [2])])
        try FileManager.default.createSymbolicLink(
            atPath: link.path, withDestinationPath: "blobs/\(blob.lastPathComponent)")
        #expect(try CheckpointWeights(directory: directory).tensorNames == ["y"])
        #expect(
            CheckpointError.fileOutsideCheckpoint(path: "p", resolvedPath: "/r", root: "/c").description
                == "'p' resolves to '/r', outside '/c'")
    }

    @Test("a shard that is a dangling link is a missing shard")
    func danglingShard() throws {
        let index = #"{"weight_map": {"a": "\#(one)", "b": "\#(one)", "c": "\#(two)"}}"#
        let directory = try shardedFolder(index: index)
        defer { try? FileManager.default.removeItem(at: directory) }
        let shard = directory.appendingPathComponent(two)
        try FileManager.default.removeItem(at: shard)
        try FileManager.default.createSymbolicLink(atPath: shard.path, withDestinationPath: "blobs/gone")
        #expect(
            throws: CheckpointError.missingShard(
                indexPath: directory.appendingPathComponent("model.safetensors.index.json").path, shard: two,
                tensor: "c")
        ) { _ = try CheckpointWeights(directory: directory) }
    }

    @Test("a weight index linking outside the checkpoint folder is refused as a weight file is, before it is read")
    func indexLinkingOut() throws {
        let index = #"{"weight_map": {"a": "\#(one)", "b": "\#(one)", "c": "\#(two)"}}"#
        let directory = try shardedFolder(index: index)
        let outside = try Fixtures.temporaryDirectory()
        defer {
            try? FileManager.default.removeItem(at: directory)
            try? FileManager.default.removeItem(at: outside)
        }
        let link = directory.appendingPathComponent("model.safetensors.index.json")
        let moved = outside.appendingPathComponent("model.safetensors.index.json")
        try FileManager.default.moveItem(at: link, to: moved)
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: moved)
        #expect(
            throws: CheckpointError.fileOutsideCheckpoint(
                path: link.path, resolvedPath: try #require(resolvedRealPath(moved.path)),
                root: try #require(resolvedRealPath(directory.path)))
        ) { _ = try CheckpointWeights(directory: directory) }
    }

    @Test("a blobs/ moved behind a link is allowed in a Hugging Face cache repository only, not in a checkpoint folder")
    func movedBlobsOutsideCache() throws {
        let outside = try Fixtures.temporaryDirectory()
        let directory = try Fixtures.temporaryDirectory()
        defer {
            try? FileManager.default.removeItem(at: outside)
            try? FileManager.default.removeItem(at: directory)
        }
        // Named as a cache's blob is: only the folder not being a cache repository's refuses it.
        let name = String(repeating: "ab", count: 32)
        let blob = try SafetensorsFixture.writeFile(named: name, in: outside, tensors: [.f32("y", [1], [2])])
        try FileManager.default.createSymbolicLink(
            at: directory.appendingPathComponent("blobs"), withDestinationURL: outside)
        let link = directory.appendingPathComponent("model.safetensors")
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: "blobs/\(name)")
        #expect(
            throws: CheckpointError.fileOutsideCheckpoint(
                path: link.path, resolvedPath: try #require(resolvedRealPath(blob.path)),
                root: try #require(resolvedRealPath(directory.path)))
        ) { _ = try CheckpointWeights(directory: directory) }
    }

    @Test("checkContained leaves a file that is not there to its reader, and refuses a link to nothing")
    func containedMissingFile() throws {
        let directory = try Fixtures.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try CheckpointWeights.checkContained(
            directory.appendingPathComponent("tokenizer.json"), checkpoint: directory)
        let link = directory.appendingPathComponent("config.json")
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: "gone")
        #expect(
            throws: CheckpointError.cannotOpen(path: link.path, reason: "a symbolic link to a file that is not there")
        ) {
            try CheckpointWeights.checkContained(link, checkpoint: directory)
        }
    }

    @Test("a tensor stored transposed (the same element count in another shape) is refused, naming both shapes")
    func transposedTensor() throws {
        let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig())
        let config = try ModelConfig(contentsOf: directory.appendingPathComponent("config.json"))
        let specs = try ArchitectureRegistry.tensors(for: config, configPath: "config.json")
        let name = "model.layers.0.mlp.gate_proj.weight"
        try SyntheticCheckpoint.write(
            tensors: specs.map { ($0.name, $0.name == name ? Array($0.shape.reversed()) : $0.shape) }, dtype: .bf16,
            seed: 1, to: directory, shardBytes: 1 << 40)
        let weights = try CheckpointWeights(directory: directory)
        do {
            _ = try CheckpointValidator.validate(weights, against: specs, config: config)
            Issue.record("a transposed tensor was accepted")
        } catch {
            #expect(
                "\(error)"
                    == "'\(directory.path)/model.safetensors': tensor '\(name)' has shape [64, 128], the config implies "
                    + "[128, 64]")
        }
    }

    @Test("an untied head that is missing: the refusal says whether the config sets tie_word_embeddings or is silent")
    func missingHead() throws {
        for given in [true, false] {
            let directory = try Fixtures.checkpointDirectory(
                config: Fixtures.tinyConfig(overrides: ["tie_word_embeddings": given ? false : nil]))
            let config = try ModelConfig(contentsOf: directory.appendingPathComponent("config.json"))
            let specs = try ArchitectureRegistry.tensors(for: config, configPath: "config.json")
            #expect(specs.last?.name == "lm_head.weight")
            try SyntheticCheckpoint.write(
                tensors: specs.dropLast().map { ($0.name, $0.shape) }, dtype: .bf16, seed: 1, to: directory,
                shardBytes: 1 << 40)
            #expect(
                throws: CheckpointMismatch.missingHead(checkpoint: directory.path, keyGiven: given)
            ) {
                try CheckpointValidator.validate(
                    CheckpointWeights(directory: directory), against: specs, config: config)
            }
        }
        #expect(
            CheckpointMismatch.missingHead(checkpoint: "c", keyGiven: false).description
                == "checkpoint 'c' has no 'lm_head.weight' and its config does not set tie_word_embeddings, which is "
                + "false when absent: set it to true if the head shares the embedding's weights")
        #expect(
            CheckpointMismatch.missingHead(checkpoint: "c", keyGiven: true).description
                == "checkpoint 'c' has no 'lm_head.weight' and its config sets tie_word_embeddings to false")
    }

    @Test("a head saved beside a tied config is named: the bundle's head is the embedding")
    func headBesideTiedConfig() throws {
        let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig())
        let config = try ModelConfig(contentsOf: directory.appendingPathComponent("config.json"))
        #expect(config.tieWordEmbeddings)
        let specs = try ArchitectureRegistry.tensors(for: config, configPath: "config.json")
        try SyntheticCheckpoint.write(
            tensors: specs.map { ($0.name, $0.shape) } + [("lm_head.weight", [256, 64]), ("extra", [2])], dtype: .bf16,
            seed: 1, to: directory, shardBytes: 1 << 40)
        let warnings = try CheckpointValidator.validate(
            CheckpointWeights(directory: directory), against: specs, config: config)
        #expect(
            warnings == [
                "checkpoint has 'lm_head.weight', but its config ties the head to the embedding (tie_word_embeddings "
                    + "true): the bundle's head is 'model.embed_tokens.weight' and 'lm_head.weight' is not exported; if "
                    + "it was trained apart from the embedding, set tie_word_embeddings to false",
                "checkpoint has 1 tensor(s) the architecture does not use, not exported: extra",
            ])
    }

    @Test("tensors the architecture does not use are one warning: the first eight by name, and how many more")
    func unusedTensors() throws {
        let directory = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig())
        let config = try ModelConfig(contentsOf: directory.appendingPathComponent("config.json"))
        let specs = try ArchitectureRegistry.tensors(for: config, configPath: "config.json")
        let extras = (0..<9).map { ("extra.\($0)", [2]) }
        try SyntheticCheckpoint.write(
            tensors: specs.map { ($0.name, $0.shape) } + extras, dtype: .bf16, seed: 1, to: directory,
            shardBytes: 1 << 40)
        let warnings = try CheckpointValidator.validate(
            CheckpointWeights(directory: directory), against: specs, config: config)
        #expect(
            warnings == [
                "checkpoint has 9 tensor(s) the architecture does not use, not exported: "
                    + (0..<8).map { "extra.\($0)" }.joined(separator: ", ") + " and 1 more"
            ])
    }

    @Test("files without an index are read in name order, whatever order the folder lists them in")
    func nameOrder() throws {
        let directory = try Fixtures.temporaryDirectory()
        let names = ["e", "d", "c", "b", "a"]
        for (index, name) in names.enumerated() {
            try SafetensorsFixture.writeFile(
                named: "\(name).safetensors", in: directory, tensors: [.f32("t\(name)", [1], [Float(index)])])
        }
        let weights = try CheckpointWeights(directory: directory)
        #expect(weights.files.map(\.url.lastPathComponent) == names.reversed().map { "\($0).safetensors" })
        // A name in two files: the first by name is the earlier one.
        let last = try SafetensorsFixture.writeFile(
            named: "f.safetensors", in: directory, tensors: [.f32("ta", [1], [9])])
        #expect(
            throws: CheckpointError.duplicateTensor(
                tensor: "ta", firstPath: directory.appendingPathComponent("a.safetensors").path, secondPath: last.path)
        ) { _ = try CheckpointWeights(directory: directory) }
    }
}
