import Foundation
import ExporterKit

/// A one-line progress bar on standard error, drawn only on a terminal: tensors done,
/// parameters, rate and time left. In a pipe it stays silent.
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
            format: "\r%@ %3.0f%%  %d/%d tensors  %.0fM params/s  ETA %.0fs ", bar, fraction * 100,
            progress.tensorsDone, progress.tensorCount, rate / 1e6, remaining)
        context.writeError(line + (finished ? "\r\u{1B}[K" : ""))
    }
}
