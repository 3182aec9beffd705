import ExporterKit

/// `--require-fit ARCH`: a release gate on the memory verdicts of `plan`, the export and
/// `compile`, for the devices an app ships to. Everything is still written and printed; then
/// the command exits 1 when a named device's verdict is `does-not-fit` (the app is killed at
/// load even with the entitlements) or when no verdict covers it.
enum FitGate {
    static let spec = ArgumentSpec.option(
        "require-fit", valueName: "arch", repeats: true,
        help: "Exit 1 when the model does not fit this device even with the entitlements (an id such as h17p; "
            + "repeatable).")

    /// The ids `--require-fit` names, each one of the device table's (in any case).
    /// - Throws: `UsageError` for an id no device has, before any work is done.
    static func required(_ arguments: ParsedArguments, table: DeviceTable) throws -> [String] {
        let ids = arguments.values("require-fit")
        for id in ids where !table.devices.contains(where: { $0.id.lowercased() == id.lowercased() }) {
            var known: [String] = []
            for device in table.devices where !known.contains(device.id) { known.append(device.id) }
            throw UsageError.validation(
                "--require-fit: no device '\(id)' in the device table; known: \(known.joined(separator: ", "))")
        }
        return ids
    }

    /// What fails the gate among `verdicts`: each required device that does not fit, or that no
    /// verdict covers (a device of a platform that does not load the bundle).
    static func failures(_ verdicts: [Manifest.Verdict], required: [String]) -> [String] {
        required.flatMap { id -> [String] in
            let matching = verdicts.filter { $0.architecture.lowercased() == id.lowercased() }
            guard !matching.isEmpty else {
                return ["--require-fit \(id): no verdict for it, a device of a platform that does not load this bundle"]
            }
            return matching.filter { $0.memory == .doesNotFit }.map {
                "\($0.architecture) (\($0.platform)): \(VerdictPrinter.memoryText($0)), against --require-fit \(id)"
            }
        }
    }

    /// Prints each failure as an error; the status the command exits with.
    static func status(_ failures: [String], context: CommandContext) -> ExitStatus {
        for failure in failures { context.printError("Error: \(failure)") }
        return failures.isEmpty ? .success : .verificationFailed
    }
}
