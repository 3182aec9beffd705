import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// One clear message rather than hundreds of "'Float16' is unavailable in macOS".
#if os(macOS) && arch(x86_64)
    #error("Intel Macs are not supported: Swift's Float16, which the converter computes in, is unavailable there")
#endif

/// What the machine can give an export: memory now available and free disk space.
public enum SystemResources {
    /// Cores this process may use, read once: Foundation opens and reads two cgroup files on
    /// every `activeProcessorCount`, which each tensor's compression asked for.
    public static let activeCores = max(1, ProcessInfo.processInfo.activeProcessorCount)

    /// Memory available to a new workload: `MemAvailable` of `/proc/meminfo` on Linux (what
    /// the kernel can hand out without swapping); on macOS the physical memory less what is
    /// in use (``memoryNotInUse(physicalBytes:pageBytes:wiredPages:compressorPages:anonymousPages:purgeablePages:)``);
    /// else, or when the system does not say, the physical memory.
    public static func availableMemoryBytes() -> Int? {
        #if os(Linux)
            if let text = try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8),
                let bytes = memAvailable(inMeminfo: text)
            {
                return bytes
            }
        #elseif canImport(Darwin)
            if let bytes = darwinMemoryNotInUse() { return bytes }
        #endif
        let physical = ProcessInfo.processInfo.physicalMemory
        return physical > 0 && physical <= UInt64(Int.max) ? Int(physical) : nil
    }

    /// Physical memory less what Activity Monitor calls "Memory Used" (app memory, that is
    /// anonymous pages but purgeable ones, plus wired memory and the compressor's pages): the
    /// free pages, the file cache and purgeable memory, which macOS hands to a new workload
    /// without swapping, as `MemAvailable` counts on Linux. Counts are in pages of `pageBytes`.
    static func memoryNotInUse(
        physicalBytes: UInt64, pageBytes: UInt64, wiredPages: UInt64, compressorPages: UInt64, anonymousPages: UInt64,
        purgeablePages: UInt64
    ) -> Int? {
        guard physicalBytes > 0, pageBytes > 0 else { return nil }
        let usedPages = wiredPages + compressorPages + (anonymousPages - min(purgeablePages, anonymousPages))
        let (usedBytes, overflow) = usedPages.multipliedReportingOverflow(by: pageBytes)
        let available = overflow || usedBytes >= physicalBytes ? 0 : physicalBytes - usedBytes
        return Int(clamping: available)
    }

    #if canImport(Darwin)
        /// ``memoryNotInUse(physicalBytes:pageBytes:wiredPages:compressorPages:anonymousPages:purgeablePages:)``
        /// of the counts `host_statistics64(HOST_VM_INFO64)` gives; nil when the call fails.
        private static func darwinMemoryNotInUse() -> Int? {
            let host = mach_host_self()
            var statistics = vm_statistics64_data_t()
            // HOST_VM_INFO64_COUNT, a macro with a cast that Swift does not import.
            var count = mach_msg_type_number_t(
                MemoryLayout<vm_statistics64_data_t>.size / MemoryLayout<integer_t>.size)
            let result = withUnsafeMutablePointer(to: &statistics) {
                $0.withMemoryRebound(to: integer_t.self, capacity: Int(count)) {
                    host_statistics64(host, HOST_VM_INFO64, $0, &count)
                }
            }
            var pageBytes: vm_size_t = 0
            guard result == KERN_SUCCESS, host_page_size(host, &pageBytes) == KERN_SUCCESS else { return nil }
            return memoryNotInUse(
                physicalBytes: ProcessInfo.processInfo.physicalMemory, pageBytes: UInt64(pageBytes),
                wiredPages: UInt64(statistics.wire_count), compressorPages: UInt64(statistics.compressor_page_count),
                anonymousPages: UInt64(statistics.internal_page_count),
                purgeablePages: UInt64(statistics.purgeable_count))
        }
    #endif

    /// `MemAvailable` of a `/proc/meminfo` text, in bytes (the file gives kB).
    static func memAvailable(inMeminfo text: String) -> Int? {
        for line in text.split(separator: "\n") where line.hasPrefix("MemAvailable:") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 2, let kilobytes = Int(fields[1]) else { return nil }
            let (bytes, overflow) = kilobytes.multipliedReportingOverflow(by: 1024)
            return overflow ? Int.max : bytes
        }
        return nil
    }

    /// Free bytes an unprivileged user may fill on the volume holding `url` (or, when it does
    /// not exist yet, its nearest existing parent); nil when the system does not say.
    public static func availableDiskBytes(at url: URL) -> Int? {
        guard let path = nearestExistingPath(url.physicallyStandardized.path)?.path else { return nil }
        var status = statvfs()
        guard statvfs(path, &status) == 0 else { return nil }
        let (bytes, overflow) = UInt64(status.f_bavail).multipliedReportingOverflow(by: UInt64(status.f_frsize))
        return overflow || bytes > UInt64(Int.max) ? Int.max : Int(bytes)
    }
}

/// Why an export is refused before it starts: the machine cannot hold it.
public enum ResourceError: ExporterError, Equatable {
    /// Converting needs more memory than is available: the machine's, or what `limit`, a limit
    /// of this process, leaves (``SystemResources/availableMemory(startingThreads:)``).
    case notEnoughMemory(
        model: String, neededBytes: Int, availableBytes: Int, peakTensor: String, limit: MemoryLimit? = nil)
    /// A step other than a conversion needs more memory than is available (nil `limit`: the
    /// machine's memory).
    case notEnoughMemoryFor(MemoryStep, neededBytes: Int, availableBytes: Int, limit: MemoryLimit?)
    /// A thread of the `needed` ones a run starts at once could not be started (``WorkerThreads``),
    /// for `reason`, after `started`; `limit` is the limit that most likely stopped it.
    case cannotStartThread(needed: Int, started: Int, reason: String, limit: ThreadLimit?)
    /// The artifacts (`what`) would not fit in the free space of their volume.
    case notEnoughDisk(directory: String, neededBytes: Int, availableBytes: Int, what: DiskNeed = .bundle)

    /// What needs the memory, besides a conversion.
    public enum MemoryStep: Equatable, Sendable {
        /// Compiling the bundle `bundle` (its name) for `devices` devices (`exporter compile`; nil:
        /// not known before the bundle is read).
        case compile(bundle: String, devices: Int?)
        /// Converting the bundle `bundle` (its folder's name) to a Core ML package (`exporter convert`).
        case package(bundle: String)
        /// A farm's own process, which plans its jobs and writes its report; each job's export
        /// and compiles run in processes of their own and check their own.
        case farm

        /// The subject and verb of the message.
        var needs: String {
            switch self {
            case .compile(let bundle, let devices?):
                return "compiling '\(bundle)' for \(devices) \(devices == 1 ? "device" : "devices") needs"
            case .compile(let bundle, nil):
                return "compiling '\(bundle)' needs"
            case .package(let bundle): return "converting '\(bundle)' to a Core ML package needs"
            case .farm: return "the farm process itself (its jobs run in processes of their own) needs"
            }
        }
    }

    /// What needs the disk space.
    public enum DiskNeed: Equatable, Sendable {
        /// A portable bundle.
        case bundle
        /// Compiled artifacts of a bundle already written.
        case compiledArtifacts
        /// A bundle and its compiled artifacts (`exporter <model> --compile`).
        case bundleAndCompiledArtifacts
        /// A Core ML package of a bundle already written (`exporter convert`).
        case package
        /// A bundle and its Core ML package (`exporter <model> --format mlpackage`), with its
        /// compiled artifacts when `compiledArtifacts` (`--compile` too).
        case bundleAndPackage(compiledArtifacts: Bool)

        /// The subject and verb of the message.
        var needs: String {
            switch self {
            case .bundle: return "the bundle needs"
            case .compiledArtifacts: return "the compiled artifacts need"
            case .bundleAndCompiledArtifacts: return "the bundle and its compiled artifacts need"
            case .package: return "the Core ML package needs"
            case .bundleAndPackage(let compiled):
                return compiled
                    ? "the bundle, its compiled artifacts and its Core ML package need"
                    : "the bundle and its Core ML package need"
            }
        }

        /// The option that chooses where the output goes.
        var outputOption: String {
            switch self {
            case .package: return "--output"
            default: return "--output-dir"
            }
        }
    }

    /// The message: what is needed, what is available, and what to do about it.
    public var description: String {
        switch self {
        case .notEnoughMemory(let model, let needed, let available, let tensor, let limit):
            let need =
                "converting '\(model)' needs about \(Format.mebibytes(needed)) of memory (at its peak, while "
                + "'\(tensor)' is compressed)"
            guard let limit else {
                return need + " but \(Format.mebibytes(available)) is available; "
                    + "close other programs or export on a machine with more memory"
            }
            return need + ResourceError.limitShortfall(needed: needed, available: available, limit: limit)
        case .notEnoughMemoryFor(let step, let needed, let available, let limit):
            let need = "\(step.needs) about \(Format.mebibytes(needed)) of memory"
            guard let limit else {
                return need + " but \(Format.mebibytes(available)) is available; close other programs or run it on a "
                    + "machine with more memory"
            }
            return need + ResourceError.limitShortfall(needed: needed, available: available, limit: limit)
        case .cannotStartThread(let needed, let started, let reason, let limit):
            return "cannot start a thread: \(reason); "
                + (limit.map { $0.explanation + ": it" } ?? "this run")
                + " needs \(needed) threads besides those running, and \(started) could be started"
        case .notEnoughDisk(let directory, let needed, let available, let what):
            return "\(what.needs) about \(Format.mebibytes(needed)) but '\(directory)' has "
                + "\(Format.mebibytes(available)) free; free some space or choose another \(what.outputOption)"
        }
    }

    /// `resourceLimit` (71).
    public var exitStatus: ExitStatus { .resourceLimit }

    /// The end of a message whose `needed` bytes exceed the `available` ones `limit` leaves.
    private static func limitShortfall(needed: Int, available: Int, limit: MemoryLimit) -> String {
        " but the \(limit.title) of this process (\(limit.command)) leaves it \(Format.mebibytes(available)); "
            + "raise the limit by \(Format.mebibytes(needed - available)) or more"
    }
}
