import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// FIFOs (named pipes) standing where a reader expects a file: opening one for reading
/// blocks until a writer comes, so a reader that does not refuse it hangs.
public enum FIFOFixture {
    /// Replaces whatever is at `url` with a FIFO and, from `seconds` on, opens and closes its
    /// writing end twice a second for a minute, which releases any reader stuck opening it:
    /// a test of a reader that would hang then fails on its result instead of never ending.
    public static func make(at url: URL, releaseAfter seconds: Double = 10) throws {
        try? FileManager.default.removeItem(at: url)
        guard mkfifo(url.path, 0o644) == 0 else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: url.path])
        }
        let path = url.path
        Thread.detachNewThread {
            Thread.sleep(forTimeInterval: seconds)
            for _ in 0..<120 {
                // Non-blocking: fails at once (ENXIO) when no reader waits, or when the FIFO is gone.
                let descriptor = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
                if descriptor >= 0 { close(descriptor) }
                Thread.sleep(forTimeInterval: 0.5)
            }
        }
    }
}
