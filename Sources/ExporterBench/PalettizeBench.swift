/// Palettiser throughput on synthetic weights.
enum PalettizeBench {
    static func run(_ arguments: [String]) throws {}
}
