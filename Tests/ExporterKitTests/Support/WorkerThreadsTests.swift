import Foundation
import Testing

@testable import ExporterKit

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("worker threads: started before the work, or an error naming the limit")
struct WorkerThreadsTests {
    private let mebibyte = 1 << 20
    private let thread = (8 << 20) + 4096

    @Test("a thread that cannot start is blamed on a memory limit without room for its stack, else on ulimit -u")
    func threadCause() {
        let roomy = MemoryLimitUse(limit: .addressSpace, bytes: 200 * mebibyte, usedBytes: 100 * mebibyte)
        let full = MemoryLimitUse(limit: .addressSpace, bytes: 100 * mebibyte, usedBytes: 95 * mebibyte)
        let fullData = MemoryLimitUse(limit: .data, bytes: 20 * mebibyte, usedBytes: 19 * mebibyte)
        func cause(_ code: Int32, _ processes: Int?, _ memory: [MemoryLimitUse]) -> ThreadLimit? {
            ThreadLimit.cause(of: code, processLimit: processes, memory: memory, threadBytes: thread)
        }
        #expect(cause(EAGAIN, 4, [roomy]) == .processes(4))
        #expect(cause(EAGAIN, 4, [full]) == .memory(.addressSpace, bytes: 100 * mebibyte, threadBytes: thread))
        #expect(cause(EAGAIN, nil, [roomy, fullData]) == .memory(.data, bytes: 20 * mebibyte, threadBytes: thread))
        #expect(cause(EAGAIN, nil, [roomy]) == nil)
        #expect(cause(EPERM, 4, [full]) == nil)
    }

    @Test("a thread that cannot start: the error says why, what limits it, and how many threads the run needs")
    func threadMessages() {
        let reason = systemErrorMessage(EAGAIN)
        #expect(reason == "resource temporarily unavailable")
        #expect(
            ResourceError.cannotStartThread(needed: 7, started: 0, reason: reason, limit: .processes(1)).description
                == "cannot start a thread: resource temporarily unavailable; the process limit (ulimit -u 1) is too "
                + "low for this run: it needs 7 threads besides those running, and 0 could be started")
        #expect(
            ResourceError.cannotStartThread(
                needed: 7, started: 2, reason: reason,
                limit: .memory(.addressSpace, bytes: 100_000 * 1024, threadBytes: thread)
            ).description
                == "cannot start a thread: resource temporarily unavailable; the address-space limit (ulimit -v "
                + "100000) leaves no room for its stack (8.0 MiB each): it needs 7 threads besides those running, and "
                + "2 could be started")
        #expect(
            ResourceError.cannotStartThread(needed: 3, started: 1, reason: reason, limit: nil).description
                == "cannot start a thread: resource temporarily unavailable; this run needs 3 threads besides those "
                + "running, and 1 could be started")
        #expect(
            ResourceError.cannotStartThread(needed: 3, started: 1, reason: reason, limit: nil).exitStatus
                == .resourceLimit)
    }

    @Test("the thread check starts the threads it is asked for, and a creation that fails is an error, never a wait")
    func threadCheck() throws {
        try WorkerThreads.check(WorkerThreads.export(cores: 2))
        #expect(throws: Never.self) { try WorkerThreads.check(0) }
        do {
            try WorkerThreads.check(5, failing: (index: 3, code: EAGAIN))
            Issue.record("a failed thread creation was not reported")
        } catch ResourceError.cannotStartThread(let needed, let started, let reason, _) {
            #expect(needed == 5)
            #expect(started == 3)
            #expect(reason == "resource temporarily unavailable")
        }
        #expect(
            throws: ResourceError.cannotStartThread(needed: 2, started: 0, reason: "cannot allocate memory", limit: nil)
        ) {
            try WorkerThreads.check(2, failing: (index: 0, code: ENOMEM))
        }
    }

    @Test("threads each command runs at once: measured at one and two cores, grown with the cores")
    func threadCounts() {
        #expect(WorkerThreads.export(cores: 1) == 5)
        #expect(WorkerThreads.export(cores: 2) == 7)
        #expect(WorkerThreads.export(cores: 8) == 19)
        #expect(WorkerThreads.convert(cores: 2) == 3)
        #expect(WorkerThreads.compile(cores: 2) == 2)
        #expect(WorkerThreads.farm(jobs: 1, cores: 2) == 4)
        #expect(WorkerThreads.farm(jobs: 4, cores: 2) == 10)
    }
}
