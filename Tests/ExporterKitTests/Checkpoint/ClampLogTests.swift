import Foundation
import Testing

@testable import ExporterKit

@Suite("checkpoint source: the record of clamped values")
struct ClampLogTests {
    @Test("entries follow the tensors' order, not the order workers read them in; a tensor read twice counts once")
    func order() {
        let log = CheckpointWeightSource.ClampLog()
        log.record("b", 2)
        log.record("c", 0)
        log.record("a", 1)
        log.record("b", 2)
        log.record("z", 5)
        // The tensors' order is not their names' order.
        let entries = log.entries(in: ["b", "a", "c"])
        #expect(entries.map(\.tensor) == ["b", "a", "z"])
        #expect(entries.map(\.count) == [2, 1, 5])
    }
}
