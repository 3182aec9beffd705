import Testing
@testable import ExporterCLI

@Suite("command line")
struct CommandLineTests {}
