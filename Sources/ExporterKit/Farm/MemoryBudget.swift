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

    /// A budget of `capacity` bytes (nil: unlimited).
    public init(capacity: Int?) { self.capacity = capacity }

    /// The most exports that held memory at once so far.
    public var peakHolders: Int { condition.withLock { mostHolders } }

    /// Holds `bytes`, first waiting while other holders leave too little of the capacity.
    /// - Parameter waiting: called once, before waiting, with the bytes held by others and their count.
    public func hold(_ bytes: Int, waiting: (_ heldBytes: Int, _ holders: Int) -> Void = { _, _ in }) {
        condition.lock()
        defer { condition.unlock() }
        var announced = false
        while holders > 0, let capacity, bytes > capacity - held {
            if !announced {
                waiting(held, holders)
                announced = true
            }
            condition.wait()
        }
        held += bytes
        holders += 1
        mostHolders = max(mostHolders, holders)
    }

    /// Gives back `bytes` held by ``hold(_:waiting:)``.
    public func release(_ bytes: Int) {
        condition.withLock {
            held -= bytes
            holders -= 1
        }
        condition.broadcast()
    }
}
