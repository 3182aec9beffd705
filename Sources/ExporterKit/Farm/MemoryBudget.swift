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
    /// Why a hold waits.
    public enum Wait: Equatable, Sendable {
        /// It does not fit beside the running exports' holds: `heldBytes` held by `holders`.
        case memory(heldBytes: Int, holders: Int)
        /// It fits beside them, but the hold `label` of `bytes`, which came first, waits for memory:
        /// holds are served in arrival order.
        case behind(label: String, bytes: Int)
    }

    /// Bytes available to the farm's exports together; nil when unknown (no limit).
    public let capacity: Int?
    private let condition = NSCondition()
    private var held = 0
    private var holders = 0
    private var mostHolders = 0
    /// The holds waiting, in arrival order: the first goes first, so a large export is not
    /// overtaken for ever by smaller ones.
    private var queue: [(ticket: Int, label: String, bytes: Int)] = []
    private var nextTicket = 0

    /// A budget of `capacity` bytes (nil: unlimited).
    public init(capacity: Int?) { self.capacity = capacity }

    /// The most exports that held memory at once so far.
    public var peakHolders: Int { condition.withLock { mostHolders } }

    /// Holds `bytes` once the holds that came first have theirs and `bytes` fits beside what is held.
    /// - Parameters:
    ///   - label: names this hold in another one's ``Wait/behind(label:bytes:)``.
    ///   - waiting: called (outside the lock) when it has to wait, and again when the reason
    ///     changes: from memory to another hold, from one hold to another, or back to memory.
    public func hold(_ bytes: Int, label: String = "", waiting: (Wait) -> Void = { _ in }) {
        condition.lock()
        let ticket = nextTicket
        nextTicket += 1
        queue.append((ticket, label, bytes))
        var announced: Wait?
        while case .wait(let reason) = turn(ticket: ticket, bytes: bytes) {
            // Said once per reason: held bytes changing while it still does not fit change nothing.
            guard let reason, announced.map({ !reason.isSameReason(as: $0) }) ?? true else {
                condition.wait()
                continue
            }
            announced = reason
            condition.unlock()
            waiting(reason)
            condition.lock()
        }
        queue.removeFirst()
        held = held.saturatingAdding(bytes)
        holders += 1
        mostHolders = max(mostHolders, holders)
        condition.unlock()
        // The next in line may fit too.
        condition.broadcast()
    }

    /// Whether a hold proceeds or waits, and why it waits (nil: for no reason worth saying).
    private enum Turn {
        case proceed
        case wait(Wait?)
    }

    /// The turn of the hold `ticket` of `bytes`: it proceeds when first in line and fitting; it
    /// waits for memory when it does not fit, behind the first in line when that one does not fit;
    /// it waits for no reason worth saying while the first in line fits, which is about to proceed.
    private func turn(ticket: Int, bytes: Int) -> Turn {
        guard fits(bytes) else { return .wait(.memory(heldBytes: held, holders: holders)) }
        guard let first = queue.first, first.ticket != ticket else { return .proceed }
        return .wait(fits(first.bytes) ? nil : .behind(label: first.label, bytes: first.bytes))
    }

    /// Whether `bytes` may be held now: alone always, else within the capacity.
    private func fits(_ bytes: Int) -> Bool {
        guard holders > 0, let capacity else { return true }
        return held.saturatingAdding(bytes) <= capacity
    }

    /// Gives back `bytes` held by ``hold(_:label:waiting:)``.
    public func release(_ bytes: Int) {
        condition.withLock {
            held = max(0, held - bytes)
            holders -= 1
        }
        condition.broadcast()
    }
}

extension MemoryBudget.Wait {
    /// Whether `other` is the same reason to wait: memory, or the same hold first in line.
    func isSameReason(as other: MemoryBudget.Wait) -> Bool {
        switch (self, other) {
        case (.memory, .memory): return true
        case (.behind(let label, _), .behind(let otherLabel, _)): return label == otherLabel
        default: return false
        }
    }
}
