import Foundation

/// A line a farm run or collect says as it works.
public enum FarmMessage: Equatable, Sendable {
    /// A job has ended (and how): progress, which a terminal shows and a log may leave out, as
    /// the report and the final table say it again.
    case jobEnded(String)
    /// A wait (for the folder's lock, for memory), a report left aside, a warning: what a CI
    /// log needs as much as a terminal, as nothing else says it.
    case notice(String)

    /// The line as printed.
    public var text: String {
        switch self {
        case .jobEnded(let text), .notice(let text): return text
        }
    }
}

extension FarmRunner {
    /// `error` as a report records it: its lines (``ExporterError/descriptionLines``, one for
    /// another error), each with its control characters escaped as `\u{XX}`, a newline too, then
    /// joined by newlines. Text taken from inputs (a model's name, a path) can neither forge a
    /// line nor drive a terminal, as in every message of the tool; a message meant to span lines
    /// keeps them.
    static func reportText(_ error: Error) -> String {
        reportText(lines: (error as? ExporterError)?.descriptionLines ?? ["\(error)"])
    }

    /// A job's planning failure as its report records it: the message naming the farm file's key
    /// where the export's would name its flag (`'context'`, not `--max-context-length`), and
    /// exit status 65 where the export's would be a usage error (64): a value of the farm file
    /// is wrong, and there is no command line to fix.
    /// - Parameter farmDirectory: the farm file's folder, when the job's `model` was looked for
    ///   there as a folder and not found (then taken as a preset or an `org/model` id): the
    ///   messages say where it was looked for, not the farm's current folder.
    static func planningFailure(_ error: Error, farmDirectory: URL? = nil) -> (error: String, exitStatus: Int32) {
        let status = (error as? ExporterError)?.exitStatus ?? .internalError
        let farmStatus = (status == .usage ? ExitStatus.badInput : status).rawValue
        guard let resolution = error as? ResolutionError else { return (reportText(error), farmStatus) }
        switch resolution {
        case .notFound(let model, var tried) where farmDirectory != nil && !tried.isEmpty:
            // The resolver tries a local folder first, and names none: it was the farm file's.
            tried[0] = "a local directory '\(model)' in the farm file's folder: none"
            return (reportText(ResolutionError.notFound(model: model, tried: tried)), farmStatus)
        case .contextTooLong(let requested, let maximum):
            return ("'context' (\(requested)) exceeds the model's max_position_embeddings (\(maximum))", farmStatus)
        case .precisionRequired(let model):
            return (
                reportText(lines: ["'compute_precision' is required for '\(model)' (no registry preset found)"]),
                farmStatus
            )
        case .noPreset(let model, _, let hint):
            var lines = resolution.descriptionLines
            lines[0] =
                "'\(model)' has no registry preset. Set \"experimental\": true to try exporting it anyway "
                + "(with 'compute_precision')."
            // The hint of a checkpoint of a preset's shape names the flag that applies it.
            lines = lines.map { $0.replacingOccurrences(of: ": pass --preset ", with: ": set \"preset\" to ") }
            // The resolver's hint of a mistyped path, in words that say where the farm looked.
            if let farmDirectory, hint != nil, lines.last == hint,
                let farmHint = farmPathHint(model, farmDirectory: farmDirectory)
            {
                lines[lines.count - 1] = farmHint
            }
            return (reportText(lines: lines), farmStatus)
        case .unusableName(let name):
            return (
                reportText(lines: [
                    "the model's name '\(name)' cannot name its artifact (control characters, or a leading '.'); "
                        + "set 'output_name'"
                ]), farmStatus
            )
        case .nameTooLong(let name, let bytes, false, let limit):
            let shown = Format.shortened(name)
            return (
                reportText(lines: [
                    "the model's name '\(shown)' is \(bytes) bytes long; an artifact's name is at most \(limit) bytes "
                        + "(its files and their staging folders must fit 255-byte file names); set 'output_name'"
                ]), farmStatus
            )
        default:
            return (reportText(error), farmStatus)
        }
    }

    /// For a job's `model` shaped as an `org/model` id whose first part is a folder beside the
    /// farm file: most likely a mistyped path, as ``ModelResolver/pathHint(_:)`` says of the
    /// current folder's.
    static func farmPathHint(_ model: String, farmDirectory: URL) -> String? {
        ModelResolver.pathHint(model, in: farmDirectory, place: "beside the farm file")
    }

    /// Why `job`'s export of `forecast` bytes waits for memory: it does not fit beside the running
    /// exports, or it fits but an export that asked first waits (exports start in the order they ask).
    static func memoryWaitText(job: String, forecast: Int, wait: MemoryBudget.Wait, capacity: Int?) -> String {
        let needs = "\(job): waiting for memory: its export needs about \(Format.mebibytes(forecast))"
        switch wait {
        case .memory(let held, let holders):
            return needs + ", \(holders) running \(holders == 1 ? "holds" : "hold") \(Format.mebibytes(held)) of "
                + Format.mebibytes(capacity ?? 0)
        case .behind(let other, let bytes):
            return needs + ", which fits, but waits behind job '\(other)' (about \(Format.mebibytes(bytes))), "
                + "which came first"
        }
    }

    /// `lines`, each escaped as ``reportText(_:)`` escapes them, joined by newlines.
    static func reportText(lines: [String]) -> String {
        lines.map(Format.escaped).joined(separator: "\n")
    }

    /// The message a child `exporter` printed on standard error, as a report records it: its
    /// lines but warnings, without the first one's `Error: ` and without the usage lines a
    /// usage error ends with (a farm job has no command line to fix), each escaped (the child
    /// escapes its messages already: this is for what it did not write itself).
    static func childMessage(_ errorBytes: [UInt8]) -> String {
        var lines = String(decoding: errorBytes, as: UTF8.self).split(separator: "\n").map(String.init)
            .filter { !$0.hasPrefix("warning: ") }
        if lines.count >= 2, lines[lines.count - 2].hasPrefix("Usage: exporter"),
            lines[lines.count - 1].hasPrefix("  See 'exporter")
        {
            lines.removeLast(2)
        }
        if let first = lines.first, first.hasPrefix("Error: ") { lines[0] = String(first.dropFirst("Error: ".count)) }
        return reportText(lines: lines)
    }

    /// `result` as the report records it: every error (the job's, each device's) naming paths
    /// under the farm file's folder relative to it (``farmRelative(_:)``).
    func reported(_ result: FarmJobResult) -> FarmJobResult {
        var result = result
        result.error = result.error.map(farmRelative)
        result.devices = result.devices.map { device in
            var device = device
            device.error = device.error.map(farmRelative)
            return device
        }
        return result
    }

    /// `text` (a report's error, escaped) with every path under the farm file's folder named
    /// relative to it, as the farm file names paths: `'/ci/checkout/ck/m'` is `'ck/m'`, the folder
    /// itself `'.'`. A report then depends on the checkout's place no more than the farm file
    /// does, so reports of equal work on two machines compare equal. The folder is matched as the
    /// farm has it, standardized and with its links resolved, each only as a whole path or the
    /// start of one (not `/ci/checkout2`, nor inside `/other/ci/checkout`); paths elsewhere (an
    /// output folder outside it, the Hugging Face cache, the presets) stay as the tool names them.
    func farmRelative(_ text: String) -> String {
        let folder = farm.path.deletingLastPathComponent()
        var forms: [String] = []
        for url in [folder, folder.standardizedFileURL, folder.resolvingSymlinksInPath()] {
            var path = url.path
            while path.count > 1, path.hasSuffix("/") { path.removeLast() }
            let escaped = Format.escaped(path)
            if escaped != "/", escaped.hasPrefix("/"), !forms.contains(escaped) { forms.append(escaped) }
        }
        // The longest first: a link's resolved path may start with another form.
        return forms.sorted { $0.count > $1.count }.reduce(text) { FarmRunner.relative($0, under: $1) }
    }

    /// `text` with each whole path `folder`, or path starting with `folder/`, relative to it.
    static func relative(_ text: String, under folder: String) -> String {
        // A character that can continue a path's name, so that a match there is part of another path.
        func continuesName(_ character: Character?) -> Bool {
            guard let character else { return false }
            return character.isLetter || character.isNumber || "/._-~+@".contains(character)
        }
        var result = ""
        var rest = Substring(text)
        while let range = rest.range(of: folder) {
            let before = range.lowerBound == rest.startIndex ? result.last : rest[rest.index(before: range.lowerBound)]
            let after = range.upperBound == rest.endIndex ? nil : rest[range.upperBound]
            result += rest[..<range.lowerBound]
            if continuesName(before) || (after != "/" && continuesName(after)) {
                result += rest[range]
                rest = rest[range.upperBound...]
            } else if after == "/" {
                rest = rest[rest.index(after: range.upperBound)...]
            } else {
                result += "."
                rest = rest[range.upperBound...]
            }
        }
        return result + rest
    }

    /// The farm file's name as reports record it: escaped as every text from input is.
    var reportedFarmName: String { Format.escaped(farm.path.lastPathComponent) }
}
