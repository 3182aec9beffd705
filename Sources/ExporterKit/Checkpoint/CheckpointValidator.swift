/// Why a checkpoint's tensors do not fit its architecture.
public enum CheckpointMismatch: ExporterError, Equatable {
    /// A tensor the architecture expects is absent.
    case missingTensor(checkpoint: String, tensor: String, expectedShape: [Int])
    /// The untied head is absent while `tie_word_embeddings` is false, or absent (`keyGiven` false),
    /// which is false.
    case missingHead(checkpoint: String, keyGiven: Bool)
    /// A tensor has another shape than the config implies.
    case wrongShape(file: String, tensor: String, expected: [Int], found: [Int])
    /// A tensor is not stored as floating point.
    case notFloat(file: String, tensor: String, dtype: String)

    /// The message, naming the checkpoint or file, the tensor and the shapes.
    public var description: String {
        func shape(_ dims: [Int]) -> String { "[" + dims.map(String.init).joined(separator: ", ") + "]" }
        switch self {
        case .missingTensor(let checkpoint, let tensor, let expected):
            return "checkpoint '\(checkpoint)' has no tensor '\(tensor)' (expected shape \(shape(expected)))"
        case .missingHead(let checkpoint, let keyGiven):
            return "checkpoint '\(checkpoint)' has no 'lm_head.weight' and its config "
                + (keyGiven
                    ? "sets tie_word_embeddings to false"
                    : "does not set tie_word_embeddings, which is false when absent: set it to true if the head "
                        + "shares the embedding's weights")
        case .wrongShape(let file, let tensor, let expected, let found):
            return "'\(file)': tensor '\(tensor)' has shape \(shape(found)), the config implies \(shape(expected))"
        case .notFloat(let file, let tensor, let dtype):
            return "'\(file)': tensor '\(tensor)' is stored as \(dtype); expected BF16, F16 or F32"
        }
    }

    /// `badInput` (65): the checkpoint does not match its config.
    public var exitStatus: ExitStatus { .badInput }
}

/// Checks a checkpoint against the tensors its architecture expects, before any weight is read.
public enum CheckpointValidator {
    /// The floating-point storage types the reader converts.
    static let floatTypes: Set<TensorDType> = [.bf16, .f16, .f32]

    /// Checks every planned tensor is present with its shape and a float dtype.
    /// - Returns: warnings, e.g. the unexpected tensors listed in one line.
    /// - Throws: `CheckpointMismatch` for the first problem, naming file, tensor and both shapes.
    public static func validate(_ weights: CheckpointWeights, against tensors: [TensorSpec], config: ModelConfig)
        throws
        -> [String]
    {
        let checkpoint = weights.directory.path
        for tensor in tensors {
            guard let found = weights.tensors[tensor.name] else {
                if tensor.role == .head, !config.tieWordEmbeddings {
                    throw CheckpointMismatch.missingHead(
                        checkpoint: checkpoint, keyGiven: config.raw["tie_word_embeddings"]?.boolValue != nil)
                }
                throw CheckpointMismatch.missingTensor(
                    checkpoint: checkpoint, tensor: tensor.name, expectedShape: tensor.shape)
            }
            guard floatTypes.contains(found.dtype) else {
                throw CheckpointMismatch.notFloat(
                    file: found.fileURL.path, tensor: tensor.name, dtype: found.dtype.rawValue)
            }
            guard found.shape == tensor.shape else {
                throw CheckpointMismatch.wrongShape(
                    file: found.fileURL.path, tensor: tensor.name, expected: tensor.shape, found: found.shape)
            }
        }
        let expected = Set(tensors.map(\.name))
        var unexpected = weights.tensorNames.filter { !expected.contains($0) }
        var warnings: [String] = []
        // A head saved beside a tied config: the model the bundle computes is not the one it was
        // trained as, if that head was trained apart from the embedding.
        if let head = unexpected.firstIndex(of: headName), config.tieWordEmbeddings {
            unexpected.remove(at: head)
            warnings.append(
                "checkpoint has '\(headName)', but its config ties the head to the embedding (tie_word_embeddings "
                    + "true): the bundle's head is 'model.embed_tokens.weight' and '\(headName)' is not exported; if "
                    + "it was trained apart from the embedding, set tie_word_embeddings to false")
        }
        guard !unexpected.isEmpty else { return warnings }
        let shown = unexpected.prefix(8).joined(separator: ", ")
        let more = unexpected.count > 8 ? " and \(unexpected.count - 8) more" : ""
        return warnings + [
            "checkpoint has \(unexpected.count) tensor(s) the architecture does not use, not exported: \(shown)\(more)"
        ]
    }

    /// The untied head's name, in every family.
    static let headName = "lm_head.weight"
}
