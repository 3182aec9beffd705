import Foundation

/// Which compression config an export uses.
public enum CompressionChoice: Equatable, Sendable {
    /// The preset's config, or the platform default (`4bit_weight_palettized_group32`) without a preset.
    case automatic
    /// A shipped config by name (`--compression`), or `none`.
    case named(String)
    /// A config file (`--compression-config`).
    case file(URL)
}

/// Everything the user chose for an export, before resolution.
public struct ExportOptions: Equatable, Sendable {
    /// The default iOS compression of the reference tool.
    public static let defaultCompression = "4bit_weight_palettized_group32"
    /// The reference tool's IOS_DEFAULT_MAX_CONTEXT_LENGTH.
    public static let defaultContextLength = 4096

    /// The model argument: directory, preset name or `org/model`.
    public var model: String
    /// The folder a relative `model` path is from (a farm job's: its farm file's); nil, the process's.
    public var modelBaseDirectory: URL?
    /// Target platform.
    public var platform: Platform = .iOS
    /// `--max-context-length`; nil takes the preset's or the default.
    public var contextLength: Int?
    /// `--compute-precision`; nil takes the preset's.
    public var computePrecision: ComputePrecision?
    /// The compression config.
    public var compression: CompressionChoice = .automatic
    /// `--experimental`.
    public var experimental = false
    /// False with `--disable-embedding-quantization-ios`.
    public var quantizeIOSEmbedding = true
    /// `--preset`: a preset's defaults for a local checkpoint of the same architecture.
    public var presetOverride: String?
    /// `--output-name`.
    public var outputName: String?
    /// `--palette-search`: overrides the compression config's `search` for every palettised
    /// tensor; nil keeps the config's.
    public var paletteSearch: CompressionScheme.Search?

    /// Options for `model` with every default.
    public init(model: String) { self.model = model }
}
