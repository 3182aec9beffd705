import Foundation

/// The first error of the workers of a pass, rethrown once they are done: the first
/// recorded, or with `order`, the one of the lowest order whichever worker came first (so
/// that the same fault gives the same message however the work was shared).
final class FirstFailure: @unchecked Sendable {
    let lock = NSLock()
    private var error: Error?
    private var errorOrder = Int.max

    var happened: Bool { lock.withLock { error != nil } }
    /// Whether an error of an order below `order` was recorded: work of that order or later
    /// can stop, as its outcome no longer matters.
    func happened(before order: Int) -> Bool { lock.withLock { error != nil && errorOrder < order } }
    func record(_ error: Error, order: Int = Int.max) {
        lock.withLock {
            guard self.error == nil || order < errorOrder else { return }
            self.error = error
            errorOrder = order
        }
    }
    func rethrow() throws { if let error = lock.withLock({ error }) { throw error } }
}
