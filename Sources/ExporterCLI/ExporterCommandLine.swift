import ExporterKit
import Foundation

/// The working folder was removed: `getcwd` fails, and relative paths name nothing.
struct WorkingFolderGone: ExporterError {
    var description: String {
        "cannot read the current folder: it was removed; run exporter from a folder that exists"
    }
    var exitStatus: ExitStatus { .ioFailure }
}

/// Entry point of the command-line tool: parse, run, print errors, return the exit status.
public enum ExporterCommandLine {
    /// Runs the tool with the process's arguments and exits with its status.
    public static func main() -> Never {
        fillClosedStandardDescriptors()
        keepFreedMemoryForReuse()
        dieWithFarmParent()
        // A reader that goes away (`| head -1`) fails the writes to it instead of killing the
        // run between two of its steps; so does a file beyond `ulimit -f` (EFBIG, "file too large").
        signal(SIGPIPE, SIG_IGN)
        signal(SIGXFSZ, SIG_IGN)
        if let refusal = raiseOpenFileLimit() {
            StandardStream.error.write("Error: \(refusal)\n")
            exit(ExitStatus.resourceLimit.rawValue)
        }
        var status = run(CommandContext.process())
        if let failure = StandardStream.output.failure {
            // The work is done, but what it printed was lost; a failure's own status stays.
            StandardStream.error.write("Error: cannot write standard output: \(systemErrorMessage(failure))\n")
            if status == ExitStatus.success.rawValue { status = ExitStatus.ioFailure.rawValue }
        }
        exit(status)
    }

    /// Opens `/dev/null` on each standard descriptor (0, 1, 2) the process started with closed
    /// (`>&-`), so that no pipe, lock or file it opens gets that number: text meant for the
    /// terminal would go into it (the signal pipe read it as signal numbers). A closed standard
    /// output or error still fails its first write, as a closed one did (``StandardStream``).
    static func fillClosedStandardDescriptors() {
        for descriptor in [STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO] where fcntl(descriptor, F_GETFD) == -1 {
            // The lowest free number: this one, the lower ones being open by now.
            guard open("/dev/null", O_RDWR) == descriptor else { continue }
            if descriptor == STDOUT_FILENO { StandardStream.output.closedAtStart() }
            if descriptor == STDERR_FILENO { StandardStream.error.closedAtStart() }
        }
    }

    /// The fewest files a run needs open at once: its standard streams, Dispatch's event
    /// descriptors, a config, a lock, a weights file and its output. Below it, Dispatch traps
    /// (SIGILL) instead of failing an open.
    static let fewestOpenFiles: rlim_t = 16

    /// Raises the soft limit of open files to the hard one, as a checkpoint of many shards holds
    /// them all open (macOS's default soft limit is 256); returns why the run cannot go on when
    /// even the hard limit is below ``fewestOpenFiles``, nil otherwise.
    static func raiseOpenFileLimit() -> String? {
        #if canImport(Glibc)
            let openFiles = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
            let openFiles = RLIMIT_NOFILE
        #endif
        var limit = rlimit()
        guard getrlimit(openFiles, &limit) == 0 else { return nil }
        #if canImport(Darwin)
            // macOS refuses a soft limit above OPEN_MAX, whatever the hard one says.
            let wanted = min(limit.rlim_max, rlim_t(OPEN_MAX))
        #else
            let wanted = limit.rlim_max
        #endif
        if limit.rlim_cur < wanted {
            var raised = limit
            raised.rlim_cur = wanted
            if setrlimit(openFiles, &raised) == 0 { limit = raised }
        }
        guard limit.rlim_cur < fewestOpenFiles else { return nil }
        return
            "only \(limit.rlim_cur) files may be open at once (ulimit -n); exporter needs at least \(fewestOpenFiles)"
    }

    /// A farm job (started with `EXPORTER_PARENT_PID`) ends when its farm process ends, even by
    /// SIGKILL: an orphaned export would race the next farm run for the same artifact. The
    /// parent is polled (a process is reparented when its parent dies); it removes the staging
    /// folder it was filling before it ends.
    static func dieWithFarmParent() {
        guard let text = ProcessInfo.processInfo.environment[FarmRunner.parentEnvironmentKey], let parent = Int32(text)
        else { return }
        if getppid() != parent { exit(ExitStatus.internalError.rawValue) }
        let timer = DispatchSource.makeTimerSource(queue: .global())
        timer.schedule(deadline: .now() + .milliseconds(20), repeating: .milliseconds(20))
        timer.setEventHandler {
            if getppid() != parent { InterruptCleanup.removeRegistered(thenExit: ExitStatus.internalError.rawValue) }
        }
        timer.resume()
        orphanWatch = timer
    }

    nonisolated(unsafe) private static var orphanWatch: DispatchSourceTimer?

    /// Has glibc's allocator keep freed memory for the next tensor's buffers instead of handing
    /// it back to the system. By default every tensor-sized buffer is mapped afresh (above the
    /// mmap threshold, or in another thread's arena) and unmapped when freed, so the system
    /// zeroes each page again on first touch: 260,000 page faults and about 0.35 CPU seconds
    /// per export of the 1.5B bench, 6% of group 8's time. One arena, no mapping below 1 GiB
    /// and no trimming below 1 GiB of free memory bring it to 93,000 faults (the peak, touched
    /// once), with about the same peak memory. A process-wide choice, so the executable's, not
    /// the library's; other C libraries manage their own.
    static func keepFreedMemoryForReuse() {
        #if os(Linux)
            // `mallopt` and its parameters (glibc's malloc.h, stable values) are not in Swift's Glibc
            // module; looked up at run time, it is simply absent from other C libraries.
            typealias SetOption = @convention(c) (Int32, Int32) -> Int32
            guard let symbol = dlsym(nil, "mallopt") else { return }
            let setOption = unsafeBitCast(symbol, to: SetOption.self)
            let (trimThreshold, mmapThreshold, arenaMax): (Int32, Int32, Int32) = (-1, -3, -8)
            _ = setOption(arenaMax, 1)
            // Larger thresholds are refused by some glibc versions; 32 MiB still covers all but the embedding.
            if setOption(mmapThreshold, 1 << 30) == 0 { _ = setOption(mmapThreshold, 32 << 20) }
            _ = setOption(trimThreshold, 1 << 30)
        #endif
    }

    /// Runs one command line in `context` and returns its exit status.
    public static func run(_ context: CommandContext) -> Int32 {
        let invocation = ExportCommand.spec.resolve(context.arguments)
        do {
            switch try invocation.parse() {
            case .showHelp:
                context.writeOutput(invocation.helpText + "\n")
                return ExitStatus.success.rawValue
            case .showVersion(let version):
                context.print(version)
                return ExitStatus.success.rawValue
            case .run(let arguments):
                // A process whose working folder was removed has no folder for relative paths (the
                // default `Artifacts` among them): stopped at once, as git does, not left to name
                // paths resolved from nowhere.
                guard context.currentDirectory.path.hasPrefix("/") else { throw WorkingFolderGone() }
                if context.removesPartialFilesOnSignals { InterruptCleanup.removeOnSignals() }
                let status: ExitStatus
                switch invocation.command.name {
                case PlanCommand.spec.name: status = try PlanCommand.run(arguments, context: context)
                case ListCommand.spec.name: status = try ListCommand.run(arguments, context: context)
                case SynthCommand.spec.name: status = try SynthCommand.run(arguments, context: context)
                case BatchCommand.spec.name: status = try BatchCommand.run(arguments, context: context)
                case CompileCommand.spec.name: status = try CompileCommand.run(arguments, context: context)
                case InspectCommand.spec.name: status = try InspectCommand.run(arguments, context: context)
                case VerifyCommand.spec.name: status = try VerifyCommand.run(arguments, context: context)
                case DiffCommand.spec.name: status = try DiffCommand.run(arguments, context: context)
                case ConvertCommand.spec.name: status = try ConvertCommand.run(arguments, context: context)
                case EvalCommand.spec.name: status = try EvalCommand.run(arguments, context: context)
                default: status = try ExportCommand.run(arguments, context: context)
                }
                return status.rawValue
            }
        } catch let error as UsageError {
            context.writeError(invocation.usageErrorText(for: error) + "\n")
            return UsageError.exitCode
        } catch let error as ExporterError {
            printFailure(error.descriptionLines, context: context)
            // A library refusal of the command line (a context too long, an unknown preset) is a
            // usage error like the parser's: it points to the usage line and the help too.
            if error.exitStatus == .usage { context.writeError(invocation.usagePointer + "\n") }
            return error.exitStatus.rawValue
        } catch {
            printFailure(["\(error)"], context: context)
            return ExitStatus.internalError.rawValue
        }
    }

    /// Prints a failure, `Error: ` and its lines, each with its control characters escaped; on a
    /// terminal, first clears a progress line the failed step left.
    private static func printFailure(_ lines: [String], context: CommandContext) {
        if context.errorIsTerminal { context.writeError(context.clearLine) }
        for (index, line) in lines.enumerated() { context.printError((index == 0 ? "Error: " : "") + line) }
    }
}
