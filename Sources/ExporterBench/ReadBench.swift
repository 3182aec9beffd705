/// Safetensors reading speed against `cat` of the same files.
enum ReadBench {
    static func run(_ arguments: [String]) throws {}
}
