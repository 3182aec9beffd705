import Foundation
import TestSupport
import Testing

@testable import ExporterKit

/// One hostile or broken input and exactly what the user must see: the command line to run
/// against it, the exit status and standard error, byte for byte.
struct HostileCase: Sendable, CustomTestStringConvertible {
    /// What the input is, e.g. `safetensors: header length past the end`.
    let name: String
    /// Builds the input in a fresh scratch folder and returns what to run and expect.
    let build: @Sendable (_ scratch: URL) throws -> Expectation

    struct Expectation {
        var arguments: [String]
        var environment: [String: String] = [:]
        var status: Int32
        var error: String
    }

    var testDescription: String { name }
}

/// The corpus: every input is generated here, into temporary folders.
enum HostileCorpus {
    // MARK: Building blocks

    /// The usual export command of a checkpoint folder, writing into `scratch/out`.
    static func exportArguments(_ checkpoint: URL, scratch: URL, _ extra: [String] = []) -> [String] {
        [
            checkpoint.path, "--experimental", "--compute-precision", "float16", "--output-dir",
            scratch.appendingPathComponent("out").path,
        ] + extra
    }

    /// A tiny qwen2 checkpoint with some stored BF16 values of `tensor` replaced: element
    /// `index` (negative: from the end) gets bit pattern `pattern`.
    static func checkpointWithValues(_ tensor: String, _ values: [(index: Int, pattern: UInt16)]) throws -> URL {
        let directory = try Fixtures.syntheticCheckpoint()
        let url = directory.appendingPathComponent("model.safetensors")
        let range = try SafetensorsFile(url: url).tensor(named: tensor).byteRange
        var bytes = [UInt8](try Data(contentsOf: url))
        for (index, pattern) in values {
            let offset = index >= 0 ? range.lowerBound + 2 * index : range.upperBound + 2 * index
            (bytes[offset], bytes[offset + 1]) = (UInt8(pattern & 0xFF), UInt8(pattern >> 8))
        }
        try Data(bytes).write(to: url)
        return directory
    }

    /// A tiny qwen2 checkpoint whose `model.safetensors` is replaced by `bytes`.
    static func checkpointWithWeights(_ bytes: [UInt8]) throws -> (directory: URL, weights: String) {
        let directory = try Fixtures.syntheticCheckpoint()
        let weights = directory.appendingPathComponent("model.safetensors")
        try Data(bytes).write(to: weights)
        return (directory, weights.path)
    }

    /// A safetensors case: `model.safetensors` holds `bytes`; the expected message is built from its path.
    static func safetensors(
        _ name: String, _ bytes: @escaping @Sendable () -> [UInt8], status: Int32 = 65,
        error: @escaping @Sendable (_ path: String) -> String
    ) -> HostileCase {
        HostileCase(name: "safetensors: " + name) { scratch in
            let (directory, path) = try checkpointWithWeights(bytes())
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: status, error: error(path) + "\n")
        }
    }

    static func header(_ text: String, data: [UInt8] = [], declaredLength: UInt64? = nil) -> [UInt8] {
        SafetensorsFixture.bytes(header: text, data: data, declaredHeaderLength: declaredLength)
    }

    /// A tiny qwen2 checkpoint whose `config.json` holds `bytes`.
    static func config(
        _ name: String, _ bytes: @escaping @Sendable () -> [UInt8], status: Int32 = 65, extra: [String] = [],
        error: @escaping @Sendable (_ path: String) -> String
    ) -> HostileCase {
        HostileCase(name: "config: " + name) { scratch in
            let directory = try Fixtures.syntheticCheckpoint()
            let url = directory.appendingPathComponent("config.json")
            try Data(bytes()).write(to: url)
            return .init(
                arguments: exportArguments(directory, scratch: scratch, extra), status: status,
                error: error(url.path) + "\n")
        }
    }

    /// The tiny config with `overrides`, as JSON bytes.
    static func configBytes(_ overrides: [String: Any?], modelType: String = "qwen2") -> [UInt8] {
        let object = Fixtures.tinyConfig(modelType: modelType, overrides: overrides)
        return [UInt8]((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data())
    }

    /// A checkpoint exported with `--compression-config` holding `text`.
    static func compression(
        _ name: String, _ text: String, status: Int32 = 65, error: @escaping @Sendable (_ path: String) -> String
    ) -> HostileCase {
        HostileCase(name: "compression config: " + name) { scratch in
            let directory = try Fixtures.syntheticCheckpoint()
            let url = scratch.appendingPathComponent("compression.json")
            try Data(text.utf8).write(to: url)
            return .init(
                arguments: exportArguments(directory, scratch: scratch, ["--compression-config", url.path]),
                status: status, error: error(url.path) + "\n")
        }
    }

    /// A sharded checkpoint (several shards and an index) with the index replaced by `index`,
    /// after `prepare` ran on the folder.
    static func index(
        _ name: String, _ index: @escaping @Sendable (_ directory: URL) throws -> String, status: Int32 = 65,
        prepare: @escaping @Sendable (_ directory: URL, _ scratch: URL) throws -> Void = { _, _ in },
        error: @escaping @Sendable (_ directory: URL, _ indexPath: String) throws -> String
    ) -> HostileCase {
        HostileCase(name: "index: " + name) { scratch in
            let directory = try Fixtures.syntheticCheckpoint(shardBytes: 40_000)
            let url = directory.appendingPathComponent("model.safetensors.index.json")
            try prepare(directory, scratch)
            try Data(try index(directory).utf8).write(to: url)
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: status,
                error: try error(directory, url.path) + "\n")
        }
    }

    /// `path` as the exporter resolves it (`realpath`): on macOS, Foundation's
    /// `resolvingSymlinksInPath` drops the `/private` that `realpath` keeps (`/var` is a link
    /// to `/private/var` there), so the message would not match.
    static func realPath(_ path: String) -> String {
        resolvedRealPath(path) ?? path
    }

    static let f32Entry = #"{"dtype":"F32","shape":[2],"data_offsets":[0,8]}"#

    // MARK: The corpus

    static let cases: [HostileCase] = safetensorsCases + indexCases + configCases + compressionCases + otherCases

    static let safetensorsCases: [HostileCase] = [
        safetensors("shorter than the length prefix", { [1, 2, 3, 4, 5] }) {
            "Error: '\($0)' is 5 bytes, too short for a safetensors file"
        },
        safetensors("header length past the end of the file", { header("{}", declaredLength: 1000) }) {
            "Error: '\($0)': header length 1000 exceeds the 2 bytes after it"
        },
        safetensors("header length UInt64.max", { header("{}", declaredLength: UInt64.max) }) {
            "Error: '\($0)': header length 18446744073709551615 exceeds the 2 bytes after it"
        },
        safetensors("header not JSON", { header(#"{"w": "#) }) {
            "Error: '\($0)': header is not valid JSON: unexpected end of data at byte 6"
        },
        safetensors("header not an object", { header("[1, 2]") }) {
            "Error: '\($0)': invalid header: expected a JSON object, found an array"
        },
        safetensors("non-UTF-8 bytes in the header", { header("{\"w\u{1}\": 1}").map { $0 == 1 ? 0xFF : $0 } }) {
            "Error: '\($0)': header is not valid JSON: invalid UTF-8 in a string at byte 1"
        },
        safetensors(
            "duplicate tensor names",
            { header(#"{"w":\#(f32Entry),"w":\#(f32Entry)}"#, data: [UInt8](repeating: 0, count: 8)) }
        ) {
            "Error: '\($0)': header is not valid JSON: duplicate key \"w\" at byte 54"
        },
        safetensors("offsets past the data", { header(#"{"w":\#(f32Entry)}"#, data: [0, 0, 0, 0]) }) {
            "Error: '\($0)': tensor 'w': 'data_offsets' end 8 is past the 4-byte data section"
        },
        safetensors(
            "offsets reversed",
            {
                header(
                    #"{"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#, data: [UInt8](repeating: 0, count: 8))
            }
        ) { "Error: '\($0)': tensor 'w': 'data_offsets' begin 8 is after end 0" },
        safetensors(
            "negative offsets",
            {
                header(
                    #"{"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}}"#, data: [UInt8](repeating: 0, count: 8))
            }
        ) { "Error: '\($0)': tensor 'w': 'data_offsets' must be two non-negative integers" },
        safetensors(
            "overlapping data ranges",
            {
                header(
                    #"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
                    data: [UInt8](repeating: 0, count: 12))
            }
        ) { "Error: '\($0)': tensors 'a' and 'b' have overlapping data ranges" },
        safetensors(
            "a hole between unordered ranges",
            {
                header(
                    #"{"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
                    data: [UInt8](repeating: 0, count: 12))
            }
        ) { "Error: '\($0)': data bytes 4..<8 belong to no tensor" },
        safetensors(
            "trailing bytes no tensor claims", { header(#"{"w":\#(f32Entry)}"#, data: [UInt8](repeating: 0, count: 9)) }
        ) {
            "Error: '\($0)': data bytes 8..<9 belong to no tensor"
        },
        safetensors(
            "shape disagreeing with its byte range",
            {
                header(
                    #"{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#, data: [UInt8](repeating: 0, count: 8))
            }
        ) { "Error: '\($0)': tensor 'w': shape [3] of F32 needs 12 bytes but 'data_offsets' span 8" },
        safetensors(
            "shape product overflowing Int",
            {
                header(
                    #"{"w":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,8]}}"#,
                    data: [UInt8](repeating: 0, count: 8))
            }
        ) { "Error: '\($0)': tensor 'w': element count of shape [4294967296, 4294967296, 4] overflows" },
        safetensors(
            "byte size overflowing Int",
            {
                header(
                    #"{"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}}"#,
                    data: [UInt8](repeating: 0, count: 8))
            }
        ) { "Error: '\($0)': tensor 'w': 4611686018427387904 elements of F64 do not fill whole bytes or overflow" },
        safetensors(
            "negative dimension",
            {
                header(
                    #"{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}"#, data: [UInt8](repeating: 0, count: 8))
            }
        ) { "Error: '\($0)': tensor 'w': negative dimension -2 in shape [-2]" },
        safetensors(
            "unknown dtype",
            {
                header(
                    #"{"w":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}}"#, data: [UInt8](repeating: 0, count: 8))
            }
        ) { "Error: '\($0)': tensor 'w' has unknown dtype 'F17'" },
        safetensors(
            "a tensor name carrying a newline and a terminal escape",
            {
                header(
                    #"{"w\n\u001b[2J":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}}"#,
                    data: [UInt8](repeating: 0, count: 8))
            }
        ) { "Error: '\($0)': tensor 'w\\u{A}\\u{1B}[2J' has unknown dtype 'F17'" },
        safetensors(
            "an unexpected key in a tensor entry",
            {
                header(
                    #"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}}"#,
                    data: [UInt8](repeating: 0, count: 8))
            }
        ) { "Error: '\($0)': tensor 'w': unexpected key 'extra'" },
        safetensors("deeply nested header", { header(String(repeating: "[", count: 100_000)) }) {
            "Error: '\($0)': header is not valid JSON: nesting deeper than 128 levels at byte 128"
        },
        HostileCase(name: "safetensors: header absurdly large, refused before allocating") { scratch in
            // A sparse file large enough to hold the declared header: only the limit stops it.
            let directory = try Fixtures.syntheticCheckpoint()
            let url = directory.appendingPathComponent("model.safetensors")
            try Data(header("{}", declaredLength: 100_000_001)).write(to: url)
            let handle = try FileHandle(forWritingTo: url)
            try handle.truncate(atOffset: 100_000_100)
            try handle.close()
            return .init(
                arguments: exportArguments(directory, scratch: scratch),
                // Even a 64 MiB address space is enough to refuse it.
                status: 65,
                error: "Error: '\(url.path)': header length 100000001 exceeds the limit of 100000000 bytes\n")
        },
        HostileCase(name: "safetensors: a FIFO in place of the weights, refused without waiting for a writer") {
            scratch in
            let directory = try Fixtures.syntheticCheckpoint()
            let url = directory.appendingPathComponent("model.safetensors")
            try FIFOFixture.make(at: url)
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 74,
                error: "Error: cannot read '\(url.path)': a FIFO, not a regular file\n")
        },
        HostileCase(name: "config: a FIFO in place of config.json, refused as the weights' is") { scratch in
            let directory = try Fixtures.syntheticCheckpoint()
            let url = directory.appendingPathComponent("config.json")
            try FileManager.default.removeItem(at: url)
            try FIFOFixture.make(at: url)
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 74,
                error: "Error: cannot read '\(url.path)': a FIFO, not a regular file\n")
        },
        HostileCase(name: "config: a folder in place of config.json, an I/O failure as for any input (74)") { scratch in
            let directory = try Fixtures.syntheticCheckpoint()
            let url = directory.appendingPathComponent("config.json")
            try FileManager.default.removeItem(at: url)
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: false)
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 74,
                error: "Error: cannot read '\(url.path)': a folder, not a regular file\n")
        },
        HostileCase(name: "safetensors: a FIFO in place of a shard") { scratch in
            let directory = try Fixtures.syntheticCheckpoint(shardBytes: 40_000)
            let shards = try FileManager.default.contentsOfDirectory(atPath: directory.path)
                .filter { $0.hasSuffix(".safetensors") }.sorted()
            let url = directory.appendingPathComponent(shards[1])
            try FIFOFixture.make(at: url)
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 74,
                error: "Error: cannot read '\(url.path)': a FIFO, not a regular file\n")
        },
        HostileCase(name: "safetensors: the same tensor in two files") { scratch in
            let directory = try Fixtures.syntheticCheckpoint()
            let single = directory.appendingPathComponent("model.safetensors")
            let first = directory.appendingPathComponent("a.safetensors")
            try FileManager.default.moveItem(at: single, to: first)
            let second = directory.appendingPathComponent("b.safetensors")
            try FileManager.default.copyItem(at: first, to: second)
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 65,
                error:
                    "Error: tensor 'model.embed_tokens.weight' appears in both '\(first.path)' and '\(second.path)'\n")
        },
        HostileCase(name: "safetensors: NaN weights") { scratch in
            // BF16 0x7FC0: a quiet NaN.
            let directory = try checkpointWithValues(
                "model.layers.0.mlp.up_proj.weight", [(0, 0x7FC0), (1, 0x7FC0), (2, 0x7FC0)])
            let weights = directory.appendingPathComponent("model.safetensors").path
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 65,
                error: "Error: '\(weights)': tensor 'model.layers.0.mlp.up_proj.weight': 3 values are NaN or infinite\n"
            )
        },
        HostileCase(name: "safetensors: NaN in the int8 embedding") { scratch in
            // BF16 0x7F80 (+infinity), the last value: in the last block read.
            let directory = try checkpointWithValues("model.embed_tokens.weight", [(-1, 0x7F80)])
            let weights = directory.appendingPathComponent("model.safetensors").path
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 65,
                error: "Error: '\(weights)': tensor 'model.embed_tokens.weight': 1 value is NaN or infinite\n")
        },
        HostileCase(name: "safetensors: palettised weights beyond float16's range") { scratch in
            // BF16 0x4780 = 65,536 and 0xC7C0 = −98,304: finite, but beyond ±65,504.
            let directory = try checkpointWithValues("model.layers.0.mlp.down_proj.weight", [(0, 0x4780), (5, 0xC7C0)])
            let weights = directory.appendingPathComponent("model.safetensors").path
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 65,
                error: "Error: '\(weights)': tensor 'model.layers.0.mlp.down_proj.weight': 2 values exceed the float16 "
                    + "range of ±65504 (largest magnitude 98304); pass --allow-clamp to clamp them\n")
        },
        HostileCase(name: "safetensors: float32 int8 embedding beyond float16's range") { scratch in
            // Read as float16 patterns a block at a time, then, at the first value float16 cannot
            // hold, through the reader, which counts every such value of the tensor.
            let directory = try Fixtures.syntheticCheckpoint(dtype: .f32)
            try Fixtures.setValues(
                [(0, 70_000), (5, -1e6), (-1, 65_520)], of: "model.embed_tokens.weight", in: directory)
            let weights = directory.appendingPathComponent("model.safetensors").path
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 65,
                error: "Error: '\(weights)': tensor 'model.embed_tokens.weight': 3 values exceed the float16 range "
                    + "of ±65504 (largest magnitude 1000000); pass --allow-clamp to clamp them\n")
        },
        HostileCase(name: "safetensors: float32 NaN and infinity in a palettised weight") { scratch in
            let directory = try Fixtures.syntheticCheckpoint(dtype: .f32)
            try Fixtures.setValues(
                [(3, .nan), (-1, -.infinity)], of: "model.layers.1.mlp.up_proj.weight", in: directory)
            let weights = directory.appendingPathComponent("model.safetensors").path
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 65,
                error: "Error: '\(weights)': tensor 'model.layers.1.mlp.up_proj.weight': 2 values are NaN or infinite\n"
            )
        },
        HostileCase(name: "safetensors: float32 weights just beyond float16's range, in a shard") { scratch in
            // 65519 rounds to 65504 in float16 and 65520 to infinity: both are beyond ±65504, and
            // the message says by how much, naming the shard.
            let directory = try Fixtures.syntheticCheckpoint(shardBytes: 100_000, dtype: .f32)
            let index =
                try JSONSerialization.jsonObject(
                    with: Data(contentsOf: directory.appendingPathComponent("model.safetensors.index.json")))
                as? [String: Any]
            let shard = try #require(
                (index?["weight_map"] as? [String: String])?["model.layers.1.mlp.down_proj.weight"])
            let url = directory.appendingPathComponent(shard)
            let range = try SafetensorsFile(url: url).tensor(named: "model.layers.1.mlp.down_proj.weight").byteRange
            var bytes = [UInt8](try Data(contentsOf: url))
            for (offset, value) in [(0, Float(65_519)), (4, Float(-65_519))] {
                withUnsafeBytes(of: value.bitPattern.littleEndian) {
                    bytes.replaceSubrange(range.lowerBound + offset..<range.lowerBound + offset + 4, with: $0)
                }
            }
            try Data(bytes).write(to: url)
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 65,
                error:
                    "Error: '\(url.path)': tensor 'model.layers.1.mlp.down_proj.weight': 2 values exceed the float16 range "
                    + "of ±65504 (largest magnitude 65519); pass --allow-clamp to clamp them\n")
        },
        HostileCase(name: "safetensors: integer weights") { scratch in
            let directory = try Fixtures.syntheticCheckpoint()
            let url = directory.appendingPathComponent("model.safetensors")
            let file = try SafetensorsFile(url: url)
            var tensors: [SafetensorsFixture.Tensor] = []
            for name in file.tensorNames {
                let descriptor = try file.tensor(named: name)
                var bytes = [UInt8](repeating: 0, count: descriptor.byteRange.count)
                try bytes.withUnsafeMutableBytes { try file.readRawBytes(of: name, into: $0) }
                let dtype: TensorDType = name == "model.norm.weight" ? .i16 : descriptor.dtype
                tensors.append(SafetensorsFixture.Tensor(name, dtype, descriptor.shape, bytes: bytes))
            }
            try FileManager.default.removeItem(at: url)
            try SafetensorsFixture.writeFile(named: "model.safetensors", in: directory, tensors: tensors)
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 65,
                error: "Error: '\(url.path)': tensor 'model.norm.weight' is stored as I16; expected BF16, F16 or F32\n")
        },
    ]

    static let indexCases: [HostileCase] = [
        index(
            "a shard name climbing out with ../",
            { _ in #"{"weight_map":{"model.norm.weight":"../model.safetensors"}}"# }
        ) {
            _, path in
            "Error: '\(path)': shard '../model.safetensors' of tensor 'model.norm.weight' is not a file name inside the checkpoint folder"
        },
        index("an absolute shard path", { _ in #"{"weight_map":{"model.norm.weight":"/etc/passwd"}}"# }) { _, path in
            "Error: '\(path)': shard '/etc/passwd' of tensor 'model.norm.weight' is not a file name inside the checkpoint folder"
        },
        index(
            "a shard that is a symbolic link leading out",
            { _ in #"{"weight_map":{"model.norm.weight":"outside.safetensors"}}"# },
            prepare: { directory, scratch in
                let target = scratch.appendingPathComponent("elsewhere.safetensors")
                try Data(header("{}")).write(to: target)
                try FileManager.default.createSymbolicLink(
                    at: directory.appendingPathComponent("outside.safetensors"), withDestinationURL: target)
            }
        ) { directory, _ in
            let link = directory.appendingPathComponent("outside.safetensors").path
            return "Error: '\(link)' resolves to '\(realPath(link))', outside '\(realPath(directory.path))'"
        },
        index(
            "a missing shard", { _ in #"{"weight_map":{"model.norm.weight":"model-00009-of-00009.safetensors"}}"# },
            status: 66
        ) {
            _, path in
            "Error: '\(path)': shard 'model-00009-of-00009.safetensors' of tensor 'model.norm.weight' does not exist"
        },
        index(
            "one tensor of a shard mapped to a missing shard named after it",
            { directory in
                // The shard holding the tensor is read first: the missing one must still be named.
                let index = directory.appendingPathComponent("model.safetensors.index.json")
                var object = try #require(
                    try JSONSerialization.jsonObject(with: Data(contentsOf: index)) as? [String: Any])
                var map = try #require(object["weight_map"] as? [String: String])
                let shards = try FileManager.default.contentsOfDirectory(atPath: directory.path)
                    .filter { $0.hasSuffix(".safetensors") }.sorted()
                let tensor = try #require(
                    try SafetensorsFile(url: directory.appendingPathComponent(shards[1])).tensorNames.sorted().first)
                map[tensor] = "model-00099-of-00099.safetensors"
                object["weight_map"] = map
                return String(
                    decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
            }, status: 66
        ) { directory, path in
            let shards = try FileManager.default.contentsOfDirectory(atPath: directory.path)
                .filter { $0.hasSuffix(".safetensors") }.sorted()
            let tensor = try #require(
                try SafetensorsFile(url: directory.appendingPathComponent(shards[1])).tensorNames.sorted().first)
            return "Error: '\(path)': shard 'model-00099-of-00099.safetensors' of tensor '\(tensor)' does not exist"
        },
        index(
            "a tensor mapped to a shard without it",
            { directory in
                let shards = try FileManager.default.contentsOfDirectory(atPath: directory.path)
                    .filter { $0.hasSuffix(".safetensors") }.sorted()
                // Every tensor of the first shard, plus one that lives in the last shard.
                let first = try SafetensorsFile(url: directory.appendingPathComponent(shards[0]))
                var map = first.tensorNames.map { "\"\($0)\":\"\(shards[0])\"" }
                map.append("\"model.norm.weight\":\"\(shards[0])\"")
                return "{\"weight_map\":{\(map.joined(separator: ","))}}"
            }
        ) { directory, path in
            let shards = try FileManager.default.contentsOfDirectory(atPath: directory.path)
                .filter { $0.hasSuffix(".safetensors") }.sorted()
            return "Error: '\(path)': tensor 'model.norm.weight' is mapped to '\(shards[0])', which does not contain it"
        },
        index("not JSON", { _ in "{\"weight_map\": {" }) { _, path in
            "Error: '\(path)': invalid index: not valid JSON: expected a string key at byte 16"
        },
        index("an empty weight map", { _ in #"{"weight_map":{}}"# }) { _, path in
            "Error: '\(path)': invalid index: 'weight_map' is empty"
        },
        index("a shard name that is not a string", { _ in #"{"weight_map":{"model.norm.weight":7}}"# }) { _, path in
            "Error: '\(path)': invalid index: 'weight_map' value of tensor 'model.norm.weight' must be a string, found a number"
        },
    ]

    static let configCases: [HostileCase] = [
        config("not JSON", { Array("hidden_size = 64".utf8) }) {
            "Error: config '\($0)' is not valid JSON: unexpected character at byte 0"
        },
        config(
            "non-UTF-8 bytes",
            { Array(#"{"model_type": "qwen"#.utf8) + [0xFE] + Array(#"2", "hidden_size": 64}"#.utf8) }
        ) {
            "Error: config '\($0)' is not valid JSON: invalid UTF-8 in a string at byte 15"
        },
        config("a UTF-8 byte-order mark before the document", { [0xEF, 0xBB, 0xBF] + configBytes([:]) }) {
            "Error: config '\($0)' is not valid JSON: the text starts with a UTF-8 byte-order mark (EF BB BF, invisible "
                + "in most editors), which JSON does not allow at byte 0"
        },
        config(
            "a layer count beyond any integer type",
            {
                Array(
                    String(decoding: configBytes([:]), as: UTF8.self).replacingOccurrences(
                        of: #""num_hidden_layers":2"#, with: #""num_hidden_layers":99999999999999999999999"#
                    ).utf8)
            }
        ) {
            "Error: config '\($0)': 'num_hidden_layers' is absurdly large (99999999999999999999999 > 1073741824)"
        },
        config("a missing dimension", { configBytes(["hidden_size": nil]) }) {
            "Error: config '\($0)' has no 'hidden_size'"
        },
        config("a negative head count", { configBytes(["num_attention_heads": -4]) }) {
            "Error: config '\($0)': 'num_attention_heads' must be positive, found -4"
        },
        config("zero layers", { configBytes(["num_hidden_layers": 0]) }) {
            "Error: config '\($0)': 'num_hidden_layers' must be positive, found 0"
        },
        config("an absurd vocabulary", { configBytes(["vocab_size": 1 << 40]) }) {
            "Error: config '\($0)': 'vocab_size' is absurdly large (1099511627776 > 1073741824)"
        },
        config("a dimension that is not an integer", { configBytes(["hidden_size": 64.5]) }) {
            "Error: config '\($0)': 'hidden_size' must be an integer, found 64.5"
        },
        config("a dimension that is a string", { configBytes(["hidden_size": "64"]) }) {
            "Error: config '\($0)': 'hidden_size' should be an integer, found a string"
        },
        config(
            "heads not dividing the hidden size",
            { configBytes(["num_attention_heads": 5, "num_key_value_heads": 5, "head_dim": nil]) }
        ) {
            "Error: config '\($0)': 'num_attention_heads' (5) does not divide hidden_size (64) and there is no head_dim"
        },
        config("kv heads not dividing the heads", { configBytes(["num_key_value_heads": 3]) }) {
            "Error: config '\($0)': 'num_key_value_heads' (3) does not divide num_attention_heads (4)"
        },
        // Each dimension below the per-field limit, together beyond 64-bit arithmetic: these
        // trapped on an arithmetic overflow (or, for the layers, ran out of memory) before.
        config(
            "dimensions whose products overflow",
            {
                configBytes([
                    "hidden_size": 1 << 30, "intermediate_size": 1 << 30, "num_attention_heads": 1 << 30,
                    "num_key_value_heads": 1 << 30, "vocab_size": 1 << 30, "max_position_embeddings": 1 << 30,
                ])
            }
        ) { "Error: config '\($0)' describes an impossible model: more than 17592186044416 parameters" },
        config("a billion layers", { configBytes(["num_hidden_layers": 1 << 30]) }) {
            "Error: config '\($0)': 'num_hidden_layers' is absurdly large (1073741824 > 4096)"
        },
        config(
            "a KV cache beyond 64-bit sizes",
            {
                configBytes(["hidden_size": 4, "head_dim": 1 << 30, "max_position_embeddings": 1 << 30])
            }
        ) {
            "Error: config '\($0)' describes an impossible model: a KV cache of more than 1152921504606846976 bytes "
                + "at max_position_embeddings"
        },
        config(
            "attention scores beyond 64-bit sizes",
            {
                configBytes([
                    "hidden_size": 4, "num_attention_heads": 1 << 30, "num_key_value_heads": 1, "head_dim": 1,
                    "max_position_embeddings": 1 << 30,
                ])
            }
        ) {
            "Error: config '\($0)' describes an impossible model: attention scores of more than 1152921504606846976 bytes "
                + "at max_position_embeddings"
        },
        config(
            "a billion experts", { configBytes(["num_experts": 1 << 30], modelType: "qwen3_moe") },
            extra: ["--platform", "macOS"]
        ) {
            "Error: config '\($0)' describes an impossible model: more than 1048576 tensors"
        },
        config(
            "a negative expert width",
            {
                configBytes(["num_experts": 2, "moe_intermediate_size": -5], modelType: "qwen3_moe")
            }, extra: ["--platform", "macOS"]
        ) {
            "Error: config '\($0)': 'moe_intermediate_size' must be positive, found -5"
        },
        config("a negative rope_scaling factor", { configBytes(["rope_scaling": ["type": "linear", "factor": -2]]) }) {
            "Error: config '\($0)': 'rope_scaling.factor' must be a positive number, found -2"
        },
        config(
            "a rope_scaling factor that is a string",
            { configBytes(["rope_scaling": ["type": "linear", "factor": "2"]]) }
        ) {
            "Error: config '\($0)': 'rope_scaling.factor' should be a number, found a string"
        },
        config(
            "a rope_scaling that names no type",
            { configBytes(["rope_scaling": ["factor": 4, "original_max_position_embeddings": 32768]]) }
        ) {
            "Error: config '\($0)': 'rope_scaling' names no rope_type or type (its factor is 4), so which scaling it "
                + "means is unknown"
        },
        config("a linear rope_scaling without a factor", { configBytes(["rope_scaling": ["type": "linear"]]) }) {
            "Error: config '\($0)': 'rope_scaling.factor' is absent; linear scaling divides positions by it"
        },
        config(
            "every layer sliding from max_window_layers with a null window",
            { configBytes(["use_sliding_window": true, "max_window_layers": 0, "sliding_window": NSNull()]) }
        ) {
            "Error: config '\($0)': 'max_window_layers' is 0: 2 of 2 layers slide but sliding_window is null"
        },
        config("a rope_scaling that is a string", { configBytes(["rope_scaling": "linear"]) }) {
            "Error: config '\($0)': 'rope_scaling' should be an object, found a string"
        },
        config("an unknown torch_dtype", { configBytes(["torch_dtype": "int4"]) }) {
            "Error: config '\($0)': 'torch_dtype' is 'int4'; expected one of: bfloat16, float16, float32, auto"
        },
        config(
            "a model type carrying a terminal escape sequence", { configBytes(["model_type": "\u{1B}[2Jqwen"]) },
            status: 69
        ) { _ in
            "Error: Unknown model type '\\u{1B}[2Jqwen'. Available: \(ArchitectureRegistry.modelTypes.joined(separator: ", "))"
        },
        config(
            "a model type carrying a newline and a forged line", { configBytes(["model_type": "qwen\nError: fake"]) },
            status: 69
        ) { _ in
            "Error: Unknown model type 'qwen\\u{A}Error: fake'. Available: \(ArchitectureRegistry.modelTypes.joined(separator: ", "))"
        },
        config("an unknown model type", { configBytes(["model_type": "llama9"]) }, status: 69) { _ in
            "Error: Unknown model type 'llama9'. Available: \(ArchitectureRegistry.modelTypes.joined(separator: ", "))"
        },
        HostileCase(name: "config: qwen3 over qwen2 weights") { scratch in
            let directory = try Fixtures.syntheticCheckpoint(modelType: "qwen2")
            try Data(configBytes([:], modelType: "qwen3")).write(to: directory.appendingPathComponent("config.json"))
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 65,
                error: "Error: checkpoint '\(directory.path)' has no tensor 'model.layers.0.self_attn.q_norm.weight' "
                    + "(expected shape [16])\n")
        },
        HostileCase(name: "config: qwen2 over qwen3 weights") { scratch in
            let directory = try Fixtures.syntheticCheckpoint(modelType: "qwen3")
            try Data(configBytes([:], modelType: "qwen2")).write(to: directory.appendingPathComponent("config.json"))
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 65,
                error: "Error: checkpoint '\(directory.path)' has no tensor 'model.layers.0.self_attn.q_proj.bias' "
                    + "(expected shape [64])\n")
        },
    ]

    static let compressionCases: [HostileCase] = [
        compression(
            "palette bits outside the supported set",
            #"{"schema":"exporter.compression/1","name":"x","default":{"mode":"palettize","bits":5}}"#
        ) {
            "Error: compression config '\($0)': default: palettize 'bits' must be one of: 2, 3, 4, 6, 8"
        },
        compression(
            "16-bit linear", #"{"schema":"exporter.compression/1","name":"x","default":{"mode":"linear","bits":16}}"#
        ) {
            "Error: compression config '\($0)': default: linear 'bits' must be 8"
        },
        compression(
            "a zero group size",
            #"{"schema":"exporter.compression/1","name":"x","default":{"mode":"palettize","bits":4,"granularity":"per_grouped_channel","group_size":0}}"#
        ) {
            "Error: compression config '\($0)': default: 'group_size' must be an integer from 1 to 1048576 for per_grouped_channel"
        },
        compression(
            "a group size not dividing the channels, uneven groups refused",
            #"{"schema":"exporter.compression/1","name":"x","default":{"mode":"palettize","bits":4,"granularity":"per_grouped_channel","group_size":24,"uneven_groups":"refuse"}}"#
        ) { _ in
            "Error: tensor 'model.layers.0.self_attn.q_proj.weight': 64 output channels are not a multiple of group size 24 "
                + "and the rule refuses uneven groups"
        },
        compression("an unknown key", #"{"schema":"exporter.compression/1","name":"x","bitz":4}"#) {
            "Error: compression config '\($0)': unknown key 'bitz'"
        },
        compression("a schema from the future", #"{"schema":"exporter.compression/2","name":"x"}"#) {
            "Error: compression config '\($0)' has schema 'exporter.compression/2'; this version reads 'exporter.compression/1'"
        },
        compression("not JSON", "bits = 4") {
            "Error: compression config '\($0)': unexpected character at byte 0"
        },
        compression("YAML", "bits: 4") {
            "Error: compression config '\($0)': a YAML document, which this tool does not read; write the same rules "
                + "as an exporter.compression/1 JSON file (docs/FORMAT.md, \"Compression configs\"; the shipped ones: "
                + "'exporter list')"
        },
        HostileCase(name: "compression config: missing file") { scratch in
            let directory = try Fixtures.syntheticCheckpoint()
            let missing = scratch.appendingPathComponent("missing.json").path
            return .init(
                arguments: exportArguments(directory, scratch: scratch, ["--compression-config", missing]),
                status: 66, error: "Error: cannot read compression config '\(missing)'\n")
        },
    ]

    /// A checkpoint whose `file` is a symbolic link to what `target` makes (given the checkpoint
    /// folder and the scratch folder), outside the checkpoint: refused as a weight file would be.
    static func linkLeadingOut(
        _ name: String, file: String, target: @escaping @Sendable (URL, URL) throws -> URL
    ) -> HostileCase {
        HostileCase(name: name) { scratch in
            let directory = try Fixtures.syntheticCheckpoint()
            let destination = try target(directory, scratch)
            let link = directory.appendingPathComponent(file)
            try FileManager.default.createSymbolicLink(at: link, withDestinationURL: destination)
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: 65,
                error:
                    "Error: '\(link.path)' resolves to '\(realPath(destination.path))', outside "
                    + "'\(realPath(directory.path))'\n")
        }
    }

    /// A checkpoint whose `file` is replaced by a symbolic link to `destination` (relative to the
    /// folder): a loop is there but cannot be read (74), a link to nothing is not there (66).
    static func brokenLink(_ name: String, file: String, to destination: String, status: Int32, reason: String)
        -> HostileCase
    {
        HostileCase(name: name) { scratch in
            let directory = try Fixtures.syntheticCheckpoint()
            let link = directory.appendingPathComponent(file)
            try FileManager.default.removeItem(at: link)
            try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: destination)
            return .init(
                arguments: exportArguments(directory, scratch: scratch), status: status,
                error: "Error: \(status == 74 ? "cannot read" : "cannot open") '\(link.path)': \(reason)\n")
        }
    }

    static let otherCases: [HostileCase] = [
        brokenLink(
            "files: weights that are a link loop", file: "model.safetensors", to: "model.safetensors", status: 74,
            reason: "too many levels of symbolic links"),
        brokenLink(
            "files: a tokenizer file that is a link loop", file: "tokenizer.json", to: "tokenizer.json", status: 74,
            reason: "too many levels of symbolic links"),
        brokenLink(
            "files: a tokenizer file that is a link to nothing (a download cut short)", file: "tokenizer.json",
            to: "../blobs/absent", status: 66, reason: "a symbolic link to a file that is not there"),
        linkLeadingOut(
            "files: a tokenizer file that is a symbolic link leading out of the checkpoint", file: "merges.txt"
        ) {
            _, scratch in
            // Its bytes would ship in the artifact: a cloned repository could plant any file of the machine.
            let secret = scratch.appendingPathComponent("secret.txt")
            try Data("SECRET".utf8).write(to: secret)
            return secret
        },
        linkLeadingOut(
            "files: a config.json that is a symbolic link leading out of the checkpoint", file: "config.json"
        ) {
            directory, scratch in
            let moved = scratch.appendingPathComponent("config.json")
            try FileManager.default.moveItem(at: directory.appendingPathComponent("config.json"), to: moved)
            return moved
        },
        HostileCase(name: "usage: an unknown option") { scratch in
            let directory = try Fixtures.syntheticCheckpoint()
            return .init(
                arguments: exportArguments(directory, scratch: scratch, ["--bogus"]), status: 64,
                error:
                    "Error: unknown option '--bogus'\nUsage: exporter [<model>] [<options>]\n  See 'exporter --help' for more information.\n"
            )
        },
        HostileCase(name: "resources: not enough memory") { scratch in
            let directory = try Fixtures.syntheticCheckpoint()
            // The fixture stores every tensor as bfloat16, as the export finds.
            var conditions = ConversionMemoryConditions()
            conditions.storedPatterns = { _ in .bfloat16 }
            let needed = try Fixtures.plan(directory).conversionMemory(conditions)
            let message = ResourceError.notEnoughMemory(
                model: "Tiny", neededBytes: needed.totalBytes, availableBytes: 50_000_000, peakTensor: needed.peakTensor
            )
            return .init(
                arguments: exportArguments(directory, scratch: scratch),
                environment: ["EXPORTER_TEST_AVAILABLE_MEMORY": "50000000"], status: 71, error: "Error: \(message)\n")
        },
        HostileCase(name: "resources: not enough disk") { scratch in
            let directory = try Fixtures.syntheticCheckpoint()
            let copied = try ["tokenizer.json", "config.json"].map {
                try FileManager.default.attributesOfItem(
                    atPath: directory.appendingPathComponent($0).path)[.size] as? Int ?? 0
            }
            let needed = try Fixtures.plan(directory).estimatedBundleBytes(copiedFileBytes: copied.reduce(0, +))
            let message = ResourceError.notEnoughDisk(
                directory: scratch.appendingPathComponent("out").path, neededBytes: needed, availableBytes: 4096)
            return .init(
                arguments: exportArguments(directory, scratch: scratch),
                environment: ["EXPORTER_TEST_AVAILABLE_DISK": "4096"], status: 71, error: "Error: \(message)\n")
        },
    ]
}
