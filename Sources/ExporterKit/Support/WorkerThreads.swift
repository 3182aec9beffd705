import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The threads a command runs besides its main thread and the signal reader, and the check that
/// they can be started before the work begins.
///
/// Why: Dispatch, which runs the workers, never gives up on a thread it cannot create (under
/// `ulimit -u`, or an address-space limit with no room for another stack): it sleeps and tries
/// again for ever, and the run hangs. Starting the threads first turns that into an error.
///
/// The counts were measured (README "Resource limits"): an export at two cores needs 8 threads
/// at once with the main one and the signal reader, 9 to run at full speed, one core 6: two
/// compressions of `cores` workers at once (the reader's and the palettiser's), and the read-ahead,
/// advice, write queue and weights file threads. A Core ML conversion needs 5 at two cores (4 ran
/// at a tenth of the speed), a compile 3.
public enum WorkerThreads {
    /// Threads an export (`exporter <model>`) runs at once besides the main one and the signal reader.
    public static func export(cores: Int = SystemResources.activeCores) -> Int { 2 * max(1, cores) + 3 }

    /// Threads `exporter convert` runs at once besides the main one and the signal reader.
    public static func convert(cores: Int = SystemResources.activeCores) -> Int { max(1, cores) + 1 }

    /// Threads `exporter compile` runs at once besides the main one and the signal reader.
    public static func compile(cores: Int = SystemResources.activeCores) -> Int { max(1, cores) }

    /// Threads a farm (`exporter batch`) runs at once besides the main one and the signal reader,
    /// running `jobs` jobs at once: per job, the thread that plans it, fingerprints its inputs
    /// and reads its artifacts on `cores` workers, and waits for its child processes; and Dispatch's
    /// threads of its own (at most 6 threads in all were seen with one job at two cores, 7 with
    /// two or four). Each job's export or compile checks its own threads.
    public static func farm(jobs: Int, cores: Int = SystemResources.activeCores) -> Int {
        [max(1, jobs), max(1, cores)].saturatingProduct.saturatingAdding(2)
    }

    /// Starts `count` threads, all alive at once, then ends and joins them: a run that needs
    /// them then finds them (unless another process takes them meanwhile). Threads get the
    /// default attributes, so each reserves the stack Dispatch's workers get.
    /// - Throws: `ResourceError.cannotStartThread` naming the limit that most likely stopped it.
    public static func check(_ count: Int) throws { try check(count, failing: nil) }

    /// ``check(_:)``, with the creation of thread `failing.index` (0-based) failing with
    /// `failing.code` instead of being tried, for tests.
    static func check(_ count: Int, failing: (index: Int, code: Int32)?) throws {
        let gate = Gate()
        var threads: [pthread_t] = []
        var failure: Int32 = 0
        for index in 0..<max(0, count) {
            if let failing, failing.index == index {
                failure = failing.code
                break
            }
            let context = Unmanaged.passRetained(gate).toOpaque()
            #if canImport(Glibc)
                var thread = pthread_t()
                let code = pthread_create(&thread, nil, waitAtGate, context)
            #else
                var created: pthread_t?
                let code = pthread_create(&created, nil, waitAtGate, context)
            #endif
            guard code == 0 else {
                Unmanaged<Gate>.fromOpaque(context).release()
                failure = code
                break
            }
            #if canImport(Glibc)
                threads.append(thread)
            #else
                if let created { threads.append(created) }
            #endif
        }
        // Read before the threads end: their stacks still count against the limits.
        let limit = failure == 0 ? nil : ThreadLimit.cause(of: failure)
        gate.open()
        for thread in threads { pthread_join(thread, nil) }
        guard failure != 0 else { return }
        throw ResourceError.cannotStartThread(
            needed: count, started: threads.count, reason: systemErrorMessage(failure), limit: limit)
    }

    /// Where the threads wait until every one has been started (or one could not be).
    final class Gate: @unchecked Sendable {
        private let condition = NSCondition()
        private var isOpen = false

        func wait() {
            condition.lock()
            while !isOpen { condition.wait() }
            condition.unlock()
        }

        func open() {
            condition.lock()
            isOpen = true
            condition.broadcast()
            condition.unlock()
        }
    }
}

#if canImport(Glibc)
    /// A checking thread's body: it waits at its gate, then ends.
    private func waitAtGate(_ context: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
        guard let context else { return nil }
        Unmanaged<WorkerThreads.Gate>.fromOpaque(context).takeRetainedValue().wait()
        return nil
    }
#else
    /// A checking thread's body: it waits at its gate, then ends.
    private func waitAtGate(_ context: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer? {
        Unmanaged<WorkerThreads.Gate>.fromOpaque(context).takeRetainedValue().wait()
        return nil
    }
#endif

/// What most likely keeps a thread from starting.
public enum ThreadLimit: Equatable, Sendable {
    /// The processes (and threads) the user may run (`RLIMIT_NPROC`, `ulimit -u`): its soft value.
    case processes(Int)
    /// A memory limit leaving no room for another thread's stack: the limit, its soft value in
    /// bytes, and what a thread reserves.
    case memory(MemoryLimit, bytes: Int, threadBytes: Int)

    /// The limit that most likely failed a thread's creation with `code`: a memory limit that
    /// has no room left for another stack, else a finite process limit (nil: none of this
    /// process's limits, or another failure than `EAGAIN`).
    static func cause(of code: Int32) -> ThreadLimit? {
        cause(
            of: code, processLimit: SystemResources.softLimit(processResource),
            memory: SystemResources.memoryLimitUses(), threadBytes: SystemResources.threadReserveBytes)
    }

    /// ``cause(of:)`` from the limits given.
    static func cause(of code: Int32, processLimit: Int?, memory: [MemoryLimitUse], threadBytes: Int) -> ThreadLimit? {
        guard code == EAGAIN else { return nil }
        if let full = memory.first(where: { $0.bytes - min($0.bytes, $0.usedBytes) < threadBytes }) {
            return .memory(full.limit, bytes: full.bytes, threadBytes: threadBytes)
        }
        return processLimit.map { .processes($0) }
    }

    /// `RLIMIT_NPROC`, as `getrlimit` takes it.
    private static var processResource: Int32 {
        #if canImport(Glibc)
            return Int32(__RLIMIT_NPROC.rawValue)
        #else
            return RLIMIT_NPROC
        #endif
    }

    /// What the message says of it.
    var explanation: String {
        switch self {
        case .processes(let count):
            return "the process limit (ulimit -u \(count)) is too low for this run"
        case .memory(let limit, let bytes, let threadBytes):
            return "the \(limit.title) (\(limit.command) \(bytes / 1024)) leaves no room for its stack "
                + "(\(Format.mebibytes(threadBytes)) each)"
        }
    }
}
