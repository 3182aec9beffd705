import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What the machine can give an export: memory now available and free disk space.
public enum SystemResources {
    /// Cores this process may use, read once: Foundation opens and reads two cgroup files on
    /// every `activeProcessorCount`, which each tensor's compression asked for.
    public static let activeCores = max(1, ProcessInfo.processInfo.activeProcessorCount)

    /// Memory available to a new workload: `MemAvailable` of `/proc/meminfo` on Linux (what
    /// the kernel can hand out without swapping), else the physical memory.
    public static func availableMemoryBytes() -> Int? {
        #if os(Linux)
            if let text = try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8),
                let bytes = memAvailable(inMeminfo: text)
            {
                return bytes
            }
        #endif
        let physical = ProcessInfo.processInfo.physicalMemory
        return physical > 0 && physical <= UInt64(Int.max) ? Int(physical) : nil
    }

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
        var path = url.standardizedFileURL.path
        while !FileManager.default.fileExists(atPath: path), path != "/", !path.isEmpty {
            path = (path as NSString).deletingLastPathComponent
        }
        var status = statvfs()
        guard statvfs(path, &status) == 0 else { return nil }
        let (bytes, overflow) = UInt64(status.f_bavail).multipliedReportingOverflow(by: UInt64(status.f_frsize))
        return overflow || bytes > UInt64(Int.max) ? Int.max : Int(bytes)
    }
}

/// Why an export is refused before it starts: the machine cannot hold it.
public enum ResourceError: ExporterError, Equatable {
    /// Converting needs more memory than the machine has available.
    case notEnoughMemory(model: String, neededBytes: Int, availableBytes: Int, peakTensor: String)
    /// The artifacts (`what`) would not fit in the free space of their volume.
    case notEnoughDisk(directory: String, neededBytes: Int, availableBytes: Int, what: DiskNeed = .bundle)

    /// What needs the disk space.
    public enum DiskNeed: Equatable, Sendable {
        /// A portable bundle.
        case bundle
        /// Compiled artifacts of a bundle already written.
        case compiledArtifacts
        /// A bundle and its compiled artifacts (`exporter <model> --compile`).
        case bundleAndCompiledArtifacts

        /// The subject and verb of the message.
        var needs: String {
            switch self {
            case .bundle: return "the bundle needs"
            case .compiledArtifacts: return "the compiled artifacts need"
            case .bundleAndCompiledArtifacts: return "the bundle and its compiled artifacts need"
            }
        }
    }

    /// The message: what is needed, what is available, and what to do about it.
    public var description: String {
        switch self {
        case .notEnoughMemory(let model, let needed, let available, let tensor):
            return "converting '\(model)' needs about \(Format.mebibytes(needed)) of memory (at its peak, while "
                + "'\(tensor)' is compressed) but \(Format.mebibytes(available)) is available; "
                + "close other programs or export on a machine with more memory"
        case .notEnoughDisk(let directory, let needed, let available, let what):
            return "\(what.needs) about \(Format.mebibytes(needed)) but '\(directory)' has "
                + "\(Format.mebibytes(available)) free; free some space or choose another --output-dir"
        }
    }

    /// `resourceLimit` (71).
    public var exitStatus: ExitStatus { .resourceLimit }
}
