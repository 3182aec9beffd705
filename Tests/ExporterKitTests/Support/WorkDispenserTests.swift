import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("work dispenser")
struct WorkDispenserTests {
    @Test("every index is handed out exactly once, in ascending batches", arguments: [1, 3, 16])
    func everyIndexOnce(batch: Int) {
        let count = 1000
        let seen = UnsafeMutableBufferPointer<Int>.allocate(capacity: count)
        seen.initialize(repeating: 0)
        defer { seen.deallocate() }
        let shared = SeenCounts(buffer: seen)
        WorkDispenser.perform(count: count, workers: 3, batch: batch, setUp: { $0 }) { _, index in
            shared.buffer[index] += 1
        }
        #expect(seen.allSatisfy { $0 == 1 })

        let dispenser = WorkDispenser(count: 10, batch: batch)
        var ranges: [Range<Int>] = []
        while let range = dispenser.claim() { ranges.append(range) }
        #expect(ranges.first?.lowerBound == 0)
        #expect(ranges.last?.upperBound == 10)
        #expect(zip(ranges, ranges.dropFirst()).allSatisfy { $0.upperBound == $1.lowerBound })
        #expect(ranges.allSatisfy { $0.count == min(batch, 10 - $0.lowerBound) })
    }

    @Test("each worker's state is set up once and torn down once")
    func setUpAndTearDown() {
        let log = Locked<[String]>([])
        WorkDispenser.perform(
            count: 50, workers: 4,
            setUp: { worker in
                log.mutate { $0.append("up \(worker)") }
                return worker
            },
            tearDown: { worker in log.mutate { $0.append("down \(worker)") } }
        ) { _, _ in }
        let entries = log.value
        #expect(entries.filter { $0.hasPrefix("up") }.count == 4)
        #expect(Set(entries.filter { $0.hasPrefix("down") }) == Set((0..<4).map { "down \($0)" }))
    }
}

/// Each index is written by the one worker that claimed it.
private struct SeenCounts: @unchecked Sendable {
    let buffer: UnsafeMutableBufferPointer<Int>
}
