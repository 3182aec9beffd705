/// How far a long step is (a forward pass, writing a checkpoint), for a progress line.
public struct WorkProgress: Sendable, Equatable {
    /// Units done, of `total`: bytes when `countsBytes`, otherwise steps (layers).
    public let done: Int
    /// Units in all.
    public let total: Int
    /// Whether the units are bytes (worth showing as sizes).
    public let countsBytes: Bool
    /// What is under way, for people: `checkpoint pass, layer 12 of 28`.
    public let stage: String

    /// A progress report of `done` of `total` units in `stage`.
    public init(done: Int, total: Int, countsBytes: Bool = false, stage: String) {
        self.done = done
        self.total = total
        self.countsBytes = countsBytes
        self.stage = stage
    }
}
