import Dispatch
import Foundation

/// Writes whole synthetic checkpoints: `model.safetensors`, or shards
/// `model-00001-of-0000N.safetensors` plus `model.safetensors.index.json` when the tensors
/// exceed the shard size — the layout `transformers` writes, so our reader, and any other,
/// sees an ordinary checkpoint.
public enum SyntheticCheckpoint {
    /// What was written.
    public struct Result: Equatable, Sendable {
        /// The weight files, in order.
        public let files: [URL]
        /// The index, when the checkpoint is sharded.
        public let indexURL: URL?
        /// The sum of the tensors' data sizes (the index's `metadata.total_size`).
        public let totalTensorBytes: Int
    }

    /// Elements generated per step: 16 MiB of float32 at most, shared among the cores.
    static let chunkElements = 4 << 20

    /// Writes `tensors` with values from `SyntheticWeights(seed:)` into `directory`.
    ///
    /// Tensors are laid out by ascending name; a new shard starts whenever the next tensor
    /// would take the current one past `shardBytes` (a tensor larger than `shardBytes` gets a
    /// shard of its own). Generation uses every core; the bytes do not depend on it.
    /// - Parameters:
    ///   - dtype: `.bf16`, `.f16` or `.f32`.
    ///   - replacingExisting: remove earlier weights (the index and every `*.safetensors` file
    ///     not hidden, whatever its name) once the new ones are whole; otherwise their presence
    ///     is an error.
    ///   - progress: told the tensor bytes written after every chunk.
    /// - Throws: `CheckpointError.unsupportedSyntheticDType`, `.invalidShardSize`,
    ///   `.writeFailed`, `BundleError.outputExists` when earlier weights exist and
    ///   `replacingExisting` is false (the command line's `--overwrite`), and the writer's
    ///   declaration errors; `CheckpointError.writeFailed` naming `directory` while another
    ///   run (a `synth`, an export reading it) holds it (``CheckpointFolderLock``).
    @discardableResult
    public static func write(
        tensors: [(name: String, shape: [Int])], dtype: TensorDType = .bf16, seed: UInt64, to directory: URL,
        shardBytes: Int = 5_000_000_000, replacingExisting: Bool = false, progress: (WorkProgress) -> Void = { _ in }
    ) throws -> Result {
        guard [.bf16, .f16, .f32].contains(dtype) else { throw CheckpointError.unsupportedSyntheticDType(dtype) }
        guard shardBytes > 0 else { throw CheckpointError.invalidShardSize(shardBytes) }
        let cleanup = try createFolder(directory)
        defer { InterruptCleanup.unregister(cleanup) }
        return try CheckpointFolderLock.holding(directory, .writing) {
            try writeHoldingLock(
                tensors: tensors, dtype: dtype, seed: seed, to: directory, shardBytes: shardBytes,
                replacingExisting: replacingExisting, progress: progress)
        }
    }

    /// ``write(tensors:dtype:seed:to:shardBytes:replacingExisting:progress:)`` once the folder
    /// exists and is locked.
    static func writeHoldingLock(
        tensors: [(name: String, shape: [Int])], dtype: TensorDType, seed: UInt64, to directory: URL,
        shardBytes: Int, replacingExisting: Bool, progress: (WorkProgress) -> Void
    ) throws -> Result {
        // Temporary files of killed runs: nobody holds them any more.
        SafetensorsWriter.removeAbandonedTemporaries(in: directory)
        let earlier = try earlierWeights(in: directory, replacing: replacingExisting)

        let declarations = tensors.map {
            SafetensorsWriter.TensorDeclaration(name: $0.name, dtype: dtype, shape: $0.shape)
        }
        .sorted { $0.name < $1.name }
        var sizes: [Int] = []
        var totalBytes = 0
        for declaration in declarations {
            var elements = 1
            for dimension in declaration.shape {
                let (product, overflow) = elements.multipliedReportingOverflow(by: dimension)
                guard !overflow, dimension >= 0 else {
                    throw CheckpointError.invalidTensorEntry(
                        path: directory.path, tensor: declaration.name, reason: "invalid shape \(declaration.shape)")
                }
                elements = product
            }
            let (sum, overflow) = totalBytes.addingReportingOverflow(dtype.byteCount(elementCount: elements) ?? .max)
            guard let bytes = dtype.byteCount(elementCount: elements), !overflow else {
                throw CheckpointError.invalidTensorEntry(
                    path: directory.path, tensor: declaration.name, reason: "the checkpoint's size overflows")
            }
            sizes.append(bytes)
            totalBytes = sum
        }

        var shards: [[Int]] = [[]]
        var shardSize = 0
        for (index, size) in sizes.enumerated() {
            if let current = shards.last, !current.isEmpty, shardSize + size > shardBytes {
                shards.append([])
                shardSize = 0
            }
            shards[shards.count - 1].append(index)
            shardSize += size
        }

        let generator = SyntheticWeights(seed: seed)
        let metadata = ["format": "pt"]
        var bytesWritten = 0
        var tensorsWritten = 0
        let written = { (bytes: Int, tensorDone: Bool) in
            bytesWritten += bytes
            if tensorDone { tensorsWritten += 1 }
            progress(
                WorkProgress(
                    done: bytesWritten, total: totalBytes, countsBytes: true,
                    stage: "\(tensorsWritten)/\(declarations.count) tensors"))
        }
        // Every file is written whole under its temporary name before any is published (and
        // before earlier weights are removed): a killed run leaves only temporaries, which the
        // next run removes, never some of the shards, which a re-run would refuse as earlier weights.
        if totalBytes <= shardBytes || shards.count == 1 {
            let url = directory.appendingPathComponent(CheckpointWeights.singleFileName)
            let writer = try writeFile(
                url, declarations: declarations, metadata: metadata, generator: generator, written: written)
            try removeEarlierWeights(earlier, in: directory)
            try writer.publish()
            return Result(files: [url], indexURL: nil, totalTensorBytes: totalBytes)
        }

        var writers: [SafetensorsWriter] = []
        var weightMap: [(String, String)] = []
        for (number, shard) in shards.enumerated() {
            let name = String(format: "model-%05d-of-%05d.safetensors", number + 1, shards.count)
            let url = directory.appendingPathComponent(name)
            let shardDeclarations = shard.map { declarations[$0] }
            writers.append(
                try writeFile(
                    url, declarations: shardDeclarations, metadata: metadata, generator: generator, written: written))
            weightMap += shardDeclarations.map { ($0.name, name) }
        }
        try removeEarlierWeights(earlier, in: directory)
        for writer in writers { try writer.publish() }
        let files = writers.map(\.url)
        let indexURL = directory.appendingPathComponent(CheckpointWeights.indexFileName)
        try writeIndex(indexURL, weightMap: weightMap, totalSize: totalBytes)
        return Result(files: files, indexURL: indexURL, totalTensorBytes: totalBytes)
    }

    /// Earlier weights would mix with the new ones, or be read instead of them, so they are
    /// removed (once the new ones are whole) or refused: every file the checkpoint reader
    /// (``CheckpointWeights``) could take for weights — the index and every `*.safetensors` file
    /// not hidden, whatever its name (`consolidated.safetensors`, `weights-a.safetensors`): the
    /// reader prefers `model.safetensors`, so another set beside it would be silently shadowed.
    /// - Returns: the names of the earlier weight files, in byte order.
    /// - Throws: `BundleError.outputExists` naming the first when `replacing` is false;
    ///   `CheckpointError.writeFailed` naming an entry that is a folder, which is never removed.
    private static func earlierWeights(in directory: URL, replacing: Bool) throws -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        let earlier = names.filter(isWeightFileName).sorted(by: FileSystemName.byteOrder)
        if let first = earlier.first, !replacing {
            throw BundleError.outputExists(path: directory.appendingPathComponent(first).path)
        }
        for name in earlier {
            let url = directory.appendingPathComponent(name)
            let type = (try? FileManager.default.attributesOfItem(atPath: url.path))?[.type] as? FileAttributeType
            if type == .typeDirectory {
                throw CheckpointError.writeFailed(
                    path: url.path, reason: "a folder is there, not a weight file; move it away")
            }
        }
        return earlier
    }

    /// Whether the checkpoint reader could take the entry called `name` for weights: the index,
    /// or a `*.safetensors` file not hidden (hidden ones are temporaries, never read).
    static func isWeightFileName(_ name: String) -> Bool {
        name == CheckpointWeights.indexFileName || (name.hasSuffix(".safetensors") && !name.hasPrefix("."))
    }

    /// Removes the earlier weight files `names` from `directory`.
    /// - Throws: `CheckpointError.writeFailed` naming a file that cannot be removed.
    private static func removeEarlierWeights(_ names: [String], in directory: URL) throws {
        for name in names {
            let url = directory.appendingPathComponent(name)
            do {
                try FileManager.default.removeItem(at: url)
            } catch {
                throw CheckpointError.writeFailed(path: url.path, reason: "cannot remove the earlier file")
            }
        }
    }

    /// Writes one file whole under its temporary name; the caller publishes it.
    /// - Parameter written: told the bytes of every chunk written, and whether it ended its tensor.
    private static func writeFile(
        _ url: URL, declarations: [SafetensorsWriter.TensorDeclaration], metadata: [String: String],
        generator: SyntheticWeights, written: (Int, Bool) -> Void
    ) throws -> SafetensorsWriter {
        let writer = try SafetensorsWriter(url: url, tensors: declarations, metadata: metadata)
        let elementSize = declarations.first.map { $0.dtype.bitsPerElement / 8 } ?? 2
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkElements * elementSize, alignment: 16)
        defer { scratch.deallocate() }
        let workers = SystemResources.activeCores
        for declaration in writer.declarations {
            let elementCount = declaration.shape.reduce(1, *)
            if elementCount == 0 { written(0, true) }
            var start = 0
            while start < elementCount {
                let count = min(chunkElements, elementCount - start)
                let chunkStart = start
                let pieceLength = (count + workers - 1) / workers
                DispatchQueue.concurrentPerform(iterations: workers) { worker in
                    let lower = min(worker * pieceLength, count)
                    let upper = min(lower + pieceLength, count)
                    guard lower < upper else { return }
                    let elements = (chunkStart + lower)..<(chunkStart + upper)
                    fill(scratch, offset: lower, elements: elements, declaration: declaration, generator: generator)
                }
                try writer.write(
                    declaration.name, bytes: UnsafeRawBufferPointer(rebasing: scratch[0..<(count * elementSize)]))
                start += count
                written(count * elementSize, start == elementCount)
            }
        }
        try writer.complete()
        return writer
    }

    /// Generates `elements` into `scratch` from element slot `offset` on, in the stored
    /// (little-endian) form of the declaration's dtype.
    private static func fill(
        _ scratch: UnsafeMutableRawBufferPointer, offset: Int, elements: Range<Int>,
        declaration: SafetensorsWriter.TensorDeclaration, generator: SyntheticWeights
    ) {
        switch declaration.dtype {
        case .f32:
            let typed = scratch.bindMemory(to: Float.self)
            let slice = UnsafeMutableBufferPointer(rebasing: typed[offset..<(offset + elements.count)])
            generator.generate(name: declaration.name, shape: declaration.shape, elements: elements, into: slice)
            #if _endian(big)
                slice.withMemoryRebound(to: UInt32.self) { for i in $0.indices { $0[i] = $0[i].littleEndian } }
            #endif
        case .f16:
            let typed = scratch.bindMemory(to: Float16.self)
            let slice = UnsafeMutableBufferPointer(rebasing: typed[offset..<(offset + elements.count)])
            generator.generate(name: declaration.name, shape: declaration.shape, elements: elements, into: slice)
            #if _endian(big)
                slice.withMemoryRebound(to: UInt16.self) { for i in $0.indices { $0[i] = $0[i].littleEndian } }
            #endif
        default:
            let typed = scratch.bindMemory(to: UInt16.self)
            let slice = UnsafeMutableBufferPointer(rebasing: typed[offset..<(offset + elements.count)])
            generator.generateBFloat16Bits(
                name: declaration.name, shape: declaration.shape, elements: elements, into: slice)
            #if _endian(big)
                for i in slice.indices { slice[i] = slice[i].littleEndian }
            #endif
        }
    }

    /// Writes the index as `transformers` lays it out, keys sorted, via a temporary file.
    private static func writeIndex(_ url: URL, weightMap: [(String, String)], totalSize: Int) throws {
        var text = "{\n  \"metadata\": {\n    \"total_size\": \(totalSize)\n  },\n  \"weight_map\": {\n"
        text += weightMap.sorted { $0.0 < $1.0 }.map { "    \(JSONWriter.quoted($0.0)): \(JSONWriter.quoted($0.1))" }
            .joined(separator: ",\n")
        text += "\n  }\n}\n"
        do {
            try Data(text.utf8).write(to: url, options: .atomic)
        } catch {
            throw CheckpointError.writeFailed(path: url.path, reason: fileSystemFailureReason(error))
        }
    }
}
