import Foundation

/// How closely an artifact's logits follow its checkpoint's on one token sequence: top-1
/// agreement, the largest logit difference, the KL divergence per position and the
/// perplexity of the sequence under each. Probabilities are computed in double precision.
public struct ForwardComparison: Sendable {
    /// A token id and its logit.
    public struct Candidate: Equatable, Sendable {
        /// Token id.
        public let token: Int
        /// Its logit.
        public let logit: Float
    }

    /// What one side computed at one position.
    public struct Side: Sendable {
        /// The five highest logits, highest first (ties: lower id first).
        public let top5: [Candidate]
        /// Log-probability of the next token of the sequence; nil at the last position.
        public let nextTokenLogProbability: Double?
    }

    /// One position of the sequence.
    public struct Position: Sendable {
        /// Index in the sequence.
        public let index: Int
        /// The token at this position.
        public let token: Int
        /// The token that follows, predicted here; nil at the last position.
        public let nextToken: Int?
        /// The checkpoint's side.
        public let source: Side
        /// The artifact's side.
        public let artifact: Side
        /// `KL(source ‖ artifact)` of the two next-token distributions, in nats.
        public let klDivergence: Double
        /// Largest absolute difference between the two logit vectors.
        public let maxLogitDifference: Float
        /// Whether both put the same token first.
        public let top1Agrees: Bool
    }

    /// Every position.
    public let positions: [Position]
    /// `10·log10(Σ s² / Σ (s − a)²)` over every logit, in dB, where `s` and `a` are the source's
    /// and the artifact's logits each centred on its position's mean (softmax ignores a common
    /// shift): scale-free, unlike agreement and KL, which depend on how peaked the distributions are.
    public let logitSNR: Double

    /// Fraction of positions whose top-1 tokens agree.
    public var top1Agreement: Double {
        positions.isEmpty ? 0 : Double(positions.filter(\.top1Agrees).count) / Double(positions.count)
    }
    /// Largest absolute logit difference over the sequence.
    public var maxLogitDifference: Float { positions.map(\.maxLogitDifference).max() ?? 0 }
    /// Mean KL divergence per position, in nats.
    public var meanKL: Double {
        positions.isEmpty ? 0 : positions.reduce(0) { $0 + $1.klDivergence } / Double(positions.count)
    }
    /// Largest KL divergence of a position, in nats.
    public var maxKL: Double { positions.map(\.klDivergence).max() ?? 0 }
    /// Perplexity of the sequence under the checkpoint: `exp(−mean log p(next))`; nil for one token.
    public var sourcePerplexity: Double? {
        ForwardComparison.perplexity(positions.compactMap(\.source.nextTokenLogProbability))
    }
    /// Perplexity of the sequence under the artifact; nil for one token.
    public var artifactPerplexity: Double? {
        ForwardComparison.perplexity(positions.compactMap(\.artifact.nextTokenLogProbability))
    }

    /// Compares the logits of `tokens` computed from the checkpoint (`source`) and the artifact.
    public init(tokens: [Int], source: [[Float]], artifact: [[Float]]) {
        var positions: [Position] = []
        var signal = 0.0
        var noise = 0.0
        for index in 0..<min(tokens.count, source.count, artifact.count) {
            let s = source[index]
            let a = artifact[index]
            let next = index + 1 < tokens.count ? tokens[index + 1] : nil
            let logS = ForwardComparison.logSoftmax(s)
            let logA = ForwardComparison.logSoftmax(a)
            var kl = 0.0
            var largest: Float = 0
            let width = min(s.count, a.count)
            let meanS = s.prefix(width).reduce(0.0) { $0 + Double($1) } / Double(max(width, 1))
            let meanA = a.prefix(width).reduce(0.0) { $0 + Double($1) } / Double(max(width, 1))
            for k in 0..<width {
                kl += Foundation.exp(logS[k]) * (logS[k] - logA[k])
                largest = max(largest, abs(s[k] - a[k]))
                let centred = Double(s[k]) - meanS
                let difference = centred - (Double(a[k]) - meanA)
                signal += centred * centred
                noise += difference * difference
            }
            let topS = ForwardComparison.top(s, 5)
            let topA = ForwardComparison.top(a, 5)
            positions.append(
                Position(
                    index: index, token: tokens[index], nextToken: next,
                    source: Side(top5: topS, nextTokenLogProbability: next.map { logS[$0] }),
                    artifact: Side(top5: topA, nextTokenLogProbability: next.map { logA[$0] }),
                    klDivergence: max(kl, 0), maxLogitDifference: largest,
                    top1Agrees: topS.first?.token == topA.first?.token))
        }
        self.positions = positions
        logitSNR = SignalToNoise.decibels(signalPower: signal, squaredError: noise)
    }

    /// `log softmax(x)` in double precision.
    static func logSoftmax(_ logits: [Float]) -> [Double] {
        let maximum = Double(logits.max() ?? 0)
        let total = logits.reduce(0.0) { $0 + Foundation.exp(Double($1) - maximum) }
        let logTotal = maximum + Foundation.log(total)
        return logits.map { Double($0) - logTotal }
    }

    /// The `count` highest logits, highest first, ties broken by the lower token id.
    static func top(_ logits: [Float], _ count: Int) -> [Candidate] {
        var best: [Candidate] = []
        for (token, logit) in logits.enumerated() {
            if best.count == count, let last = best.last, !(logit > last.logit) { continue }
            let position = best.firstIndex { logit > $0.logit } ?? best.count
            best.insert(Candidate(token: token, logit: logit), at: position)
            if best.count > count { best.removeLast() }
        }
        return best
    }

    static func perplexity(_ logProbabilities: [Double]) -> Double? {
        guard !logProbabilities.isEmpty else { return nil }
        return Foundation.exp(-logProbabilities.reduce(0, +) / Double(logProbabilities.count))
    }
}

extension ForwardComparison {
    /// The comparison as JSON: the summary, then per position the top-5 token ids with their
    /// logits and the log-probability of the next token, for source and artifact alike, so any
    /// other implementation can be compared number for number.
    public var json: JSONValue {
        func number(_ value: Double?) -> JSONValue {
            guard let value, value.isFinite else { return .null }
            return .number("\(value)")
        }
        func side(_ side: Side) -> JSONValue {
            .object(
                JSONObject([
                    (
                        "top5",
                        .array(
                            side.top5.map {
                                .object(
                                    JSONObject([("token", .number("\($0.token)")), ("logit", number(Double($0.logit)))])
                                )
                            })
                    ),
                    ("next_token_logprob", number(side.nextTokenLogProbability)),
                ]))
        }
        return .object(
            JSONObject([
                ("tokens", .array(positions.map { .number("\($0.token)") })),
                ("top1_agreement", number(top1Agreement)),
                ("max_logit_difference", number(Double(maxLogitDifference))),
                ("mean_kl", number(meanKL)),
                ("max_kl", number(maxKL)),
                ("logit_snr_db", number(logitSNR)),
                ("source_perplexity", number(sourcePerplexity)),
                ("artifact_perplexity", number(artifactPerplexity)),
                (
                    "positions",
                    .array(
                        positions.map { position in
                            .object(
                                JSONObject([
                                    ("index", .number("\(position.index)")),
                                    ("token", .number("\(position.token)")),
                                    ("next_token", position.nextToken.map { .number("\($0)") } ?? .null),
                                    ("kl", number(position.klDivergence)),
                                    ("max_logit_difference", number(Double(position.maxLogitDifference))),
                                    ("top1_agrees", .bool(position.top1Agrees)),
                                    ("source", side(position.source)),
                                    ("artifact", side(position.artifact)),
                                ]))
                        })
                ),
            ]))
    }
}
