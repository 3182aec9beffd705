import Dispatch
import Foundation

/// Hands out the indices `0..<count` in ascending batches to whichever worker asks next.
///
/// Why: an export runs its reader and writer threads beside the compressor's workers, so a
/// fixed split (worker `w` takes `w, w + n, …`) leaves one worker idle at the end while the
/// other, sharing its core, finishes late. Results never depend on which worker took what.
final class WorkDispenser: @unchecked Sendable {
    private let lock = NSLock()
    private var next = 0
    private let count: Int
    private let batch: Int

    init(count: Int, batch: Int = 1) {
        self.count = count
        self.batch = max(1, batch)
    }

    /// The next batch of indices, or nil when all are taken.
    func claim() -> Range<Int>? {
        lock.lock()
        defer { lock.unlock() }
        guard next < count else { return nil }
        let start = next
        next = min(count, start + batch)
        return start..<next
    }

    /// Runs `body(worker, index)` for every index on `workers` threads, each taking the next
    /// batch as it finishes one; `setUp(worker)` makes each worker's scratch state first and
    /// `tearDown` receives it when the worker is done.
    static func perform<State>(
        count: Int, workers: Int, batch: Int = 1, setUp: (Int) -> State, tearDown: (State) -> Void = { _ in },
        body: (State, Int) -> Void
    ) {
        let dispenser = WorkDispenser(count: count, batch: batch)
        DispatchQueue.concurrentPerform(iterations: max(1, min(workers, count))) { worker in
            let state = setUp(worker)
            while let indices = dispenser.claim() {
                for index in indices { body(state, index) }
            }
            tearDown(state)
        }
    }
}

/// One result per index of a ``WorkDispenser/perform(count:workers:batch:setUp:tearDown:body:)``:
/// each slot is written by the one worker that took its index, and read once all are done.
final class WorkerResults<Value>: @unchecked Sendable {
    // @unchecked: workers write distinct slots, and nothing reads until `perform` returns.
    private let slots: UnsafeMutableBufferPointer<Value>

    /// `count` slots holding `initial`.
    init(count: Int, initial: Value) {
        slots = .allocate(capacity: count)
        slots.initialize(repeating: initial)
    }

    deinit {
        slots.deinitialize()
        slots.deallocate()
    }

    subscript(index: Int) -> Value {
        get { slots[index] }
        set { slots[index] = newValue }
    }

    /// Every slot, in index order.
    var values: [Value] { Array(slots) }
}
