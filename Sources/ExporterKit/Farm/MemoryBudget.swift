import Foundation

/// The memory a farm's concurrent exports may take together: each export holds its
/// conversion forecast while it runs, and one that does not fit beside the running ones
/// waits for them to end.
///
/// Why: every export checks its forecast against the memory available when it starts, so
/// exports started together each see all of it and could together take more. An export
/// that would not fit even alone still starts once nothing else runs: it then refuses
/// itself with the export's own message.
public final class MemoryBudget: @unchecked Sendable {
    /// Bytes available to the farm's exports together; nil when unknown (no limit).
    public let capacity: Int?
    private let condition = NSCondition()
    private var held = 0
    private var holders = 0
    private var mostHolders = 0
    /// Tickets of the holds waiting, in arrival order: the first goes first, so a large export
    /// is not overtaken for ever by smaller ones.
    private var queue: [Int] = []
    private var nextTicket = 0

    /// A budget of `capacity` bytes (nil: unlimited).
    public init(capacity: Int?) { self.capacity = capacity }

    /// The most exports that held memory at once so far.
    public var peakHolders: Int { condition.withLock { mostHolders } }

    /// Holds `bytes` once the holds that came first have theirs and `bytes` fits beside what is held.
    /// - Parameter waiting: called once (outside the lock) when it has to wait for memory, with
    ///   the bytes held by others and their count.
    public func hold(_ bytes: Int, waiting: (_ heldBytes: Int, _ holders: Int) -> Void = { _, _ in }) {
        condition.lock()
        let ticket = nextTicket
        nextTicket += 1
        queue.append(ticket)
        var announced = false
        while queue.first != ticket || !fits(bytes) {
            if !announced, !fits(bytes) {
                announced = true
                let (heldNow, holdersNow) = (held, holders)
                condition.unlock()
                waiting(heldNow, holdersNow)
                condition.lock()
                continue
            }
            condition.wait()
        }
        queue.removeFirst()
        held = held.saturatingAdding(bytes)
        holders += 1
        mostHolders = max(mostHolders, holders)
        condition.unlock()
        // The next in line may fit too.
        condition.broadcast()
    }

    /// Whether `bytes` may be held now: alone always, else within the capacity.
    private func fits(_ bytes: Int) -> Bool {
        guard holders > 0, let capacity else { return true }
        return held.saturatingAdding(bytes) <= capacity
    }

    /// Gives back `bytes` held by ``hold(_:waiting:)``.
    public func release(_ bytes: Int) {
        condition.withLock {
            held = max(0, held - bytes)
            holders -= 1
        }
        condition.broadcast()
    }
}
