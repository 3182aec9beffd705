import ExporterKit
import Foundation

extension CommandContext {
    /// Overrides the available memory, in bytes: for tests only (README "Resource limits").
    static let availableMemoryVariable = "EXPORTER_TEST_AVAILABLE_MEMORY"
    /// Overrides the free disk space, in bytes: for tests only (README "Resource limits").
    static let availableDiskVariable = "EXPORTER_TEST_AVAILABLE_DISK"

    /// Memory the machine can give now: a farm's budget for its exports together (each job's
    /// process limits are its own, and its export checks them).
    func availableMemoryBytes() -> Int? {
        if let override = environment[CommandContext.availableMemoryVariable].flatMap(Int.init) { return override }
        return SystemResources.availableMemoryBytes()
    }

    /// Memory a run that will start `threads` threads may take now: the machine's, or less where a
    /// limit of this process (`ulimit -v`, `ulimit -d`) leaves less.
    func availableMemory(startingThreads threads: Int) -> AvailableMemory? {
        if let override = environment[CommandContext.availableMemoryVariable].flatMap(Int.init) {
            return AvailableMemory(bytes: override)
        }
        return SystemResources.availableMemory(startingThreads: threads)
    }

    /// Free space on the volume that will hold `directory`.
    func availableDiskBytes(at directory: URL) -> Int? {
        if let override = environment[CommandContext.availableDiskVariable].flatMap(Int.init) { return override }
        return SystemResources.availableDiskBytes(at: directory)
    }
}
