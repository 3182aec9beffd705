import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Running processes as Linux's `/proc` shows them: how a test finds the children a farm run
/// started, and sees them end.
public enum ProcessTable {
    /// A process: its id and its command line.
    public struct Entry: Sendable {
        /// The process id.
        public let id: pid_t
        /// Its arguments, the executable first.
        public let arguments: [String]
    }

    /// The live children of `parent` (none where there is no `/proc`).
    public static func children(of parent: pid_t) -> [Entry] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return names.compactMap { name -> Entry? in
            guard let id = pid_t(name), let fields = statFields(id), fields.count > 1,
                fields[1] == String(parent), fields[0] != "Z"
            else { return nil }
            let commandLine = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(id)/cmdline"))) ?? Data()
            return Entry(id: id, arguments: commandLine.split(separator: 0).map { String(decoding: $0, as: UTF8.self) })
        }
    }

    /// Whether the process has ended: gone, or a zombie its new parent has not reaped yet.
    public static func hasEnded(_ id: pid_t) -> Bool {
        guard let fields = statFields(id) else { return true }
        return fields.first == "Z" || fields.first == "X"
    }

    /// Waits up to `seconds` for the process to end.
    /// - Returns: whether it did.
    public static func waitForEnd(_ id: pid_t, seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if hasEnded(id) { return true }
            usleep(5_000)
        }
        return hasEnded(id)
    }

    /// One of the process's signal sets in `/proc/<id>/status` (`SigBlk` blocked, `SigIgn`
    /// ignored, `SigCgt` caught by a handler), signal N as bit N − 1; nil once it has gone.
    public static func signalSet(_ field: String, of id: pid_t) -> UInt64? {
        guard let status = try? String(contentsOfFile: "/proc/\(id)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") })
        else { return nil }
        return UInt64(line.split(separator: "\t").last ?? "", radix: 16)
    }

    /// The set of `signals`, as ``signalSet(_:of:)`` gives them.
    public static func set(of signals: [Int32]) -> UInt64 {
        signals.reduce(0) { $0 | 1 << UInt64($1 - 1) }
    }

    /// `/proc/<id>/stat` after the command name (which may hold spaces): state, parent id, ….
    private static func statFields(_ id: pid_t) -> [String]? {
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(id)/stat")) else { return nil }
        let text = String(decoding: data, as: UTF8.self)
        guard let end = text.range(of: ")", options: .backwards) else { return nil }
        return text[end.upperBound...].split(separator: " ").map(String.init)
    }
}
