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

    @Test("a hold behind one waiting says so again when another one waiting comes first in line in its turn")
    func waitsBehindAnother() {
        let budget = MemoryBudget(capacity: 100)
        budget.hold(40, label: "first")
        let done = DispatchGroup()
        let aWaiting = DispatchSemaphore(value: 0)
        let aHolding = DispatchSemaphore(value: 0)
        DispatchQueue.global().async(group: done) {
            budget.hold(70, label: "a") { _ in aWaiting.signal() }
            aHolding.signal()
        }
        #expect(aWaiting.wait(timeout: .now() + 10) == .success)
        let bWaiting = DispatchSemaphore(value: 0)
        DispatchQueue.global().async(group: done) {
            budget.hold(65, label: "b") { _ in bWaiting.signal() }
            budget.release(65)
        }
        #expect(bWaiting.wait(timeout: .now() + 10) == .success)
        let announced = Locked<[MemoryBudget.Wait]>([])
        let smallWaiting = DispatchSemaphore(value: 0)
        DispatchQueue.global().async(group: done) {
            // 40 + 5 fits, and 70 + 5 does: it waits behind 'a', then behind 'b', which does not fit beside 'a'.
            budget.hold(5, label: "small") { wait in
                announced.mutate { $0.append(wait) }
                smallWaiting.signal()
            }
            budget.release(5)
        }
        #expect(smallWaiting.wait(timeout: .now() + 10) == .success)
        #expect(announced.value == [.behind(label: "a", bytes: 70)])
        budget.release(40)
        #expect(aHolding.wait(timeout: .now() + 10) == .success)
        #expect(smallWaiting.wait(timeout: .now() + 10) == .success)
        #expect(announced.value == [.behind(label: "a", bytes: 70), .behind(label: "b", bytes: 65)])
        budget.release(70)
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(announced.value.count == 2)
    }

    @Test("a hold says nothing while the one first in line fits: that one is about to proceed")
    func silentBehindOneAboutToProceed() {
        let budget = MemoryBudget(capacity: 100)
        budget.hold(60, label: "first")
        let done = DispatchGroup()
        let aWaiting = DispatchSemaphore(value: 0)
        let letAGo = DispatchSemaphore(value: 0)
        // Threads of their own: a blocked hold could hold up a worker of Dispatch's pool for the next.
        done.enter()
        Thread.detachNewThread {
            // Kept in its announcement: first in line, it fits once 'first' goes, but has not proceeded.
            budget.hold(50, label: "a") { _ in
                aWaiting.signal()
                letAGo.wait()
            }
            budget.release(50)
            done.leave()
        }
        #expect(aWaiting.wait(timeout: .now() + 10) == .success)
        budget.release(60)
        let announced = Locked<[MemoryBudget.Wait]>([])
        let smallHolding = DispatchSemaphore(value: 0)
        done.enter()
        Thread.detachNewThread {
            budget.hold(10, label: "small") { wait in announced.mutate { $0.append(wait) } }
            smallHolding.signal()
            budget.release(10)
            done.leave()
        }
        #expect(smallHolding.wait(timeout: .now() + 0.2) == .timedOut)
        letAGo.signal()
        #expect(smallHolding.wait(timeout: .now() + 10) == .success)
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(announced.value == [])
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
