import Foundation

/// Palettises Float16 weight tensors: per group of rows, a LUT of `2^bits` values chosen by
/// one-dimensional k-means (``KMeans1D``), and a packed index per weight.
///
/// Pure and deterministic: the same weights and spec give the same LUT and bytes whatever
/// the worker count, because every group is clustered from its own exact histogram and
/// concurrently written index ranges are merged by OR-ing their shared edge bytes.
public enum Palettizer {
    /// A centroid as a LUT entry: the nearest float16, +0 for zero (a tiny negative mean
    /// rounds to −0, which would turn stored +0 weights into −0; a LUT never holds −0).
    @inline(__always)
    static func lutEntry(_ centroid: Double) -> Float16 {
        let value = Float16(centroid)
        return value == 0 ? 0 : value
    }

    /// Workers used when the caller does not say: one per active core.
    public static var defaultWorkerCount: Int { SystemResources.activeCores }

    /// Palettises a `rows × columns` row-major tensor.
    ///
    /// - Parameters:
    ///   - weights: `rows · columns` weights, row-major (row = output channel).
    ///   - spec: index width and LUT granularity.
    ///   - name: the tensor's name, carried by errors.
    ///   - workerCount: threads to use (at least one); does not change the result.
    ///   - clustering: how LUT values are chosen (the default suits exports).
    /// - Throws: ``CompressionError`` for an unsupported bit width, a group size below 1, an
    ///   empty or negative shape, a buffer of the wrong size, or a NaN/infinite weight.
    public static func palettize(
        _ weights: UnsafeBufferPointer<Float16>, rows: Int, columns: Int, spec: PaletteSpec,
        name: String? = nil, workerCount: Int = defaultWorkerCount, clustering: PaletteClustering = .automatic
    ) throws -> PalettizedTensor {
        let job = try PaletteJob(
            rows: rows, columns: columns, weightCount: weights.count, spec: spec, name: name, workerCount: workerCount,
            method: clustering, patterns: .float16)
        let result = weights.withMemoryRebound(to: UInt16.self) { job.run($0) }
        guard let result else {
            let (row, column) = weights.withMemoryRebound(to: UInt16.self) { firstNonFinite($0, columns: columns) }
            throw CompressionError.nonFiniteWeight(row: row, column: column, tensor: name)
        }
        return result
    }

    /// Palettises a `rows × columns` row-major tensor given as stored bit patterns of `kind`;
    /// bfloat16 patterns are each worth their float16 conversion (as the checkpoint reader
    /// converts them): the same result as converting first and palettising the float16
    /// weights, without the conversion pass.
    ///
    /// - Returns: nil when a pattern has no finite float16 value (NaN, infinity, or beyond
    ///   ±65,504): such tensors are converted by the reader, which reports or clamps them.
    /// - Throws: as ``palettize(_:rows:columns:spec:name:workerCount:clustering:)``.
    static func palettize(
        patterns weights: UnsafeBufferPointer<UInt16>, kind: SourcePatterns, rows: Int, columns: Int, spec: PaletteSpec,
        name: String? = nil, workerCount: Int = defaultWorkerCount, clustering: PaletteClustering = .automatic
    ) throws -> PalettizedTensor? {
        let job = try PaletteJob(
            rows: rows, columns: columns, weightCount: weights.count, spec: spec, name: name, workerCount: workerCount,
            method: clustering, patterns: kind)
        return job.run(weights)
    }

    /// Palettises a `rows × columns` tensor stored as bit patterns of `kind` per grouped
    /// channel, reading it with `read` as it goes: each worker reads the next few whole groups
    /// (about `readElements` weights) into a buffer of its own and palettises them while they
    /// are still in its cache. Only those buffers of the source are ever in memory, with the
    /// LUTs and packed indices (a quarter of the source at 4 bits). The same result as
    /// ``palettize(patterns:kind:rows:columns:spec:name:workerCount:clustering:)``, since
    /// every group is clustered on its own.
    ///
    /// Why each worker reads: a block read by one thread while the others wait left a core
    /// idle for the read, and the block, larger than the caches, was fetched from memory again
    /// to be counted.
    ///
    /// - Parameter read: fills the buffer with the patterns of an element range; called from
    ///   several threads at once.
    /// - Returns: nil when a pattern has no finite float16 value (as the in-memory call).
    /// - Throws: as the in-memory call, and what `read` throws (for the lowest range that
    ///   failed, whichever worker read it).
    static func palettize(
        streamedRows rows: Int, columns: Int, kind: SourcePatterns, spec: PaletteSpec, name: String? = nil,
        workerCount: Int = defaultWorkerCount, clustering: PaletteClustering = .automatic,
        readElements: Int = streamReadElements,
        read: (Range<Int>, UnsafeMutableBufferPointer<UInt16>) throws -> Void
    ) throws -> PalettizedTensor? {
        let (elementCount, overflow) = rows.multipliedReportingOverflow(by: columns)
        let job = try PaletteJob(
            rows: rows, columns: columns, weightCount: overflow ? -1 : elementCount, spec: spec, name: name,
            workerCount: workerCount, method: clustering, patterns: kind)
        let batch = streamReadGroups(groupElements: job.layout.groupRows * columns, readElements: readElements)
        guard let groups = try job.runGroups(readingGroupsBy: batch, read: read) else { return nil }
        return PalettizedTensor(
            unchecked: job.layout, bits: spec.bits, lut: groups.lut, packedIndices: groups.packed,
            squaredError: groups.squaredErrors.reduce(0, +), signalPower: groups.signalPowers.reduce(0, +))
    }

    /// Weights per read of ``palettize(streamedRows:columns:kind:spec:name:workerCount:clustering:readElements:read:)``:
    /// 256 KiB of 16-bit patterns, which stay in a core's cache until counted and encoded.
    static let streamReadElements = 1 << 17

    /// Whole groups per read of a streamed palette: as many as `readElements` weights hold, at least one.
    static func streamReadGroups(groupElements: Int, readElements: Int) -> Int {
        max(1, readElements / max(1, groupElements))
    }

    /// Writes the weights the tensor's indices select (its LUT values as Float), row-major.
    ///
    /// - Throws: ``CompressionError/outputSizeMismatch(expected:actual:tensor:)`` when
    ///   `output` does not hold exactly `rows · columns` values.
    public static func dequantize(_ tensor: PalettizedTensor, into output: UnsafeMutableBufferPointer<Float>) throws {
        guard output.count == tensor.weightCount else {
            throw CompressionError.outputSizeMismatch(expected: tensor.weightCount, actual: output.count, tensor: nil)
        }
        let layout = tensor.layout
        let entryCount = tensor.entryCount
        Float16Table.floats.withUnsafeBufferPointer { floats in
            tensor.lut.withUnsafeBufferPointer { lut in
                tensor.packedIndices.withUnsafeBufferPointer { packed in
                    var groupLUT = [Float](repeating: 0, count: entryCount)
                    var reader = BitStreamReader(bytes: packed, bits: tensor.bits)
                    var element = 0
                    for group in 0..<layout.groupCount {
                        for entry in 0..<entryCount {
                            groupLUT[entry] = floats[Int(lut[group * entryCount + entry].bitPattern)]
                        }
                        let count = layout.rowCount(ofGroup: group) * layout.columns
                        groupLUT.withUnsafeBufferPointer {
                            reader.lookUp(count, in: $0.baseAddress!, into: output.baseAddress! + element)
                        }
                        element += count
                    }
                }
            }
        }
    }

    /// Row and column of the first NaN or infinite weight (error path only).
    static func firstNonFinite(_ bits: UnsafeBufferPointer<UInt16>, columns: Int) -> (row: Int, column: Int) {
        let index = bits.firstIndex(where: Float16Table.isNonFinite) ?? 0
        return (index / columns, index % columns)
    }
}

extension PalettizedTensor {
    /// The weights the indices select, row-major, as Float.
    public func dequantized() -> [Float] {
        var output = [Float](repeating: 0, count: weightCount)
        // The sizes agree by construction, so this cannot throw.
        output.withUnsafeMutableBufferPointer { try? Palettizer.dequantize(self, into: $0) }
        return output
    }
}

/// One palettisation: fixed inputs, per-group results gathered in group order.
struct PaletteJob {
    let layout: PaletteGroupLayout
    let bits: Int
    let workerCount: Int
    let method: PaletteClustering
    /// What the counted patterns are.
    let patterns: SourcePatterns

    /// A job for `weightCount` weights in `rows × columns`, checked.
    /// - Throws: ``CompressionError`` for an unsupported bit width, a group size below 1, an
    ///   empty, negative or overflowing shape, or a weight count that is not the shape's.
    init(
        rows: Int, columns: Int, weightCount: Int, spec: PaletteSpec, name: String?, workerCount: Int,
        method: PaletteClustering, patterns: SourcePatterns
    ) throws {
        guard PaletteSpec.supportedBits.contains(spec.bits) else {
            throw CompressionError.unsupportedBits(spec.bits, tensor: name)
        }
        layout = try PaletteGroupLayout(rows: rows, columns: columns, granularity: spec.granularity, tensor: name)
        let (elementCount, overflow) = rows.multipliedReportingOverflow(by: columns)
        guard !overflow else { throw CompressionError.invalidShape(rows: rows, columns: columns, tensor: name) }
        guard weightCount == elementCount else {
            throw CompressionError.weightCountMismatch(expected: elementCount, actual: weightCount, tensor: name)
        }
        bits = spec.bits
        self.workerCount = max(1, workerCount)
        self.method = method
        self.patterns = patterns
    }

    /// Groups smaller than this are never split between workers.
    static let minimumSplitGroupElements = 1 << 16

    /// The palettised tensor, or nil when a weight has no finite float16 value.
    func run(_ source: UnsafeBufferPointer<UInt16>) -> PalettizedTensor? {
        guard let groups = runGroups(source) else { return nil }
        // Sum in group order so the totals do not depend on the split.
        return PalettizedTensor(
            unchecked: layout, bits: bits, lut: groups.lut, packedIndices: groups.packed,
            squaredError: groups.squaredErrors.reduce(0, +), signalPower: groups.signalPowers.reduce(0, +))
    }

    /// Every group's LUT, the packed indices and every group's squared error and signal
    /// power; nil when a weight has no finite float16 value.
    func runGroups(_ source: UnsafeBufferPointer<UInt16>) -> PaletteGroups? {
        let groupElements = layout.groupRows * layout.columns
        // Few large groups (per-tensor palettes) are split across workers; many groups are
        // dealt out whole. Both give the same bytes.
        let splitGroups =
            workerCount > 1 && layout.groupCount < 2 * workerCount && groupElements >= Self.minimumSplitGroupElements
        guard let sourceBase = source.baseAddress else { return nil }
        return collectGroups { output in
            if splitGroups {
                runSplittingGroups(sourceBase, output)
            } else {
                runWholeGroups(sourceBase, output)
            }
        }
    }

    /// As ``runGroups(_:)``, reading the source with `read`: each worker takes the next
    /// `batch` groups, reads them into a buffer of its own and palettises them. The first
    /// batch (in tensor order) whose read fails or that holds a pattern without a finite
    /// float16 value decides the outcome, whichever worker got there first: batches are
    /// taken in order, and only those after it are skipped.
    /// - Throws: that batch's read error.
    func runGroups(
        readingGroupsBy batch: Int, read: (Range<Int>, UnsafeMutableBufferPointer<UInt16>) throws -> Void
    ) throws -> PaletteGroups? {
        let groupElements = layout.groupRows * layout.columns
        let elementCount = layout.rows * layout.columns
        let batches = (layout.groupCount + batch - 1) / batch
        let failure = FirstFailure()
        let groups = collectGroups { output in
            WorkDispenser.perform(
                count: batches, workers: workerCount,
                setUp: { _ in
                    // Zeroed: a read that left a gap must not show the palettiser garbage.
                    let buffer = UnsafeMutableBufferPointer<UInt16>.allocate(
                        capacity: min(elementCount, batch * groupElements))
                    buffer.initialize(repeating: 0)
                    return StreamingWorker(workspace: PaletteWorkspace.borrow(), buffer: buffer)
                },
                tearDown: { worker in
                    PaletteWorkspace.giveBack(worker.workspace)
                    worker.buffer.deallocate()
                }
            ) { worker, index in
                guard !failure.happened(before: index) else { return }
                let groups = (index * batch)..<min(layout.groupCount, (index + 1) * batch)
                let elements =
                    (groups.lowerBound * groupElements)..<min(elementCount, groups.upperBound * groupElements)
                do {
                    try read(elements, UnsafeMutableBufferPointer(rebasing: worker.buffer[0..<elements.count]))
                } catch {
                    failure.record(error, order: index)
                    return
                }
                guard let base = worker.buffer.baseAddress else { return }
                for group in groups {
                    let source = base + (group - groups.lowerBound) * groupElements
                    guard palettizeGroup(group, from: source, worker.workspace, output) else {
                        failure.record(UnusablePattern(), order: index)
                        return
                    }
                }
            }
        }
        do {
            try failure.rethrow()
        } catch is UnusablePattern {
            return nil
        }
        return groups
    }

    /// A streamed batch held a pattern without a finite float16 value.
    private struct UnusablePattern: Error {}

    /// Allocates every group's outputs, lets `fill` write them, then joins the packed indices
    /// at the groups' edges; nil when a group was marked failed.
    private func collectGroups(_ fill: (GroupOutputs) -> Void) -> PaletteGroups? {
        let entryCount = 1 << bits
        let groupCount = layout.groupCount
        let elementCount = layout.rows * layout.columns
        var lut = [Float16](repeating: 0, count: groupCount * entryCount)
        var packed = [UInt8](repeating: 0, count: BitPacking.packedByteCount(count: elementCount, bits: bits))
        var squaredErrors = [Double](repeating: 0, count: groupCount)
        var signalPowers = [Double](repeating: 0, count: groupCount)
        var edges = [PackedEdges](repeating: PackedEdges(), count: groupCount)
        var failed = [Bool](repeating: false, count: groupCount)
        lut.withUnsafeMutableBufferPointer { lutBuffer in
            packed.withUnsafeMutableBufferPointer { packedBuffer in
                squaredErrors.withUnsafeMutableBufferPointer { errorBuffer in
                    signalPowers.withUnsafeMutableBufferPointer { signalBuffer in
                        edges.withUnsafeMutableBufferPointer { edgeBuffer in
                            failed.withUnsafeMutableBufferPointer { failedBuffer in
                                // Every buffer holds at least one element (shapes are non-empty).
                                guard let lutBase = lutBuffer.baseAddress, let packedBase = packedBuffer.baseAddress,
                                    let errorBase = errorBuffer.baseAddress, let signalBase = signalBuffer.baseAddress,
                                    let edgeBase = edgeBuffer.baseAddress, let failedBase = failedBuffer.baseAddress
                                else { return }
                                let output = GroupOutputs(
                                    lut: lutBase, packed: packedBase, squaredErrors: errorBase,
                                    signalPowers: signalBase, edges: edgeBase, failed: failedBase)
                                fill(output)
                                for group in 0..<groupCount { output.edges[group].merge(into: output.packed) }
                            }
                        }
                    }
                }
            }
        }
        guard !failed.contains(true) else { return nil }
        return PaletteGroups(lut: lut, packed: packed, squaredErrors: squaredErrors, signalPowers: signalPowers)
    }

    /// Each worker takes the next unclaimed group, with a workspace of its own.
    private func runWholeGroups(_ source: UnsafePointer<UInt16>, _ output: GroupOutputs) {
        WorkDispenser.perform(
            count: layout.groupCount, workers: workerCount, setUp: { _ in PaletteWorkspace.borrow() },
            tearDown: PaletteWorkspace.giveBack
        ) { workspace, group in
            palettizeGroup(group, from: source + group * layout.groupRows * layout.columns, workspace, output)
        }
    }

    /// Counts, clusters and encodes group `group`, whose weights start at `groupSource`;
    /// false (the group marked failed) when it holds a pattern without a finite float16 value.
    @discardableResult
    private func palettizeGroup(
        _ group: Int, from groupSource: UnsafePointer<UInt16>, _ workspace: PaletteWorkspace, _ output: GroupOutputs
    ) -> Bool {
        let first = group * layout.groupRows * layout.columns
        let count = layout.rowCount(ofGroup: group) * layout.columns
        workspace.countGroup(groupSource, count: count)
        guard finishGroup(group, elementCount: count, workspace: workspace, output: output) else { return false }
        let indexOfPattern = workspace.indexOfPattern
        output.edges[group] = BitStreamWriter.write(
            count: count, firstElement: first, bits: bits, into: output.packed
        ) { indexOfPattern[Int(groupSource[$0])] }
        return true
    }

    /// Groups one after another, each counted and encoded by all workers in chunks taken as
    /// they come (more chunks than workers, so a worker slowed by other threads takes fewer).
    private func runSplittingGroups(_ source: UnsafePointer<UInt16>, _ output: GroupOutputs) {
        let workspaces = (0..<workerCount).map { _ in PaletteWorkspace.borrow() }
        // Every workspace is cleared again by the end: absorbed, extracted or reset.
        defer { workspaces.forEach(PaletteWorkspace.giveBack) }
        let chunkCount = 8 * workerCount
        var chunkEdges = [PackedEdges](repeating: PackedEdges(), count: chunkCount)
        for group in 0..<layout.groupCount {
            let first = group * layout.groupRows * layout.columns
            let count = layout.rowCount(ofGroup: group) * layout.columns
            let chunk = (count + chunkCount - 1) / chunkCount
            WorkDispenser.perform(count: chunkCount, workers: workerCount, setUp: { workspaces[$0] }) {
                workspace, index in
                let start = min(count, index * chunk)
                workspace.countOnly(source + first + start, count: min(count, start + chunk) - start)
            }
            for workspace in workspaces { workspace.markOccupied() }
            let main = workspaces[0]
            for worker in 1..<workerCount { main.absorb(workspaces[worker]) }
            guard finishGroup(group, elementCount: count, workspace: main, output: output) else { continue }
            let indexOfPattern = main.indexOfPattern
            chunkEdges.withUnsafeMutableBufferPointer { chunkEdgeBuffer in
                guard let chunkEdgeBase = chunkEdgeBuffer.baseAddress else { return }
                WorkDispenser.perform(count: chunkCount, workers: workerCount, setUp: { _ in () }) { _, index in
                    let start = min(count, index * chunk)
                    let chunkSource = source + first + start
                    chunkEdgeBase[index] = BitStreamWriter.write(
                        count: min(count, start + chunk) - start, firstElement: first + start, bits: bits,
                        into: output.packed
                    ) { indexOfPattern[Int(chunkSource[$0])] }
                }
            }
            for index in 0..<chunkCount { chunkEdges[index].merge(into: output.packed) }
        }
    }

    /// Clusters the counted group, writes its LUT and fills the workspace's index table; or,
    /// when the group holds a pattern without a finite float16 value, marks it failed, clears
    /// the counts and returns false.
    private func finishGroup(_ group: Int, elementCount: Int, workspace: PaletteWorkspace, output: GroupOutputs) -> Bool
    {
        guard !workspace.sawUnusable(patterns) else {
            workspace.reset()
            output.failed[group] = true
            return false
        }
        let entryCount = 1 << bits
        let histogram = workspace.extractHistogram(patterns)
        let scratch = workspace.kMeans
        let clusters = KMeans1D.solve(
            histogram, clusterLimit: entryCount, elementCount: elementCount, scratch: scratch, method: method)
        let lut = output.lut + group * entryCount
        for entry in 0..<entryCount {
            // Unused entries repeat the largest centroid (documented on PalettizedTensor).
            let value = Palettizer.lutEntry(scratch.centroids[min(entry, clusters - 1)])
            lut[entry] = value
            scratch.lutValues[entry] = Double(Float(value))
        }
        let (squaredError, signalPower) = workspace.assignIndices(
            histogram, lut: scratch.lutValues, entryCount: entryCount)
        output.squaredErrors[group] = squaredError
        output.signalPowers[group] = signalPower
        return true
    }
}

/// A worker of a streamed palettisation: its palettiser scratch and its read buffer.
private struct StreamingWorker {
    let workspace: PaletteWorkspace
    let buffer: UnsafeMutableBufferPointer<UInt16>
}

/// A palettisation's per-group results, in group order.
struct PaletteGroups {
    var lut: [Float16]
    var packed: [UInt8]
    var squaredErrors: [Double]
    var signalPowers: [Double]
}

/// Where workers write per-group results; each group's slots are written by one worker.
private struct GroupOutputs: @unchecked Sendable {
    let lut: UnsafeMutablePointer<Float16>
    let packed: UnsafeMutablePointer<UInt8>
    let squaredErrors: UnsafeMutablePointer<Double>
    let signalPowers: UnsafeMutablePointer<Double>
    let edges: UnsafeMutablePointer<PackedEdges>
    let failed: UnsafeMutablePointer<Bool>
}
