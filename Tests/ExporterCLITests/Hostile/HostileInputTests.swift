import Foundation
import TestSupport
import Testing

@Suite("hostile inputs: the built binary as a child process")
struct HostileInputTests {
    @Test(
        "every corpus entry ends with its exit status and exact message, never a trap or a signal",
        arguments: HostileCorpus.cases)
    func corpusEntry(_ entry: HostileCase) throws {
        let scratch = try Fixtures.temporaryDirectory("hostile")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let expected = try entry.build(scratch)
        let run = try BuiltExporter.run(expected.arguments, environment: expected.environment)
        #expect(run.exitedNormally, "ended by signal \(run.status): \(run.error)")
        #expect(run.status == expected.status, "\(run.error)")
        #expect(run.error == expected.error)
        #expect(run.output.isEmpty)
        // Nothing that looks like an artifact, and no staging leftovers.
        let output = scratch.appendingPathComponent("out")
        let written = FileManager.default.enumerator(atPath: output.path)?.allObjects as? [String] ?? []
        #expect(written.filter { $0.hasSuffix(".aimodel") || $0.contains(".partial-") }.isEmpty, "\(written)")
    }

    @Test("the corpus covers every kind of hostile input the issue lists")
    func coverage() {
        #expect(HostileCorpus.cases.count >= 50)
        #expect(Set(HostileCorpus.cases.map(\.name)).count == HostileCorpus.cases.count)
    }
}
