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
}
