import Foundation

/// A value that tests change from several threads at once (a read log, a count), behind a lock.
public final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `stored` is only touched under `lock`.
    private let lock = NSLock()
    private var stored: Value

    public init(_ value: Value) { stored = value }

    /// The value now.
    public var value: Value { lock.withLock { stored } }

    /// Changes the value under the lock.
    public func mutate(_ change: (inout Value) -> Void) { lock.withLock { change(&stored) } }
}
