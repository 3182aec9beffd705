import Foundation

/// How file names compare on the file systems artifacts are written to.
///
/// macOS's default volume format (APFS, case-insensitive) sees `Qwen.aimodel` and
/// `qwen.aimodel` as one folder, and `é` composed or decomposed as one letter; Linux's see
/// two. Whatever writes names chosen by users or tables checks them with ``key(_:)``, so that a
/// clash is refused on both systems alike rather than one artifact silently replacing another
/// on a Mac only.
enum FileSystemName {
    /// The key under which a case-insensitive file system sees `name`: names with equal keys
    /// are one entry there. (Swift compares strings by canonical equivalence, so composed and
    /// decomposed forms are already equal.)
    static func key(_ name: String) -> String { name.lowercased() }

    /// Whether `first` and `second` are one entry on a case-insensitive file system.
    static func clash(_ first: String, _ second: String) -> Bool { key(first) == key(second) }

    /// The first two of `names` that Swift takes as one string but whose bytes differ (the same
    /// text in two Unicode normalization forms: `é` composed, U+00E9, and decomposed, `e` and
    /// U+0301), if any. Linux's file systems hold them as two files; every dictionary, set and
    /// comparison of this tool (Swift's string equality) takes them as one, so a folder or an
    /// index naming both is refused rather than read as if it held one.
    static func equivalentPair(_ names: some Sequence<String>) -> (first: String, second: String)? {
        var seen: [String: String] = [:]
        for name in names {
            if let earlier = seen[name] {
                if !earlier.utf8.elementsEqual(name.utf8) { return (earlier, name) }
            } else {
                seen[name] = name
            }
        }
        return nil
    }

    /// Whether `first` comes before `second` by their UTF-8 bytes: an order that tells apart
    /// the forms Swift's `<` takes as equal, so that messages naming them do not depend on the
    /// order a folder or a dictionary gave.
    static func byteOrder(_ first: String, _ second: String) -> Bool {
        first.utf8.lexicographicallyPrecedes(second.utf8)
    }

    /// A name as a message shows it when its bytes matter: every scalar outside ASCII as
    /// `\u{XX}`, so that two forms of one text read differently (`\u{E9}`, `e\u{301}`).
    static func shownByScalars(_ name: String) -> String {
        var result = ""
        for scalar in name.unicodeScalars {
            if scalar.isASCII, !scalar.isControlCharacter {
                result.unicodeScalars.append(scalar)
            } else {
                result += scalar.shownEscaped
            }
        }
        return result
    }
}

extension URL {
    /// The file `path` names, a relative one from the folder `base`, as the kernel would open
    /// it (``physicallyStandardized``). `URL(fileURLWithPath:relativeTo:)` resolves a relative
    /// path's `..` as text, before any link in it is seen.
    public static func resolvingFilePath(_ path: String, from base: URL) -> URL {
        let basePath = base.path
        if path.hasPrefix("/") { return URL(fileURLWithPath: path).physicallyStandardized }
        // The working folder is gone (its path unknown): the path stays relative, for the
        // kernel to refuse, rather than resolved against `/` as a relative base would have it.
        guard basePath.hasPrefix("/") else { return URL(fileURLWithPath: path) }
        let joined = basePath.hasSuffix("/") ? basePath + path : basePath + "/" + path
        return URL(fileURLWithPath: joined).physicallyStandardized
    }

    /// The absolute file URL with `.` and empty components dropped and each `..` taken as the
    /// kernel takes it: the parent of the folder its prefix resolves to, symbolic links
    /// followed. `standardizedFileURL` drops `link/..` as text, so `ck/link/../q2` named the
    /// `q2` beside the link where the file system means the one beside its target. Links no
    /// `..` follows are kept, so names taken from a path (a model's, an artifact's) stay those
    /// given. A relative URL (its working folder gone) stays as it is.
    public var physicallyStandardized: URL {
        let path = absoluteURL.path
        // Relative (its working folder gone): as given; standardized, `x/..` would go as text.
        guard path.hasPrefix("/") else { return self }
        guard path.contains("..") else { return standardizedFileURL }
        var components: [Substring] = []
        for component in path.split(separator: "/") {
            switch component {
            case ".":
                continue
            case "..":
                // A prefix that does not resolve (missing, or a loop) is left as text: opening
                // the path fails there anyway, and says so.
                if let real = resolvedRealPath("/" + components.joined(separator: "/")) {
                    components = real.split(separator: "/")
                }
                if !components.isEmpty { components.removeLast() }
            default:
                components.append(component)
            }
        }
        return URL(fileURLWithPath: "/" + components.joined(separator: "/"), isDirectory: hasDirectoryPath)
    }
}

/// The folder holding `path`: `/a` for `/a/b`, `/` for `/a`, the empty string for a relative
/// name without a folder (`b`). `NSString.deletingLastPathComponent` traps on a one-character
/// relative name (`x`) in this toolchain's Foundation.
func parentPath(_ path: String) -> String {
    var trimmed = Substring(path)
    while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed.removeLast() }
    guard let slash = trimmed.lastIndex(of: "/") else { return "" }
    if slash == trimmed.startIndex { return "/" }
    var parent = trimmed[..<slash]
    while parent.count > 1, parent.hasSuffix("/") { parent.removeLast() }
    return String(parent)
}

/// The nearest of `path` and its parents that exists (`path` itself when it does), with
/// whether it is a folder; nil when none does, as for a relative path whose working folder
/// was removed (its parents end at an empty path, never at `/`).
public func nearestExistingPath(_ path: String) -> (path: String, isDirectory: Bool)? {
    var current = path
    var isDirectory: ObjCBool = false
    while !FileManager.default.fileExists(atPath: current, isDirectory: &isDirectory) {
        let parent = parentPath(current)
        guard !parent.isEmpty, parent != current else { return nil }
        current = parent
    }
    return (current, isDirectory.boolValue)
}
