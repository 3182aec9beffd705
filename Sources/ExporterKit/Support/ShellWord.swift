import Foundation

/// Words of the command lines the tool suggests, written so that a POSIX shell reads them back
/// as they were.
public enum ShellWord {
    /// `text` in single quotes, each of its own single quotes written `'\''`.
    public static func quoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: #"'\''"#) + "'"
    }
}
