import Foundation

/// The error of the lowest-ordered piece of work that failed (a block, a batch), rethrown once
/// the workers are done: whichever worker failed first, the same fault gives the same message.
final class FirstFailure: @unchecked Sendable {
    // @unchecked: `error` and `errorOrder` are only touched under `lock`.
    let lock = NSLock()
    private var error: Error?
    private var errorOrder = Int.max

    /// Whether an error of an order below `order` was recorded: work of that order or later
    /// can stop, as its outcome no longer matters.
    func happened(before order: Int) -> Bool { lock.withLock { error != nil && errorOrder < order } }

    /// Keeps `error` if no error of a lower order was recorded.
    func record(_ error: Error, order: Int) {
        lock.withLock {
            guard self.error == nil || order < errorOrder else { return }
            self.error = error
            errorOrder = order
        }
    }

    func rethrow() throws { if let error = lock.withLock({ error }) { throw error } }
}
