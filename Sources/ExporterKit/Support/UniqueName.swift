import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The unique part of the names of temporary files and folders (staging folders, a report
/// written whole then renamed), which keeps concurrent writers apart.
///
/// Foundation's `UUID()` on Linux reads `/dev/urandom` and, when it cannot open it (no file
/// descriptor left), silently gives the same UUID every time,
/// `00000000-0000-4000-8000-000000000000`: a farm under `ulimit -n 8` named its temporary files
/// so. Here the random bits come from `getrandom(2)`, which needs no descriptor (`arc4random_buf`
/// on macOS, which cannot fail), and when even that fails the name is made of the process id, a
/// count of the names it made and the time: unique still, never a constant.
enum UniqueName {
    /// 128 random bits in a UUID's text, upper case (`8-4-4-4-12` hexadecimal digits, as these
    /// names had), or, when the random source fails, ``fallback()``.
    static func make() -> String { make(random: systemRandom) }

    /// ``make()`` with the random bytes from `random`, which returns false when it cannot fill
    /// its buffer (tests inject a failure).
    static func make(random: (UnsafeMutableRawBufferPointer) -> Bool) -> String {
        var bytes = [UInt8](repeating: 0, count: 16)
        guard bytes.withUnsafeMutableBytes(random) else { return fallback() }
        let hex = bytes.map { String(format: "%02X", $0) }.joined()
        var text = ""
        for (index, character) in hex.enumerated() {
            if [8, 12, 16, 20].contains(index) { text.append("-") }
            text.append(character)
        }
        return text
    }

    /// `P<pid>-<count>-<nanoseconds since 1970>`: the count tells apart the names one process
    /// makes, the process id those of processes running at once, the time a later process that
    /// gets the same id.
    static func fallback() -> String {
        let count = counter.withLock {
            $0 += 1
            return $0
        }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return "P\(getpid())-\(count)-\(Int(now.tv_sec) * 1_000_000_000 + Int(now.tv_nsec))"
    }

    /// Names made by ``fallback()`` in this process.
    private static let counter = LockedCount()

    /// Fills `buffer` from the system's random source; false when it cannot.
    private static func systemRandom(_ buffer: UnsafeMutableRawBufferPointer) -> Bool {
        guard let base = buffer.baseAddress else { return true }
        #if canImport(Darwin)
            arc4random_buf(base, buffer.count)
            return true
        #else
            guard let getrandom = linuxGetRandom else { return false }
            var filled = 0
            while filled < buffer.count {
                let got = getrandom(base + filled, buffer.count - filled, 0)
                if got < 0, errno == EINTR { continue }
                guard got > 0 else { return false }
                filled += got
            }
            return true
        #endif
    }

    #if !canImport(Darwin)
        private typealias GetRandom = @convention(c) (UnsafeMutableRawPointer?, Int, UInt32) -> Int
        /// glibc's `getrandom` (2.25 and later), looked up at run time: absent from older C libraries.
        private static let linuxGetRandom: GetRandom? = dlsym(nil, "getrandom").map {
            unsafeBitCast($0, to: GetRandom.self)
        }
    #endif
}

/// A count behind a lock.
private final class LockedCount: @unchecked Sendable {
    // @unchecked: `value` is guarded by `lock`.
    private let lock = NSLock()
    private var value = 0

    func withLock<Result>(_ body: (inout Int) -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
