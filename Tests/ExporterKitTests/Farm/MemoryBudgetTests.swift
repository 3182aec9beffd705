import Dispatch
import Foundation
import TestSupport
import Testing

@testable import ExporterKit

@Suite("farm: the memory budget of concurrent exports")
struct MemoryBudgetTests {
    @Test("holds that fit together do not wait")
    func fitting() {
        let budget = MemoryBudget(capacity: 100)
        var waited = false
        budget.hold(40) { _ in waited = true }
        budget.hold(60) { _ in waited = true }
        #expect(!waited)
        #expect(budget.peakHolders == 2)
        budget.release(40)
        budget.release(60)
    }

    @Test("a hold that does not fit beside another waits for its release, then proceeds")
    func waitsForRelease() {
        let budget = MemoryBudget(capacity: 100)
        budget.hold(60)
        let announced = Locked<[MemoryBudget.Wait]>([])
        let waiting = DispatchSemaphore(value: 0)
        let acquired = DispatchSemaphore(value: 0)
        let holding = Locked(false)
        DispatchQueue.global().async {
            budget.hold(41) { wait in
                announced.mutate { $0.append(wait) }
                waiting.signal()
            }
            holding.mutate { $0 = true }
            acquired.signal()
        }
        #expect(waiting.wait(timeout: .now() + 10) == .success)
        #expect(announced.value == [.memory(heldBytes: 60, holders: 1)])
        // Whatever the timing, the second hold cannot proceed while the first is held.
        #expect(acquired.wait(timeout: .now() + 0.1) == .timedOut)
        #expect(!holding.value)
        budget.release(60)
        #expect(acquired.wait(timeout: .now() + 10) == .success)
        #expect(budget.peakHolders == 1)
        budget.release(41)
        // Freed memory serves the next hold at once.
        budget.hold(100)
        #expect(budget.peakHolders == 1)
    }

    @Test("holds are served in arrival order: a large one waiting is not overtaken by a small one that would fit")
    func arrivalOrder() {
        let budget = MemoryBudget(capacity: 100)
        budget.hold(50)
        let order = Locked<[Int]>([])
        let largeWaiting = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        DispatchQueue.global().async(group: done) {
            budget.hold(80) { _ in largeWaiting.signal() }
            order.mutate { $0.append(80) }
            budget.release(80)
        }
        #expect(largeWaiting.wait(timeout: .now() + 10) == .success)
        DispatchQueue.global().async(group: done) {
            // 50 + 30 fits, but the 80 came first.
            budget.hold(30)
            order.mutate { $0.append(30) }
            budget.release(30)
        }
        usleep(100_000)
        #expect(order.value == [])
        budget.release(50)
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(order.value == [80, 30])
    }

    @Test("a hold that fits but came after one waiting says which one it waits behind, then why it waits next")
    func waitsBehindNamed() {
        let budget = MemoryBudget(capacity: 100)
        budget.hold(50, label: "first")
        let largeWaiting = DispatchSemaphore(value: 0)
        let largeHolding = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        DispatchQueue.global().async(group: done) {
            budget.hold(80, label: "large") { _ in largeWaiting.signal() }
            largeHolding.signal()
        }
        #expect(largeWaiting.wait(timeout: .now() + 10) == .success)
        let announced = Locked<[MemoryBudget.Wait]>([])
        let smallWaiting = DispatchSemaphore(value: 0)
        let smallHolding = DispatchSemaphore(value: 0)
        DispatchQueue.global().async(group: done) {
            // 50 + 30 fits: it waits behind the 80 all the same, and says so.
            budget.hold(30, label: "small") { wait in
                announced.mutate { $0.append(wait) }
                smallWaiting.signal()
            }
            smallHolding.signal()
        }
        #expect(smallWaiting.wait(timeout: .now() + 10) == .success)
        #expect(announced.value == [.behind(label: "large", bytes: 80)])
        budget.release(50)
        #expect(largeHolding.wait(timeout: .now() + 10) == .success)
        // Now first in line, it does not fit beside the 80: another reason, said too.
        #expect(smallWaiting.wait(timeout: .now() + 10) == .success)
        #expect(announced.value == [.behind(label: "large", bytes: 80), .memory(heldBytes: 80, holders: 1)])
        #expect(smallHolding.wait(timeout: .now() + 0.1) == .timedOut)
        budget.release(80)
        #expect(smallHolding.wait(timeout: .now() + 10) == .success)
        budget.release(30)
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(announced.value.count == 2)
    }

    @Test("a hold larger than the capacity proceeds alone; no capacity means no limit")
    func aloneOrUnlimited() {
        let small = MemoryBudget(capacity: 10)
        var waited = false
        small.hold(500) { _ in waited = true }
        #expect(!waited)
        #expect(small.peakHolders == 1)
        let unlimited = MemoryBudget(capacity: nil)
        for _ in 0..<3 { unlimited.hold(Int.max / 4) { _ in waited = true } }
        #expect(!waited)
        #expect(unlimited.peakHolders == 3)
    }
}
