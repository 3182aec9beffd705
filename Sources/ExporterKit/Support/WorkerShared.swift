/// A buffer (or pointer) handed to concurrent workers. Sendable on the caller's word that the
/// workers write disjoint parts of it, or write under a lock.
struct WorkerShared<Value>: @unchecked Sendable {
    let value: Value

    init(_ value: Value) { self.value = value }
}
