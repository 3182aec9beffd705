import Dispatch
import Foundation

/// SplitMix64: a tiny seeded generator so test and bench tensors are the same on every run.
public struct SplitMix64: RandomNumberGenerator {
    public var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    public mutating func nextUnit() -> Double {
        (Double(next() >> 11) + 0.5) / 9_007_199_254_740_992
    }
}

/// Weights shaped like an LLM linear layer: Laplace bulk (scale 0.02), a heavier
/// Student-t-like tail on some rows, and a few outliers of ±5–10.
public enum HeavyTailedWeights {
    public static func make(rows: Int, columns: Int, seed: UInt64, outlierRate: Double = 0.0005) -> [Float16] {
        var generator = SplitMix64(seed: seed)
        var weights = [Float16]()
        weights.reserveCapacity(rows * columns)
        for row in 0..<rows {
            // Rows differ in scale, as output channels do; grouped LUTs should exploit that.
            let rowScale = 0.02 * (0.5 + 1.5 * Double((row &* 7919) % 13) / 12)
            for _ in 0..<columns {
                let uniform = generator.nextUnit()
                var value: Double
                if uniform < outlierRate {
                    let magnitude = 5 + 5 * generator.nextUnit()
                    value = generator.nextUnit() < 0.5 ? -magnitude : magnitude
                } else {
                    // Laplace, with a ratio of two uniforms folded in for a heavier tail.
                    let u = generator.nextUnit() - 0.5
                    value = -(u < 0 ? -1.0 : 1.0) * log(1 - 2 * abs(u)) * rowScale
                    if generator.nextUnit() < 0.05 { value *= 1 / max(0.05, generator.nextUnit()) }
                }
                weights.append(Float16(value))
            }
        }
        return weights
    }
}

/// The straightforward baseline the palettiser must not lose to: Lloyd's k-means on the
/// raw weights from a seeded k-means++ initialisation, run to a fixed point.
public enum ReferenceKMeans {
    /// Centroids (ascending) for `values`.
    public static func lloydPlusPlus(_ values: [Double], clusters: Int, seed: UInt64, maximumIterations: Int = 300)
        -> [Double]
    {
        var generator = SplitMix64(seed: seed)
        var centroids = [values[Int(generator.next() % UInt64(values.count))]]
        var distances = values.map { ($0 - centroids[0]) * ($0 - centroids[0]) }
        while centroids.count < clusters {
            let total = distances.reduce(0, +)
            guard total > 0 else { break }
            var target = generator.nextUnit() * total
            var chosen = values.count - 1
            for (index, distance) in distances.enumerated() {
                target -= distance
                if target <= 0 {
                    chosen = index
                    break
                }
            }
            let centroid = values[chosen]
            centroids.append(centroid)
            for index in values.indices {
                distances[index] = min(distances[index], (values[index] - centroid) * (values[index] - centroid))
            }
        }
        var assignment = [Int](repeating: 0, count: values.count)
        for _ in 0..<maximumIterations {
            var changed = false
            for (index, value) in values.enumerated() {
                var best = 0
                var bestDistance = Double.infinity
                for (cluster, centroid) in centroids.enumerated() {
                    let distance = (value - centroid) * (value - centroid)
                    if distance < bestDistance {
                        bestDistance = distance
                        best = cluster
                    }
                }
                if assignment[index] != best {
                    assignment[index] = best
                    changed = true
                }
            }
            var sums = [Double](repeating: 0, count: centroids.count)
            var counts = [Double](repeating: 0, count: centroids.count)
            for (index, value) in values.enumerated() {
                sums[assignment[index]] += value
                counts[assignment[index]] += 1
            }
            for cluster in centroids.indices where counts[cluster] > 0 {
                centroids[cluster] = sums[cluster] / counts[cluster]
            }
            if !changed { break }
        }
        return centroids.sorted()
    }

    /// Squared error of `values` against the nearest Float16-rounded centroid: what a
    /// palettiser using these centroids as its LUT would store.
    public static func palettizedError(_ values: [Double], centroids: [Double]) -> Double {
        let lut = centroids.map { Double(Float(Float16($0))) }
        var total = 0.0
        for value in values {
            var best = Double.infinity
            for entry in lut { best = min(best, (value - entry) * (value - entry)) }
            total += best
        }
        return total
    }

    /// Reference error of a whole tensor palettised with `groupRows` rows per LUT; groups
    /// are shared among `workers` threads and their errors summed in order, so the total does
    /// not depend on them.
    public static func tensorError(
        _ weights: [Float16], rows: Int, columns: Int, groupRows: Int, bits: Int, seed: UInt64, workers: Int = 1
    ) -> Double {
        let groups = (rows + groupRows - 1) / groupRows
        var errors = [Double](repeating: 0, count: groups)
        errors.withUnsafeMutableBufferPointer { output in
            let slots = GroupErrors(base: output.baseAddress)
            DispatchQueue.concurrentPerform(iterations: max(1, min(workers, groups))) { worker in
                for group in stride(from: worker, to: groups, by: max(1, min(workers, groups))) {
                    let start = group * groupRows
                    let end = min(rows, start + groupRows)
                    let values = weights[(start * columns)..<(end * columns)].map { Double(Float($0)) }
                    let centroids = lloydPlusPlus(values, clusters: 1 << bits, seed: seed &+ UInt64(start))
                    slots.base?[group] = palettizedError(values, centroids: centroids)
                }
            }
        }
        return errors.reduce(0, +)
    }

    /// Each group's error slot, written by the one thread that takes the group.
    private struct GroupErrors: @unchecked Sendable {
        let base: UnsafeMutablePointer<Double>?
    }
}
