import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What an interrupted run removes before it ends: the staging folders and temporary files it
/// is filling. Without it, Ctrl-C or SIGTERM left a hidden `.partial-…` folder of up to the
/// model's size until the next export of the same artifact (or a farm run) removed it.
///
/// Writers register what they create (``register(_:)``) and unregister it once it is published
/// or removed. The executable turns the cleanup on (``removeOnSignals()``); the library alone
/// never changes how its host process handles signals.
public enum InterruptCleanup {
    /// Recursive: a writer holds it from creating a path to registering it (``registering(_:)``).
    private static let lock = NSRecursiveLock()
    /// What each token removes: a path (if any), then the folders above it that are left empty.
    nonisolated(unsafe) private static var paths: [Int: (url: URL?, emptyFolders: [String])] = [:]
    nonisolated(unsafe) private static var nextToken = 0

    /// The signals that end a run with a clean-up: those a user or a scheduler stops it with,
    /// and the others whose default ends the process (SIGQUIT, which the Swift runtime would
    /// answer with a crash report and let the run go on; SIGUSR1, SIGUSR2, SIGALRM, which some
    /// CI wrappers send). Each still ends it with status 128 + N.
    static let signals = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM]

    /// Registers `url` (a staging folder or a temporary file; nil for none) for removal if the
    /// run is interrupted, then `emptyFolders` (deepest first) if nothing else is in them: the
    /// folders the writer created for it. Returns the token that unregisters it. The last
    /// registered goes first, so that a folder registered before the files made in it is empty
    /// by its turn.
    static func register(_ url: URL?, emptyFolders: [String] = []) -> Int {
        lock.withLock {
            nextToken += 1
            paths[nextToken] = (url, emptyFolders)
            return nextToken
        }
    }

    /// Runs `body`, which creates a path and registers it, with no clean-up in between: a
    /// signal arriving meanwhile is handled once `body` has returned, so a path created just
    /// before its registration is not left behind.
    static func registering<Result>(_ body: () throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    /// Forgets the path registered under `token` (published, or removed by its writer).
    static func unregister(_ token: Int) {
        lock.withLock { _ = paths.removeValue(forKey: token) }
    }

    /// From now on, the ``signals`` remove what is registered, then end the process by the
    /// same signal (its exit status stays `128 + N`). A signal this process started with
    /// ignored (`nohup`, a background job of a script) stays ignored. When no thread can be
    /// started to do the clean-up (`ulimit -u` reached), nothing changes: the signals keep
    /// their default, which ends the process, rather than being caught and never acted on.
    ///
    /// Each signal's handler is installed in one step, so that no signal is lost on the way:
    /// Dispatch's signal sources needed the signal ignored until their manager thread had
    /// registered them, and a SIGTERM arriving meanwhile was dropped. The processes this one
    /// starts (a farm's jobs) get every signal's default back from `exec`.
    public static func removeOnSignals() {
        var descriptors: [Int32] = [0, 0]
        guard pipe(&descriptors) == 0 else { return }
        _ = fcntl(descriptors[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(descriptors[1], F_SETFD, FD_CLOEXEC)
        // A signal handler must not wait: with the pipe full, a signal already on its way is enough.
        _ = fcntl(descriptors[1], F_SETFL, O_NONBLOCK)
        (signalPipe, signalPipeReadEnd) = (descriptors[1], descriptors[0])
        guard startReader() else {
            signalPipe = -1
            for descriptor in descriptors { close(descriptor) }
            return
        }
        for signalNumber in signals {
            var current = sigaction()
            guard sigaction(signalNumber, nil, &current) == 0, !isIgnored(current) else { continue }
            var action = sigaction()
            #if canImport(Glibc)
                action.__sigaction_handler.sa_handler = forwardToPipe
                action.sa_flags = SA_RESTART
            #else
                action.__sigaction_u.__sa_handler = forwardToPipe
                action.sa_flags = Int32(SA_RESTART)
            #endif
            sigemptyset(&action.sa_mask)
            sigaction(signalNumber, &action, nil)
        }
    }

    /// The write end of the pipe ``forwardToPipe`` writes each signal's number to.
    nonisolated(unsafe) private static var signalPipe: Int32 = -1
    /// Its read end, which the reader thread waits on.
    nonisolated(unsafe) private static var signalPipeReadEnd: Int32 = -1

    /// Starts the thread that reads the pipe and cleans up: with `pthread_create`, whose
    /// failure is reported (Foundation's `Thread` fails silently). False when it cannot start.
    private static func startReader() -> Bool {
        let body: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { _ in
            var signalNumber: UInt8 = 0
            var count = read(InterruptCleanup.signalPipeReadEnd, &signalNumber, 1)
            while count < 0 && errno == EINTR { count = read(InterruptCleanup.signalPipeReadEnd, &signalNumber, 1) }
            if count == 1 { InterruptCleanup.end(by: Int32(signalNumber)) }
            return nil
        }
        #if canImport(Glibc)
            var thread = pthread_t()
        #else
            var thread: pthread_t?
        #endif
        guard pthread_create(&thread, nil, body, nil) == 0 else { return false }
        #if canImport(Glibc)
            pthread_detach(thread)
        #else
            if let thread { pthread_detach(thread) }
        #endif
        return true
    }

    /// The signal handler: it only writes the signal's number to the pipe, which is safe in a
    /// handler; the reader thread does the clean-up, which takes a lock and removes files.
    private static let forwardToPipe: @convention(c) (Int32) -> Void = { signalNumber in
        let savedErrno = errno
        var byte = UInt8(truncatingIfNeeded: signalNumber)
        _ = write(signalPipe, &byte, 1)
        errno = savedErrno
    }

    /// Removes everything registered, then ends the process with `status` (a farm job whose
    /// farm has gone).
    public static func removeRegistered(thenExit status: Int32) -> Never {
        lock.lock()
        removeRegistered()
        _exit(status)
    }

    /// Removes everything registered. The caller holds the lock and never releases it: it
    /// ends the process, and nothing may be created and registered in between.
    private static func removeRegistered() {
        for (_, (url, emptyFolders)) in paths.sorted(by: { $0.key > $1.key }) {
            if let url { remove(url) }
            // rmdir: only empty folders go, so another writer's files are never touched.
            for path in emptyFolders { _ = rmdir(path) }
        }
        paths.removeAll()
    }

    /// Removes `url`: a folder is first renamed aside (a name its cleaners still recognise), so
    /// that the writer threads still running cannot add files to it while it is being removed.
    private static func remove(_ url: URL) {
        var status = stat()
        guard lstat(url.path, &status) == 0 else { return }
        if status.st_mode & S_IFMT == S_IFDIR {
            let aside = url.deletingLastPathComponent().appendingPathComponent(url.lastPathComponent + "-interrupted")
            ArtifactDirectory.removeTree(rename(url.path, aside.path) == 0 ? aside : url)
        } else {
            _ = unlink(url.path)
        }
    }

    /// Cleans up and ends the process by `signalNumber`.
    private static func end(by signalNumber: Int32) -> Never {
        lock.lock()
        removeRegistered()
        signal(signalNumber, SIG_DFL)
        // Unblocked in this thread, whatever it inherited: the signal ends the process now.
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        sigaddset(&unblocked, signalNumber)
        pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
        raise(signalNumber)
        _exit(128 + signalNumber)
    }

    private static func isIgnored(_ action: sigaction) -> Bool {
        #if canImport(Glibc)
            return unsafeBitCast(action.__sigaction_handler.sa_handler, to: Int.self) == 1
        #else
            return unsafeBitCast(action.__sigaction_u.__sa_handler, to: Int.self) == 1
        #endif
    }
}
