import Foundation

/// Signal-to-quantisation-noise ratio.
public enum SignalToNoise {
    /// `10·log10(signalPower / squaredError)` in decibels.
    ///
    /// An exact reproduction (`squaredError == 0`) is `Double.infinity`, even for an all-zero
    /// signal; an all-zero signal reproduced with some error is `-Double.infinity`. JSON
    /// writers must encode infinity explicitly (it has no JSON number).
    public static func decibels(signalPower: Double, squaredError: Double) -> Double {
        guard squaredError > 0 else { return .infinity }
        guard signalPower > 0 else { return -.infinity }
        return 10 * log10(signalPower / squaredError)
    }
}
