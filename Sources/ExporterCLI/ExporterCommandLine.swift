import ExporterKit

/// Entry point of the command-line tool.
public enum ExporterCommandLine {
    /// Runs the tool with the process arguments and exits with its status.
    public static func main() {}
}
