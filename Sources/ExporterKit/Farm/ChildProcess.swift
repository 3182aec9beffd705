import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A job's `exporter` process, started as a shell would start it: no signal blocked, standard
/// input and output on `/dev/null`, standard error captured, in the folder it is given (a farm
/// job's runs in its farm file's folder, where its relative `model` is looked for).
///
/// The farm starts jobs from Dispatch's worker threads, which block every signal but the
/// synchronous ones (libdispatch does so for each thread it makes), and a process starts with
/// the signal mask of the thread that spawned it. Foundation's `Process` keeps that mask, so
/// its children ignored SIGTERM, SIGINT and SIGHUP: a job could not be stopped, and ran to
/// `built`. This spawn sets an empty mask and SIGPIPE's default action (the Swift runtime
/// ignores it; the child's runtime chooses again). Signals the farm's own launcher chose to
/// ignore stay ignored, as exec keeps them: under `nohup` the jobs survive a hangup too.
struct ChildProcess {
    /// The process id.
    let id: pid_t
    /// The reading end of the child's standard error.
    private let errorDescriptor: Int32
    /// Held from a pipe's creation to its child's start.
    private static let spawning = NSLock()

    /// Starts `executable` (an absolute path) with `arguments` in `environment`, in `directory`
    /// (nil: this process's folder).
    /// - Throws: the `posix_spawn` error number's text when it cannot start (`directory` missing too).
    static func start(
        _ executable: URL, arguments: [String], environment: [String: String], directory: URL? = nil
    ) throws -> ChildProcess {
        // Another job's child must not hold this pipe open (its reader would wait for that child
        // too): both ends are close-on-exec before any other spawn of ours can start
        // (`pipe2`, which does it at once, is not in Swift's Glibc module).
        spawning.lock()
        defer { spawning.unlock() }
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else { throw ChildProcessError(OutputFile.errnoText()) }
        for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        defer { close(pipeEnds[1]) }
        #if canImport(Darwin)
            var actions: posix_spawn_file_actions_t? = nil
            var attributes: posix_spawnattr_t? = nil
        #else
            var actions = posix_spawn_file_actions_t()
            var attributes = posix_spawnattr_t()
        #endif
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // First: the paths that follow are absolute, and the executable's is looked up after it.
        if let directory {
            #if canImport(Darwin)
                let failure = posix_spawn_file_actions_addchdir_np(&actions, directory.path)
            #else
                guard let addChangeDirectory = ChildProcess.addChangeDirectory else {
                    close(pipeEnds[0])
                    throw ChildProcessError("this C library cannot start a process in another folder")
                }
                let failure = addChangeDirectory(&actions, directory.path)
            #endif
            guard failure == 0 else {
                close(pipeEnds[0])
                throw ChildProcessError(systemErrorMessage(failure))
            }
        }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        // dup2 clears close-on-exec on the copy only.
        posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], 2)
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv = ([executable.path] + arguments).map { strdup($0) } + [nil]
        defer { for argument in argv { free(argument) } }
        let envp = environment.sorted { $0.key < $1.key }.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for entry in envp { free(entry) } }
        var id = pid_t()
        let failure = posix_spawn(&id, executable.path, &actions, &attributes, argv, envp)
        guard failure == 0 else {
            close(pipeEnds[0])
            throw ChildProcessError(systemErrorMessage(failure))
        }
        return ChildProcess(id: id, errorDescriptor: pipeEnds[0])
    }

    #if !canImport(Darwin)
        /// `posix_spawn_file_actions_addchdir_np(actions, path)`.
        private typealias AddChangeDirectory =
            @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
        /// `posix_spawn_file_actions_addchdir_np` (glibc 2.29, musl 1.1.24), which Swift's Glibc module
        /// leaves out (glibc declares it for `_GNU_SOURCE` only): looked up at run time, nil where absent.
        private static let addChangeDirectory = dlsym(nil, "posix_spawn_file_actions_addchdir_np").map {
            unsafeBitCast($0, to: AddChangeDirectory.self)
        }
    #endif

    /// Reads the child's standard error to its end, then waits for the child.
    /// - Returns: its exit status, or 128 + N when signal N killed it (as a shell reports it);
    ///   the signal's number, if one killed it; and its standard error.
    func finish() -> (status: Int32, signal: Int32?, standardError: [UInt8]) {
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(errorDescriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                output += buffer.prefix(count)
            } else if count == 0 || errno != EINTR {
                break
            }
        }
        close(errorDescriptor)
        var status: Int32 = 0
        while waitpid(id, &status, 0) < 0 {
            guard errno == EINTR else { return (ExitStatus.internalError.rawValue, nil, output) }
        }
        // The <sys/wait.h> macros, which Swift does not import.
        let signal = status & 0x7f
        return signal == 0 ? ((status >> 8) & 0xff, nil, output) : (128 + signal, signal, output)
    }
}

/// Why a child process could not start.
struct ChildProcessError: Error, CustomStringConvertible {
    /// The system's reason.
    let description: String

    init(_ description: String) { self.description = description }
}
