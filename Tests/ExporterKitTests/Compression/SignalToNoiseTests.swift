import Testing

@testable import ExporterKit

extension CompressionTests {
    @Suite("signal-to-noise ratio")
    struct SignalToNoiseTests {
        @Test("known answers: 10·log10(signal / error), ∞ when exact, −∞ when there is only error")
        func knownAnswers() {
            #expect(SignalToNoise.decibels(signalPower: 100, squaredError: 1) == 20)
            #expect(abs(SignalToNoise.decibels(signalPower: 1, squaredError: 1000) + 30) < 1e-12)
            #expect(SignalToNoise.decibels(signalPower: 5, squaredError: 0) == .infinity)
            #expect(SignalToNoise.decibels(signalPower: 0, squaredError: 0) == .infinity)
            #expect(SignalToNoise.decibels(signalPower: 0, squaredError: 1) == -.infinity)
        }
    }
}
