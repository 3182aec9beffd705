import Foundation

/// Activation statistics gathered by running a calibration text through the checkpoint with
/// the reference forward pass: for every decoder linear weight, the mean energy `E[x_c²]` of
/// each input column over the text. Importance-weighted palettisation weighs each weight's
/// error by it, since a linear layer's output error is `Σ_c x_c · (w_c − ŵ_c)`.
public struct Calibration: Sendable {
    /// The manifest's record of the calibration text: its tokens and their CRC-32.
    public let record: Manifest.CalibrationRecord
    /// Mean squared activation per input column, by weight name.
    public let energy: [String: [Float]]

    /// Runs `tokens` through `weights` and gathers the energies.
    /// - Parameter progress: told before the first layer and after every layer and the head.
    /// - Throws: `ReferenceModelError` for unusable tokens, the weights' read errors.
    public init(
        architecture: ReferenceArchitecture, weights: ReferenceWeights, tokens: [Int],
        progress: (WorkProgress) -> Void = { _ in }
    ) throws {
        var sums: [String: [Double]] = [:]
        let model = ReferenceModel(architecture: architecture, weights: weights)
        let observe = { (name: String, x: [Float], rows: Int, width: Int) in
            var total = sums[name] ?? [Double](repeating: 0, count: width)
            for row in 0..<rows {
                for column in 0..<width {
                    let value = Double(x[row * width + column])
                    total[column] += value * value
                }
            }
            sums[name] = total
        }
        _ = try model.logits(tokens: tokens, observe: observe) { done in
            progress(
                WorkProgress(
                    done: done, total: model.stepCount,
                    stage: "calibration pass, " + ReferenceModel.stage(done, of: architecture)))
        }
        energy = sums.mapValues { $0.map { Float($0 / Double(max(tokens.count, 1))) } }
        record = Manifest.CalibrationRecord(tokens: tokens)
    }
}
