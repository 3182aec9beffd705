/// Arithmetic on numbers read from files (manifests, headers) that a hostile or broken input
/// can make huge: results clamp at the bounds of `Int` instead of trapping, and the checks
/// that follow report the mismatch.
extension Int {
    /// `self + other`, clamped to `Int.min...Int.max`.
    public func saturatingAdding(_ other: Int) -> Int {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }

    /// `⌈self / divisor⌉` for `self ≥ 0` and `divisor > 0`, without the `self + divisor − 1`
    /// that overflows for a huge divisor.
    public func dividedRoundingUp(by divisor: Int) -> Int {
        self / divisor + (self % divisor == 0 ? 0 : 1)
    }

    /// `self × other`, clamped to `Int.min...Int.max`.
    public func saturatingMultiplying(_ other: Int) -> Int {
        let (product, overflow) = multipliedReportingOverflow(by: other)
        return overflow ? ((self < 0) != (other < 0) ? .min : .max) : product
    }
}

extension Sequence where Element == Int {
    /// The sum, clamped instead of trapping on overflow.
    public var saturatingSum: Int { reduce(0) { $0.saturatingAdding($1) } }

    /// The product, clamped instead of trapping on overflow.
    public var saturatingProduct: Int { reduce(1) { $0.saturatingMultiplying($1) } }
}
