import ExporterKit
import Foundation

/// A one-line progress bar on standard error, drawn only on a terminal: the share done, what
/// is under way and the time left, redrawn at most ten times a second and cleared when done.
/// In a pipe it stays silent.
final class ProgressBar {
    private let context: CommandContext
    /// When the first update came: rates and time left count from there.
    private var start: Date?
    private var lastDraw = Date.distantPast
    /// Set once the line is finished and cleared: later updates draw nothing.
    private var cleared = false

    init(context: CommandContext) { self.context = context }

    /// An export: tensors done, megabytes of the weights file done, parameters per second.
    func update(_ progress: ExportProgress) {
        let fraction = Double(progress.parametersDone) / Double(max(progress.parameterCount, 1))
        let rate = Double(progress.parametersDone) / max(elapsed(), 1e-3)
        draw(
            fraction: fraction, finished: progress.tensorsDone == progress.tensorCount,
            detail: "\(progress.tensorsDone)/\(progress.tensorCount) tensors  "
                + "\(Self.bytes(progress.bytesDone, of: progress.byteCount))  "
                + String(format: "%.0fM params/s", rate / 1e6))
    }

    /// Any other long step: its stage, and the bytes done when it counts bytes.
    func update(_ progress: WorkProgress) {
        draw(
            fraction: Double(progress.done) / Double(max(progress.total, 1)), finished: progress.done >= progress.total,
            detail: progress.countsBytes
                ? "\(Self.bytes(progress.done, of: progress.total))  \(progress.stage)" : progress.stage)
    }

    /// Seconds since the first update (which starts the clock).
    private func elapsed() -> TimeInterval {
        let now = Date()
        if start == nil { start = now }
        return now.timeIntervalSince(start ?? now)
    }

    private func draw(fraction: Double, finished: Bool, detail: String) {
        guard context.errorIsTerminal, !cleared else { return }
        let now = Date()
        guard finished || now.timeIntervalSince(lastDraw) >= 0.1 else { return }
        lastDraw = now
        let width = 24
        let filled = Int(min(max(fraction, 0), 1) * Double(width))
        let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
        // Nothing done yet: no estimate.
        let remaining = fraction > 0 ? String(format: "%.0fs", elapsed() * (1 - fraction) / fraction) : "--"
        let line = Self.fitted(
            bar: bar, percent: String(format: "%3.0f%%", fraction * 100), detail: detail, eta: "ETA \(remaining) ",
            columns: context.columns)
        // Erased before it is drawn again: a shorter line leaves nothing of the longer one.
        context.writeError(context.clearLine + line + (finished ? context.clearLine : ""))
        cleared = finished
    }

    /// The line within `columns - 1` characters (a line that reaches the last column wraps on
    /// some terminals, and every redraw would then leave a line behind): the bar goes first,
    /// then the detail is cut short, then the whole.
    static func fitted(bar: String, percent: String, detail: String, eta: String, columns: Int) -> String {
        let limit = max(columns - 1, 1)
        let full = "\(bar) \(percent)  \(detail)  \(eta)"
        if full.count <= limit { return full }
        let fixed = "\(percent)    \(eta)".count
        if fixed + detail.count <= limit { return "\(percent)  \(detail)  \(eta)" }
        if fixed + 1 < limit { return "\(percent)  \(detail.prefix(limit - fixed - 1))…  \(eta)" }
        return String("\(percent) \(eta)".prefix(limit))
    }

    /// `done/total unit` in the decimal unit that keeps the total under 1,000 (412/892 MB,
    /// 1.2/3.9 GB), one decimal below 100 of it.
    static func bytes(_ done: Int, of total: Int) -> String {
        let units = ["B", "kB", "MB", "GB", "TB"]
        var scale = 1.0
        var unit = 0
        while Double(total) / scale >= 1000, unit < units.count - 1 {
            scale *= 1000
            unit += 1
        }
        let places = unit > 0 && Double(total) / scale < 100 ? 1 : 0
        return String(format: "%.\(places)f/%.\(places)f ", Double(done) / scale, Double(total) / scale) + units[unit]
    }
}
