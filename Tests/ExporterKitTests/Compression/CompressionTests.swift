import Testing

/// Parent suite of the compression tests, so that `swift test --filter Compression` selects them.
@Suite("Compression")
enum CompressionTests {}
