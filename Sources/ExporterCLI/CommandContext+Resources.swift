import ExporterKit
import Foundation

extension CommandContext {
    /// Overrides the available memory, in bytes: for tests only (README "Resource limits").
    static let availableMemoryVariable = "EXPORTER_TEST_AVAILABLE_MEMORY"
    /// Overrides the free disk space, in bytes: for tests only (README "Resource limits").
    static let availableDiskVariable = "EXPORTER_TEST_AVAILABLE_DISK"

    /// Memory the machine can give an export now.
    func availableMemoryBytes() -> Int? {
        if let override = environment[CommandContext.availableMemoryVariable].flatMap(Int.init) { return override }
        return SystemResources.availableMemoryBytes()
    }

    /// Free space on the volume that will hold `directory`.
    func availableDiskBytes(at directory: URL) -> Int? {
        if let override = environment[CommandContext.availableDiskVariable].flatMap(Int.init) { return override }
        return SystemResources.availableDiskBytes(at: directory)
    }
}
