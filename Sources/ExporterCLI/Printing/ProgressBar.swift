import Foundation
import ExporterKit

/// A one-line progress bar on standard error, drawn only on a terminal: tensors done,
/// megabytes of the weights file done, parameters per second and time left. In a pipe it
/// stays silent.
final class ProgressBar {
    private let context: CommandContext
    private let start = Date()
    private var lastDraw = Date.distantPast

    init(context: CommandContext) { self.context = context }

    func update(_ progress: ExportProgress) {
        guard context.errorIsTerminal else { return }
        let now = Date()
        let finished = progress.tensorsDone == progress.tensorCount
        guard finished || now.timeIntervalSince(lastDraw) >= 0.1 else { return }
        lastDraw = now
        let fraction = Double(progress.parametersDone) / Double(max(progress.parameterCount, 1))
        let width = 24
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
        let elapsed = now.timeIntervalSince(start)
        let rate = Double(progress.parametersDone) / max(elapsed, 1e-3)
        let remaining = fraction > 0 ? elapsed * (1 - fraction) / fraction : 0
        let line = String(
            format: "\r%@ %3.0f%%  %d/%d tensors  %@  %.0fM params/s  ETA %.0fs ", bar, fraction * 100,
            progress.tensorsDone, progress.tensorCount, Self.bytes(progress.bytesDone, of: progress.byteCount),
            rate / 1e6, remaining)
        context.writeError(line + (finished ? "\r\u{1B}[K" : ""))
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
