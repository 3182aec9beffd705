/// Sorted distinct values with their multiplicities, as prefix sums, so that the size,
/// sum and squared error of any contiguous cluster `[a, b)` cost O(1).
///
/// One-dimensional k-means has contiguous optimal clusters, so clusters are index ranges.
struct SortedHistogram {
    /// Number of distinct values.
    var count: Int
    /// The distinct values, strictly ascending (`count` entries).
    var values: UnsafeMutablePointer<Double>
    /// `prefixCount[i]` is the number of weights among the first `i` distinct values (`count + 1` entries).
    var prefixCount: UnsafeMutablePointer<Double>
    /// Prefix sums of the weights (`count + 1` entries): `prefixSum[b] − prefixSum[a]` is the
    /// sum of entries `a..<b`. Only differences count, so the sums may start anywhere;
    /// ``PaletteWorkspace`` makes them zero at the first non-negative value and accumulates
    /// outward, so that a cluster of small values is not the difference of sums holding large
    /// ones (one value of 65,504 before them made their errors rounding noise).
    var prefixSum: UnsafeMutablePointer<Double>
    /// Prefix sums of the squared weights (`count + 1` entries), as ``prefixSum``.
    var prefixSquares: UnsafeMutablePointer<Double>

    @inline(__always) func weight(_ start: Int, _ end: Int) -> Double { prefixCount[end] - prefixCount[start] }
    @inline(__always) func sum(_ start: Int, _ end: Int) -> Double { prefixSum[end] - prefixSum[start] }

    /// Mean of the non-empty cluster `[start, end)`.
    @inline(__always) func mean(_ start: Int, _ end: Int) -> Double { sum(start, end) / weight(start, end) }

    /// Sum of squared distances to the mean of `[start, end)`; zero for an empty cluster.
    @inline(__always) func cost(_ start: Int, _ end: Int) -> Double {
        let weight = self.weight(start, end)
        guard weight > 0 else { return 0 }
        let sum = self.sum(start, end)
        // Rounding can make a near-zero variance slightly negative.
        return max(0, (prefixSquares[end] - prefixSquares[start]) - sum * sum / weight)
    }
}

/// Reusable buffers for ``KMeans1D``; one per worker, so clustering allocates nothing per group.
final class KMeansScratch {
    /// Room for the largest palette (256 entries) plus one boundary.
    static let capacity = 257
    let bounds = UnsafeMutablePointer<Int>.allocate(capacity: capacity)
    let nextBounds = UnsafeMutablePointer<Int>.allocate(capacity: capacity)
    let centroids = UnsafeMutablePointer<Double>.allocate(capacity: capacity)
    let splitStarts = UnsafeMutablePointer<Int>.allocate(capacity: capacity)
    let splitEnds = UnsafeMutablePointer<Int>.allocate(capacity: capacity)
    let splitPoints = UnsafeMutablePointer<Int>.allocate(capacity: capacity)
    let splitGains = UnsafeMutablePointer<Double>.allocate(capacity: capacity)
    /// The LUT of the current group as doubles (exact Float16 values).
    let lutValues = UnsafeMutablePointer<Double>.allocate(capacity: capacity)
    /// Window of each boundary for ``KMeans1D/windowedBounds(_:clusterCount:scratch:)``.
    let windowLow = UnsafeMutablePointer<Int>.allocate(capacity: capacity)
    let windowHigh = UnsafeMutablePointer<Int>.allocate(capacity: capacity)
    /// How far each boundary may move down and up in the next polish round.
    let reachBelow = UnsafeMutablePointer<Int>.allocate(capacity: capacity)
    let reachAbove = UnsafeMutablePointer<Int>.allocate(capacity: capacity)
    /// Bit sets of clusters for ``KMeans1D/lloyd(_:clusterCount:scratch:)``: one bit per cluster.
    let changedClusters = UnsafeMutablePointer<UInt64>.allocate(capacity: (capacity + 63) / 64)
    let changingClusters = UnsafeMutablePointer<UInt64>.allocate(capacity: (capacity + 63) / 64)
    /// Dynamic-programming rows and choices, grown on demand.
    var table: [Double] = []
    var previousRow: [Double] = []
    var choices: [Int32] = []

    deinit {
        for pointer in [
            bounds, nextBounds, splitStarts, splitEnds, splitPoints, windowLow, windowHigh, reachBelow, reachAbove,
        ] {
            pointer.deallocate()
        }
        centroids.deallocate()
        splitGains.deallocate()
        changedClusters.deallocate()
        changingClusters.deallocate()
        lutValues.deallocate()
    }
}

/// Optimal or near-optimal one-dimensional k-means over a ``SortedHistogram``.
///
/// Why this design: Float16 weights take few distinct values (at most 65,536), so k-means
/// over a group is k-means over its weighted histogram, and with prefix sums one Lloyd
/// iteration costs O(k log u) (boundaries by search, means in O(1)) instead of O(n·k).
/// - When the histogram is small enough, an exact dynamic programme (divide-and-conquer
///   optimisation, O(k·u·log u)) gives the optimal clusters.
/// - Otherwise (the heuristic): greedy divisive initialisation (repeatedly split the
///   cluster whose best two-way split removes the most error, the split found on a sample
///   dense towards the tails), which isolates outliers first; Lloyd iterations to a fixed
///   point; then one swap round (merge two neighbours, split another cluster, settle, keep
///   if better), which moves clusters onto outliers.
/// - The full refinement (the thorough search, and every group of at least
///   ``fullRefinementElements`` weights) adds a polish that re-solves the DP exactly with
///   every boundary free to move ±16 places (coordinated moves Lloyd cannot make), repeated
///   until it settles, and up to 8 swap rounds, each followed by the polish.
///
/// Why the short refinement by default: on the bench's group-8 weights it lands about 0.7%
/// above the optimum's squared error, the full one about 0.2%, Lloyd from k-means++ seeds 6%;
/// the full refinement adds about a quarter to a group's time, and on a real model
/// (bench/FIDELITY.md) the model's output does not tell the two apart, while dropping the
/// swaps costs it dearly. In large groups the full refinement is a small part of the work, so
/// they always get it.
/// Deterministic: no randomness, fixed tie rules.
enum KMeans1D {
    /// Lloyd iterations stop at a fixed point or after this many (each is O(k log u)).
    static let maximumLloydIterations = 300

    /// Groups of at least this many weights (per-tensor LUTs of large tensors) get the full
    /// refinement whatever the search: there it costs little next to counting and encoding.
    static let fullRefinementElements = 1 << 20

    /// Clusters `histogram` into at most `clusterLimit` clusters and writes their means,
    /// ascending, to `scratch.centroids`. Returns the number of clusters, which is
    /// `min(clusterLimit, histogram.count)`. `elementCount` (the weights behind the
    /// histogram) bounds the work the exact method may take.
    static func solve(
        _ histogram: SortedHistogram, clusterLimit: Int, elementCount: Int, scratch: KMeansScratch,
        method: PaletteClustering = .automatic
    ) -> Int {
        let distinct = histogram.count
        guard distinct > clusterLimit else {
            for index in 0..<distinct { scratch.centroids[index] = histogram.values[index] }
            return distinct
        }
        let useExact: Bool
        switch method {
        case .exact: useExact = true
        case .heuristic, .thoroughHeuristic: useExact = false
        case .automatic, .thorough:
            let logDistinct = Int.bitWidth - distinct.leadingZeroBitCount
            useExact = clusterLimit * distinct * logDistinct <= max(1 << 14, 2 * elementCount)
        }
        if useExact {
            exactBounds(histogram, clusterCount: clusterLimit, scratch: scratch)
        } else {
            divisiveBounds(histogram, clusterCount: clusterLimit, scratch: scratch)
            let full = method == .thorough || method == .thoroughHeuristic || elementCount >= fullRefinementElements
            refineWithLloyd(histogram, clusterCount: clusterLimit, full: full, scratch: scratch)
        }
        for cluster in 0..<clusterLimit {
            let start = scratch.bounds[cluster]
            let end = scratch.bounds[cluster + 1]
            // Clusters are non-empty when distinct values outnumber them; should one not be,
            // repeating its left neighbour keeps the centroids ascending and finite.
            scratch.centroids[cluster] =
                end > start
                ? histogram.mean(start, end) : cluster > 0 ? scratch.centroids[cluster - 1] : histogram.values[0]
        }
        return clusterLimit
    }

    /// Total squared error of the clusters in `scratch.bounds`.
    static func cost(_ histogram: SortedHistogram, clusterCount: Int, scratch: KMeansScratch) -> Double {
        var total = 0.0
        for cluster in 0..<clusterCount {
            total += histogram.cost(scratch.bounds[cluster], scratch.bounds[cluster + 1])
        }
        return total
    }

    // MARK: Greedy divisive initialisation

    /// A split point of `[start, end)` and the error it removes (0 if none): the best one
    /// for short ranges; for long ranges the best of a sample (evenly spaced, and dense
    /// towards both ends where outliers sit) refined around it, coarse steps first, then
    /// every point next to the best of those.
    /// Scanning every point of every cluster at every level cost more than all the passes
    /// over the weights together; initialisation does not need the exact optimum, and
    /// Lloyd and the windowed polish correct what sampling misses.
    @inline(__always)
    static func bestSplit(_ histogram: SortedHistogram, _ start: Int, _ end: Int) -> (point: Int, gain: Double) {
        guard end - start >= 2 else { return (start, 0) }
        let totalWeight = histogram.weight(start, end)
        let totalSum = histogram.sum(start, end)
        let baseCount = histogram.prefixCount[start]
        let baseSum = histogram.prefixSum[start]
        // Removed error = Σ_side sum²/weight − total sum²/weight; maximise the first part.
        @inline(__always) func score(_ point: Int) -> Double {
            let leftWeight = histogram.prefixCount[point] - baseCount
            let leftSum = histogram.prefixSum[point] - baseSum
            let rightWeight = totalWeight - leftWeight
            let rightSum = totalSum - leftSum
            return leftSum * leftSum / leftWeight + rightSum * rightSum / rightWeight
        }
        var bestPoint = start + 1
        var bestScore = -Double.infinity
        var bestStep = 1
        @inline(__always) func consider(_ point: Int, step: Int) {
            let candidate = score(point)
            if candidate > bestScore {
                bestScore = candidate
                bestPoint = point
                bestStep = step
            }
        }
        let length = end - start
        if length <= 4 * sampledSplitCandidates {
            for point in (start + 1)..<end { consider(point, step: 1) }
        } else {
            // Dense near both ends (steps growing by a quarter of the distance), evenly
            // spaced in between; then every point between the best one's neighbours.
            let stride = length / sampledSplitCandidates
            var offset = 1
            while offset < stride {
                let step = max(1, offset / 4)
                consider(start + offset, step: step)
                consider(end - offset, step: step)
                offset += step
            }
            var point = start + stride
            while point <= end - stride {
                consider(point, step: stride)
                point += stride
            }
            // Narrow down between the best point's neighbours: coarse steps, then every point
            // around the best of those.
            var step = bestStep
            while step > 1 {
                let center = bestPoint
                let fine = max(1, step / 8)
                var point = max(start + 1, center - step + fine)
                while point <= min(end - 1, center + step - fine) {
                    consider(point, step: fine)
                    point += fine
                }
                step = fine
            }
        }
        return (bestPoint, max(0, bestScore - totalSum * totalSum / totalWeight))
    }

    /// Evenly spaced candidates examined when splitting a long range.
    static let sampledSplitCandidates = 32

    /// Fills `scratch.bounds[0...clusterCount]` by greedy divisive splitting.
    /// Requires `histogram.count >= clusterCount`.
    static func divisiveBounds(_ histogram: SortedHistogram, clusterCount: Int, scratch: KMeansScratch) {
        scratch.splitStarts[0] = 0
        scratch.splitEnds[0] = histogram.count
        (scratch.splitPoints[0], scratch.splitGains[0]) = bestSplit(histogram, 0, histogram.count)
        splitIntoBounds(histogram, clusters: 1, clusterCount: clusterCount, scratch: scratch, tiesToLeftmost: true)
    }

    /// Splits, one at a time, the cluster whose best split removes the most error, from
    /// `clusters` clusters (described by `scratch.split*`) up to `clusterCount`, then writes their
    /// sorted starts into `scratch.bounds`, padding with empty clusters at the end if splitting
    /// stopped early (not expected while distinct values outnumber clusters).
    /// - Parameter tiesToLeftmost: equal gains go to the leftmost cluster rather than the first found.
    static func splitIntoBounds(
        _ histogram: SortedHistogram, clusters initial: Int, clusterCount: Int, scratch: KMeansScratch,
        tiesToLeftmost: Bool
    ) {
        var clusters = initial
        while clusters < clusterCount {
            var chosen = -1
            var chosenGain = -1.0
            var chosenStart = Int.max
            for cluster in 0..<clusters where scratch.splitEnds[cluster] - scratch.splitStarts[cluster] >= 2 {
                let gain = scratch.splitGains[cluster]
                let wins =
                    gain > chosenGain
                    || (tiesToLeftmost && gain == chosenGain && scratch.splitStarts[cluster] < chosenStart)
                if wins {
                    chosen = cluster
                    chosenGain = gain
                    chosenStart = scratch.splitStarts[cluster]
                }
            }
            // Cannot happen while distinct values outnumber clusters; stop rather than loop.
            guard chosen >= 0 else { break }
            let start = scratch.splitStarts[chosen]
            let end = scratch.splitEnds[chosen]
            let point = scratch.splitPoints[chosen]
            scratch.splitEnds[chosen] = point
            (scratch.splitPoints[chosen], scratch.splitGains[chosen]) = bestSplit(histogram, start, point)
            scratch.splitStarts[clusters] = point
            scratch.splitEnds[clusters] = end
            (scratch.splitPoints[clusters], scratch.splitGains[clusters]) = bestSplit(histogram, point, end)
            clusters += 1
        }
        // Cluster starts are distinct; sort them into boundaries (k ≤ 256: insertion sort).
        for cluster in 0..<clusters { scratch.bounds[cluster] = scratch.splitStarts[cluster] }
        for index in 1..<max(1, clusters) {
            let value = scratch.bounds[index]
            var position = index
            while position > 0 && scratch.bounds[position - 1] > value {
                scratch.bounds[position] = scratch.bounds[position - 1]
                position -= 1
            }
            scratch.bounds[position] = value
        }
        for cluster in clusters...clusterCount { scratch.bounds[cluster] = histogram.count }
    }

    // MARK: Lloyd on the histogram

    /// First index in `[low, count]` whose value exceeds `threshold` (`count` if none),
    /// searched outward from `hint`: boundaries move little between iterations.
    @inline(__always)
    static func firstIndexAbove(
        _ threshold: Double, in histogram: SortedHistogram, low: Int, hint: Int
    ) -> Int {
        let values = histogram.values
        let count = histogram.count
        let position = min(max(hint, low), count)
        // Most boundaries stay put or move one place between iterations: test those first.
        if position > low && position < count {
            if values[position - 1] <= threshold {
                if values[position] > threshold { return position }
                if position + 1 == count || values[position + 1] > threshold { return position + 1 }
            } else if position - 1 == low || values[position - 2] <= threshold {
                return position - 1
            }
        }
        var lower: Int
        var upper: Int
        if position < count && values[position] <= threshold {
            // Answer is above `position`: gallop up.
            var step = 1
            lower = position + 1
            upper = min(count, position + step)
            while upper < count && values[upper] <= threshold {
                lower = upper + 1
                step <<= 1
                upper = min(count, position + step)
            }
        } else {
            // values[position] > threshold (or position == count): gallop down.
            var step = 1
            upper = position
            lower = max(low, position - step)
            while lower > low && values[lower] > threshold {
                upper = lower
                step <<= 1
                lower = max(low, position - step)
            }
        }
        // Invariant: answer in [lower, upper]; values[upper] > threshold or upper == count.
        while lower < upper {
            let middle = (lower + upper) >> 1
            if values[middle] > threshold { upper = middle } else { lower = middle + 1 }
        }
        return lower
    }

    /// From the initial `scratch.bounds`: Lloyd to a fixed point, then one swap round; when
    /// `full`, a windowed polish first and up to ``maximumSwapRounds`` rounds, each followed by
    /// another polish, while the error drops.
    static func refineWithLloyd(_ histogram: SortedHistogram, clusterCount: Int, full: Bool, scratch: KMeansScratch) {
        settle(histogram, clusterCount: clusterCount, scratch: scratch)
        if full { polishInWindows(histogram, clusterCount: clusterCount, scratch: scratch) }
        var currentCost = cost(histogram, clusterCount: clusterCount, scratch: scratch)
        for _ in 0..<(full ? maximumSwapRounds : 1) {
            guard
                let improved = swapClusters(
                    histogram, clusterCount: clusterCount, currentCost: currentCost, scratch: scratch)
            else { return }
            if full { polishInWindows(histogram, clusterCount: clusterCount, scratch: scratch) }
            currentCost = min(improved, cost(histogram, clusterCount: clusterCount, scratch: scratch))
        }
    }

    /// Swaps tried per round, best immediate benefit first.
    static let swapCandidates = 2

    /// Swap rounds of the full refinement: each moves one cluster from where it helps least to
    /// where it helps most, then settles again; kept only when the total error drops.
    static let maximumSwapRounds = 8

    /// Lloyd to a fixed point, re-seeding emptied clusters.
    static func settle(_ histogram: SortedHistogram, clusterCount: Int, scratch: KMeansScratch) {
        for _ in 0..<clusterCount {
            lloyd(histogram, clusterCount: clusterCount, scratch: scratch)
            guard reseedEmptyClusters(histogram, clusterCount: clusterCount, scratch: scratch) else { return }
        }
    }

    /// Escapes a Lloyd fixed point: merges the two neighbours whose merge costs least and
    /// splits (at its best point) the cluster whose split gains most, when the gain exceeds
    /// the cost; then settles with Lloyd. Returns the new cost if it is lower, otherwise
    /// restores the previous clusters and returns nil.
    static func swapClusters(
        _ histogram: SortedHistogram, clusterCount: Int, currentCost: Double, scratch: KMeansScratch
    ) -> Double? {
        guard clusterCount >= 3 else { return nil }
        let bounds = scratch.bounds
        // The three best splits, so that one outside any merged pair is always available.
        var topSplits = (-1, -1, -1)
        var topGains = (-1.0, -1.0, -1.0)
        for cluster in 0..<clusterCount {
            let (point, gain) = bestSplit(histogram, bounds[cluster], bounds[cluster + 1])
            scratch.splitPoints[cluster] = point
            if gain > topGains.0 {
                (topSplits.2, topGains.2) = (topSplits.1, topGains.1)
                (topSplits.1, topGains.1) = (topSplits.0, topGains.0)
                (topSplits.0, topGains.0) = (cluster, gain)
            } else if gain > topGains.1 {
                (topSplits.2, topGains.2) = (topSplits.1, topGains.1)
                (topSplits.1, topGains.1) = (cluster, gain)
            } else if gain > topGains.2 {
                (topSplits.2, topGains.2) = (cluster, gain)
            }
        }
        // Candidates: for each merged pair, the best split outside it; the immediate benefit
        // ranks them, but Lloyd's settling can turn a small loss into a gain, so the best
        // few are tried whatever their sign.
        // A fixed-size buffer: no allocation per group.
        let candidateCount = swapCandidates
        var candidates = SwapCandidates()
        for left in 0..<(clusterCount - 1) {
            let mergeCost =
                histogram.cost(bounds[left], bounds[left + 2]) - histogram.cost(bounds[left], bounds[left + 1])
                - histogram.cost(bounds[left + 1], bounds[left + 2])
            let split: (Int, Double) =
                topSplits.0 != left && topSplits.0 != left + 1
                ? (topSplits.0, topGains.0)
                : topSplits.1 != left && topSplits.1 != left + 1 ? (topSplits.1, topGains.1) : (topSplits.2, topGains.2)
            guard split.0 >= 0, split.1 > 0 else { continue }
            let benefit = split.1 - mergeCost
            candidates.offer(benefit: benefit, merge: left, split: split.0, keep: candidateCount)
        }
        let saved = scratch.nextBounds
        saved.update(from: bounds, count: clusterCount + 1)
        for rank in 0..<candidates.count {
            let candidate = candidates[rank]
            // Remove boundary merge + 1 and insert the split point, keeping bounds sorted.
            let splitPoint = scratch.splitPoints[candidate.split]
            var write = 0
            var inserted = false
            for read in 0...clusterCount where read != candidate.merge + 1 {
                if !inserted && splitPoint < saved[read] {
                    bounds[write] = splitPoint
                    write += 1
                    inserted = true
                }
                bounds[write] = saved[read]
                write += 1
            }
            settle(histogram, clusterCount: clusterCount, scratch: scratch)
            let newCost = cost(histogram, clusterCount: clusterCount, scratch: scratch)
            // Ignore gains at the level of rounding noise.
            if newCost < currentCost * (1 - 1e-12) { return newCost }
            bounds.update(from: saved, count: clusterCount + 1)
        }
        return nil
    }

    /// Lloyd iterations to a fixed point (or ``maximumLloydIterations``): every boundary at
    /// the midpoint of the previous iteration's means (ties to the lower cluster, as in index
    /// assignment), then the means of the clusters whose boundaries moved.
    ///
    /// A boundary both of whose clusters kept their boundaries would land where it is, so
    /// only boundaries next to a changed cluster are searched again: on group-8 bfloat16
    /// weights, half of them over some 40 iterations a call. Same steps, same fixed point.
    static func lloyd(_ histogram: SortedHistogram, clusterCount: Int, scratch: KMeansScratch) {
        let bounds = scratch.bounds
        let centroids = scratch.centroids
        for cluster in 0..<clusterCount {
            let start = bounds[cluster]
            let end = bounds[cluster + 1]
            // An empty cluster keeps a centroid between its neighbours' values.
            centroids[cluster] =
                end > start ? histogram.mean(start, end) : histogram.values[min(start, histogram.count - 1)]
        }
        guard clusterCount > 64 else {
            lloydInOneWord(histogram, clusterCount: clusterCount, bounds: bounds, centroids: centroids)
            return
        }
        // Bit `c & 63` of word `c >> 6`: cluster `c` changed in the last iteration / this one.
        let changed = scratch.changedClusters
        let changing = scratch.changingClusters
        let words = (clusterCount + 63) >> 6
        for word in 0..<words { changed[word] = ~0 }
        for _ in 0..<maximumLloydIterations {
            var anyMoved = false
            for word in 0..<words {
                changing[word] = 0
                // Boundary `b` separates clusters `b - 1` and `b`; boundary 0 never moves.
                let carry = word > 0 ? changed[word - 1] >> 63 : 0
                var search = (changed[word] | changed[word] << 1 | carry) & (word == 0 ? ~1 : ~0)
                while search != 0 {
                    let boundary = word << 6 | search.trailingZeroBitCount
                    guard boundary < clusterCount else { break }
                    search &= search &- 1
                    let midpoint = (centroids[boundary - 1] + centroids[boundary]) * 0.5
                    let bound = firstIndexAbove(
                        midpoint, in: histogram, low: bounds[boundary - 1], hint: bounds[boundary])
                    guard bound != bounds[boundary] else { continue }
                    bounds[boundary] = bound
                    anyMoved = true
                    let lower = boundary - 1
                    changing[lower >> 6] |= 1 &<< UInt64(lower & 63)
                    changing[word] |= 1 &<< UInt64(boundary & 63)
                }
            }
            guard anyMoved else { return }
            for word in 0..<words {
                var clusters = changing[word]
                changed[word] = clusters
                while clusters != 0 {
                    let cluster = word << 6 | clusters.trailingZeroBitCount
                    clusters &= clusters &- 1
                    let start = bounds[cluster]
                    let end = bounds[cluster + 1]
                    if end > start { centroids[cluster] = histogram.mean(start, end) }
                }
            }
        }
    }

    /// ``lloyd(_:clusterCount:scratch:)`` after its initial means, for at most 64 clusters (every
    /// palette of up to 6 bits): the cluster sets are single words kept in registers. The same
    /// searches in the same order, so the same steps and fixed point.
    @inline(__always)
    private static func lloydInOneWord(
        _ histogram: SortedHistogram, clusterCount: Int, bounds: UnsafeMutablePointer<Int>,
        centroids: UnsafeMutablePointer<Double>
    ) {
        let prefixCount = histogram.prefixCount
        let prefixSum = histogram.prefixSum
        // Boundaries 1..<clusterCount; boundary 0 never moves.
        let movable: UInt64 = (clusterCount == 64 ? ~0 : (1 &<< UInt64(clusterCount)) &- 1) & ~1
        @inline(__always) func updateMean(_ cluster: Int) {
            let start = bounds[cluster]
            let end = bounds[cluster &+ 1]
            if end > start {
                centroids[cluster] = (prefixSum[end] - prefixSum[start]) / (prefixCount[end] - prefixCount[start])
            }
        }
        var changed: UInt64 = ~0
        for _ in 0..<maximumLloydIterations {
            var changing: UInt64 = 0
            // Boundary `b` separates clusters `b - 1` and `b`.
            let searched = (changed | changed &<< 1) & movable
            var search = searched
            while search != 0 {
                let boundary = search.trailingZeroBitCount
                search &= search &- 1
                let midpoint = (centroids[boundary &- 1] + centroids[boundary]) * 0.5
                let bound = firstIndexAbove(
                    midpoint, in: histogram, low: bounds[boundary &- 1], hint: bounds[boundary])
                if bound != bounds[boundary] {
                    bounds[boundary] = bound
                    changing |= 3 &<< UInt64(boundary &- 1)
                }
                // Both bounds of cluster `boundary - 1` are final for this iteration and later
                // searches read only the centroids above it: its mean can be updated now.
                if changing & (1 &<< UInt64(boundary &- 1)) != 0 { updateMean(boundary &- 1) }
            }
            guard changing != 0 else { return }
            changed = changing
            // The clusters not updated yet: those whose upper boundary was not searched.
            var clusters = changing & ~(searched >> 1)
            while clusters != 0 {
                updateMean(clusters.trailingZeroBitCount)
                clusters &= clusters &- 1
            }
        }
    }

    /// Replaces empty clusters by splitting non-empty ones; returns whether anything changed.
    static func reseedEmptyClusters(_ histogram: SortedHistogram, clusterCount: Int, scratch: KMeansScratch) -> Bool {
        var nonEmpty = 0
        for cluster in 0..<clusterCount where scratch.bounds[cluster + 1] > scratch.bounds[cluster] {
            scratch.splitStarts[nonEmpty] = scratch.bounds[cluster]
            scratch.splitEnds[nonEmpty] = scratch.bounds[cluster + 1]
            nonEmpty += 1
        }
        guard nonEmpty < clusterCount else { return false }
        for cluster in 0..<nonEmpty {
            (scratch.splitPoints[cluster], scratch.splitGains[cluster]) =
                bestSplit(histogram, scratch.splitStarts[cluster], scratch.splitEnds[cluster])
        }
        splitIntoBounds(
            histogram, clusters: nonEmpty, clusterCount: clusterCount, scratch: scratch, tiesToLeftmost: false)
        return true
    }

    // MARK: Dynamic programme over windows

    /// Optimal clusters among those whose boundaries lie in windows: boundary `j` (the start
    /// of cluster `j`) in `windowLow[j]...windowHigh[j]`, windows ascending on both ends,
    /// boundary 0 at 0 and boundary `clusterCount` at `count`. Full windows give the exact
    /// optimum; narrow windows around a solution give the best solution nearby.
    ///
    /// `best[j][i]` = least error of the first `i` values in `j` clusters; split points are
    /// monotone in `i` (the cost is Monge), so each row is filled by divide and conquer in
    /// O(window · log window). Ties take the leftmost split. Writes `scratch.bounds`.
    static func windowedBounds(_ histogram: SortedHistogram, clusterCount: Int, scratch: KMeansScratch) {
        let low = scratch.windowLow
        let high = scratch.windowHigh
        var widest = 1
        var choiceCount = 0
        for boundary in 0...clusterCount {
            let width = high[boundary] - low[boundary] + 1
            widest = max(widest, width)
            choiceCount += width
        }
        if scratch.previousRow.count < widest { scratch.previousRow = [Double](repeating: 0, count: widest) }
        if scratch.table.count < widest { scratch.table = [Double](repeating: 0, count: widest) }
        if scratch.choices.count < choiceCount { scratch.choices = [Int32](repeating: 0, count: choiceCount) }
        scratch.previousRow.withUnsafeMutableBufferPointer { previousBuffer in
            scratch.table.withUnsafeMutableBufferPointer { currentBuffer in
                scratch.choices.withUnsafeMutableBufferPointer { choicesBuffer in
                    guard var previous = previousBuffer.baseAddress, var current = currentBuffer.baseAddress,
                        let choices = choicesBuffer.baseAddress
                    else { return }
                    // Row 0: no values in no clusters.
                    previous[0] = 0
                    var rowStart = 1
                    for boundary in 1...clusterCount {
                        let row = DynamicProgrammingRow(
                            histogram: histogram, previous: previous, current: current, choices: choices + rowStart,
                            rowLow: low[boundary], optionLow: low[boundary - 1])
                        row.fill(low[boundary], high[boundary], low[boundary - 1], high[boundary - 1])
                        rowStart += high[boundary] - low[boundary] + 1
                        swap(&previous, &current)
                    }
                    // Walk the choices back from the full range.
                    var end = histogram.count
                    scratch.bounds[clusterCount] = end
                    var rowEnd = rowStart
                    for boundary in stride(from: clusterCount, through: 1, by: -1) {
                        let rowLow = low[boundary]
                        let rowBegin = rowEnd - (high[boundary] - rowLow + 1)
                        end = Int(choices[rowBegin + end - rowLow])
                        scratch.bounds[boundary - 1] = end
                        rowEnd = rowBegin
                    }
                }
            }
        }
    }

    /// Exact optimum: every boundary may be anywhere that leaves no cluster empty.
    static func exactBounds(_ histogram: SortedHistogram, clusterCount: Int, scratch: KMeansScratch) {
        for boundary in 0...clusterCount {
            scratch.windowLow[boundary] = boundary == clusterCount ? histogram.count : boundary
            scratch.windowHigh[boundary] = boundary == 0 ? 0 : histogram.count - (clusterCount - boundary)
        }
        windowedBounds(histogram, clusterCount: clusterCount, scratch: scratch)
    }

    /// Half-width of the windows in the first round of ``polishInWindows``.
    static let polishRadius = 16
    /// Reach, in later rounds, of a boundary that did not end on its window's edge.
    static let settledRadius = 2
    /// Rounds of ``polishInWindows`` at most: only a guard (each round's windows hold the current
    /// clusters, so the error never rises). A boundary far from its best place moves at most
    /// twice ``polishRadius`` places a round: a limit of 8 rounds stopped 1 random group of 20
    /// short (up to 2 % above where more rounds went), and 38 of 100 of 24,576 weights at 64 entries.
    static let maximumPolishRounds = 256

    /// Improves `scratch.bounds` by repeatedly re-solving optimally with every boundary free
    /// to move within a window, until no boundary ends on the edge of its window. The first
    /// round gives every boundary ``polishRadius`` places each way; later rounds reach twice
    /// as far past an edge a boundary ended on, and only ``settledRadius`` places otherwise,
    /// since the rest were already optimal for their neighbourhood: most of a round's cost
    /// goes where the solution is still moving. This finds coordinated moves of many
    /// boundaries that Lloyd (one midpoint at a time) cannot, at O(k · w · log w) per round.
    static func polishInWindows(_ histogram: SortedHistogram, clusterCount: Int, scratch: KMeansScratch) {
        let count = histogram.count
        let low = scratch.windowLow
        let high = scratch.windowHigh
        let reachBelow = scratch.reachBelow
        let reachAbove = scratch.reachAbove
        for boundary in 0...clusterCount {
            reachBelow[boundary] = polishRadius
            reachAbove[boundary] = polishRadius
        }
        for _ in 0..<maximumPolishRounds {
            low[0] = 0
            high[0] = 0
            low[clusterCount] = count
            high[clusterCount] = count
            for boundary in 1..<clusterCount {
                let current = scratch.bounds[boundary]
                low[boundary] = max(current - reachBelow[boundary], boundary)
                high[boundary] = min(current + reachAbove[boundary], count - (clusterCount - boundary))
            }
            // Keep both ends of the windows ascending (by widening, which never excludes the
            // current solution).
            for boundary in 1...clusterCount { high[boundary] = max(high[boundary], high[boundary - 1]) }
            for boundary in stride(from: clusterCount - 1, through: 0, by: -1) {
                low[boundary] = min(low[boundary], low[boundary + 1])
            }
            windowedBounds(histogram, clusterCount: clusterCount, scratch: scratch)
            var onEdge = false
            for boundary in 1..<clusterCount {
                let bound = scratch.bounds[boundary]
                let atLowEdge = bound == low[boundary] && low[boundary] != boundary
                let atHighEdge = bound == high[boundary] && high[boundary] != count - (clusterCount - boundary)
                reachBelow[boundary] = atLowEdge ? 2 * polishRadius : settledRadius
                reachAbove[boundary] = atHighEdge ? 2 * polishRadius : settledRadius
                onEdge = onEdge || atLowEdge || atHighEdge
            }
            guard onEdge else { return }
        }
    }
}

/// One row of the windowed dynamic programme, filled by divide and conquer.
private struct DynamicProgrammingRow {
    let histogram: SortedHistogram
    /// Best costs of the previous row, indexed from `optionLow`.
    let previous: UnsafeMutablePointer<Double>
    /// Best costs of this row, indexed from `rowLow`.
    let current: UnsafeMutablePointer<Double>
    /// Chosen split of each end of this row, indexed from `rowLow`.
    let choices: UnsafeMutablePointer<Int32>
    let rowLow: Int
    let optionLow: Int

    /// Fills ends `first...last`, whose optimal splits lie in `fromOption...toOption`.
    func fill(_ first: Int, _ last: Int, _ fromOption: Int, _ toOption: Int) {
        guard first <= last else { return }
        let end = (first + last) >> 1
        var bestOption = fromOption
        var bestCost = Double.infinity
        let lastOption = min(toOption, end - 1)
        if fromOption <= lastOption {
            let endCount = histogram.prefixCount[end]
            let endSum = histogram.prefixSum[end]
            let endSquares = histogram.prefixSquares[end]
            for option in fromOption...lastOption {
                let weight = endCount - histogram.prefixCount[option]
                let sum = endSum - histogram.prefixSum[option]
                let cost = (endSquares - histogram.prefixSquares[option]) - sum * sum / weight
                let candidate = previous[option - optionLow] + cost
                if candidate < bestCost {
                    bestCost = candidate
                    bestOption = option
                }
            }
        }
        current[end - rowLow] = bestCost
        choices[end - rowLow] = Int32(truncatingIfNeeded: bestOption)
        fill(first, end - 1, fromOption, bestOption)
        fill(end + 1, last, bestOption, toOption)
    }
}

/// The best few swap candidates, kept sorted by benefit without allocating.
private struct SwapCandidates {
    private var entries: (Entry, Entry, Entry) = (Entry(), Entry(), Entry())
    private(set) var count = 0

    struct Entry {
        var benefit = -Double.infinity
        var merge = -1
        var split = -1
    }

    subscript(rank: Int) -> Entry {
        switch rank {
        case 0: return entries.0
        case 1: return entries.1
        default: return entries.2
        }
    }

    /// Inserts the candidate if it is among the best `keep` (at most 3) seen.
    mutating func offer(benefit: Double, merge: Int, split: Int, keep: Int) {
        var entry = Entry(benefit: benefit, merge: merge, split: split)
        let limit = min(keep, 3)
        for rank in 0..<limit {
            if rank >= count || entry.benefit > self[rank].benefit {
                let displaced = self[rank]
                set(rank, entry)
                if rank >= count {
                    count += 1
                    return
                }
                entry = displaced
            }
        }
    }

    private mutating func set(_ rank: Int, _ entry: Entry) {
        switch rank {
        case 0: entries.0 = entry
        case 1: entries.1 = entry
        default: entries.2 = entry
        }
    }
}
