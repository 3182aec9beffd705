import Foundation

/// The first error of the workers of a pass, rethrown once they are done.
final class FirstFailure: @unchecked Sendable {
    let lock = NSLock()
    private var error: Error?

    var happened: Bool { lock.withLock { error != nil } }
    func record(_ error: Error) { lock.withLock { if self.error == nil { self.error = error } } }
    func rethrow() throws { if let error = lock.withLock({ error }) { throw error } }
}
