extension ExportError {
    /// The lines of the message: `noWeights` lists what to do, one way a line. Its fields come
    /// from the preset catalog (id, repository) and the cache's location, not from a file read.
    public var descriptionLines: [String] {
        description.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    }
}
