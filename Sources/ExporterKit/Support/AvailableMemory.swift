import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A limit of this process's own (`setrlimit`, the shell's `ulimit`) that can leave a run less
/// memory than the machine has available.
public enum MemoryLimit: String, Codable, CaseIterable, Equatable, Sendable {
    /// `RLIMIT_AS` (`ulimit -v`): the address space, which every mapping counts against
    /// (`VmSize`): the code and libraries, the heap, each thread's whole stack.
    case addressSpace = "RLIMIT_AS"
    /// `RLIMIT_DATA` (`ulimit -d`): the heap and the private writable mappings (`VmData`),
    /// thread stacks among them.
    case data = "RLIMIT_DATA"

    /// The shell command that sets it: `ulimit -v` (kibibytes).
    public var command: String {
        switch self {
        case .addressSpace: return "ulimit -v"
        case .data: return "ulimit -d"
        }
    }

    /// What it is called in a message.
    public var title: String {
        switch self {
        case .addressSpace: return "address-space limit"
        case .data: return "data limit"
        }
    }

    /// The resource `getrlimit` takes.
    var resource: Int32 {
        #if canImport(Glibc)
            switch self {
            case .addressSpace: return Int32(RLIMIT_AS.rawValue)
            case .data: return Int32(RLIMIT_DATA.rawValue)
            }
        #else
            switch self {
            case .addressSpace: return RLIMIT_AS
            case .data: return RLIMIT_DATA
            }
        #endif
    }

    /// The field of `/proc/self/status` the limit is counted against.
    var statusField: String {
        switch self {
        case .addressSpace: return "VmSize:"
        case .data: return "VmData:"
        }
    }
}

/// The memory a run may take: what the machine has available now, or less where a limit of
/// this process leaves less (``SystemResources/availableMemory(startingThreads:)``).
public struct AvailableMemory: Equatable, Sendable {
    /// The bytes.
    public var bytes: Int
    /// The process limit that leaves only `bytes`; nil when it is the machine's memory.
    public var limit: MemoryLimit?

    /// `bytes`, bound by `limit` (nil: the machine's memory).
    public init(bytes: Int, limit: MemoryLimit? = nil) {
        self.bytes = bytes
        self.limit = limit
    }
}

/// A finite soft limit and what this process already counts against it.
struct MemoryLimitUse: Equatable, Sendable {
    /// The limit.
    var limit: MemoryLimit
    /// Its soft value, in bytes.
    var bytes: Int
    /// What the process counts against it now (`VmSize` or `VmData`).
    var usedBytes: Int
}

extension SystemResources {
    /// What a run is not given of a limit's headroom beyond its forecast and its threads' stacks:
    /// for what no measured run showed (a thread Dispatch starts beyond the count, glibc's cache
    /// of the stacks of threads that ended, what the runtime maps on the way). The address space
    /// of the exports measured grew 104–214 MiB less than their forecast and their threads'
    /// stacks together (README "Resource limits"); one thread beyond the count was seen. Two stacks.
    public static let limitMarginBytes = 16 << 20

    /// The address space a thread started with the default attributes reserves, as Dispatch's
    /// workers are: its stack (glibc takes the `ulimit -s` of the process's start, 8 MiB by
    /// default) and its guard page.
    public static let threadReserveBytes: Int = {
        var attributes = pthread_attr_t()
        guard pthread_attr_init(&attributes) == 0 else { return 8 << 20 }
        defer { pthread_attr_destroy(&attributes) }
        var stack = 0
        var guardBytes = 0
        // glibc answers the default for attributes whose size was never set; 8 MiB where it cannot.
        if pthread_attr_getstacksize(&attributes, &stack) != 0 || stack == 0 { stack = 8 << 20 }
        if pthread_attr_getguardsize(&attributes, &guardBytes) != 0 { guardBytes = 0 }
        return stack + guardBytes
    }()

    /// Memory available to a run that will start `threads` threads besides those running now:
    /// the machine's (``availableMemoryBytes()``), or less where a finite soft `RLIMIT_AS` or
    /// `RLIMIT_DATA` leaves less: the limit less what the process counts against it now (Linux's
    /// `VmSize`, `VmData`), the threads' stacks (``threadReserveBytes`` each) and
    /// ``limitMarginBytes``. macOS does not enforce either limit on mappings, so it is not read there.
    /// Nil when neither says.
    public static func availableMemory(startingThreads threads: Int) -> AvailableMemory? {
        availableMemory(
            system: availableMemoryBytes(), limits: memoryLimitUses(), threads: threads,
            threadReserveBytes: threadReserveBytes, marginBytes: limitMarginBytes)
    }

    /// The smaller of `system` and each limit's headroom for a run that starts `threads` threads
    /// (never below 0); the limit named when it is the smaller, the machine's memory on a tie.
    static func availableMemory(
        system: Int?, limits: [MemoryLimitUse], threads: Int, threadReserveBytes: Int, marginBytes: Int
    ) -> AvailableMemory? {
        var available = system.map { AvailableMemory(bytes: $0) }
        let reserved = [max(0, threads), threadReserveBytes].saturatingProduct.saturatingAdding(marginBytes)
        for use in limits {
            let left = use.bytes - min(use.bytes, use.usedBytes)
            let headroom = left - min(left, reserved)
            if available.map({ headroom < $0.bytes }) ?? true {
                available = AvailableMemory(bytes: headroom, limit: use.limit)
            }
        }
        return available
    }

    /// The finite soft memory limits of this process, with what it counts against each now
    /// (none on macOS, which does not enforce them on mappings).
    static func memoryLimitUses() -> [MemoryLimitUse] {
        #if os(Linux)
            let limits = MemoryLimit.allCases.compactMap { limit in softLimit(limit.resource).map { (limit, $0) } }
            guard !limits.isEmpty else { return [] }
            // Unreadable (no /proc): counted as nothing used, so the limit still bounds the run.
            let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
            return limits.map { limit, bytes in
                MemoryLimitUse(
                    limit: limit, bytes: bytes, usedBytes: kibibyteField(limit.statusField, in: status) ?? 0)
            }
        #else
            return []
        #endif
    }

    /// The soft limit of `resource` in bytes (a count for `RLIMIT_NPROC`); nil when unlimited.
    static func softLimit(_ resource: Int32) -> Int? {
        var limit = rlimit()
        #if canImport(Glibc)
            guard getrlimit(__rlimit_resource_t(UInt32(resource)), &limit) == 0 else { return nil }
            // RLIM_INFINITY: all ones, a macro Swift's Glibc module does not import for an unsigned type.
            let unlimited = rlim_t.max
        #else
            guard getrlimit(resource, &limit) == 0 else { return nil }
            let unlimited = RLIM_INFINITY
        #endif
        guard limit.rlim_cur != unlimited else { return nil }
        return Int(clamping: limit.rlim_cur)
    }

    /// A `/proc/<pid>/status` field given in kB (`VmSize:   82056 kB`), in bytes.
    static func kibibyteField(_ name: String, in text: String) -> Int? {
        for line in text.split(separator: "\n") where line.hasPrefix(name) {
            let fields = line.dropFirst(name.count).split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard let first = fields.first, let kibibytes = Int(first) else { return nil }
            let (bytes, overflow) = kibibytes.multipliedReportingOverflow(by: 1024)
            return overflow ? Int.max : bytes
        }
        return nil
    }
}
