import ExporterKit

/// `--require-fit ARCH[:PLATFORM]`: a release gate on the memory verdicts of `plan`, the export
/// and `compile`, for the devices an app ships to. Everything is still written and printed; then
/// the command exits 1 when a named device's verdict is `does-not-fit` (the app is killed at
/// load even with the entitlements) or when no verdict covers it.
enum FitGate {
    static let spec = ArgumentSpec.option(
        "require-fit", valueName: "arch", repeats: true,
        help: "Exit 1, once all is written, when the model does not fit this device even with the entitlements, or "
            + "no verdict covers it (an id such as h17p, or h14g:visionOS for one platform's; repeatable).")

    /// A device `--require-fit` names: an id in any case, and a platform where the id alone
    /// names two devices (`h14g`: a Mac and Apple Vision Pro).
    struct Requirement: Equatable {
        /// As given, for messages.
        let text: String
        let id: String
        let platform: DevicePlatform?

        func matches(_ verdict: Manifest.Verdict) -> Bool {
            verdict.architecture.lowercased() == id.lowercased()
                && platform.map { $0.rawValue == verdict.platform } ?? true
        }
    }

    /// The devices `--require-fit` names, each one of the device table's, once.
    /// - Throws: `UsageError` for a platform that is none, or a device the table does not
    ///   have, before any work is done.
    static func required(_ arguments: ParsedArguments, table: DeviceTable) throws -> [Requirement] {
        var requirements: [Requirement] = []
        for text in arguments.values("require-fit") {
            let pieces = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            var platform: DevicePlatform?
            if pieces.count == 2 {
                guard let named = DevicePlatform(rawValue: pieces[1]) else {
                    throw UsageError.invalidValue(
                        value: text, option: "--require-fit",
                        expected: "ARCH or ARCH:PLATFORM, PLATFORM one of "
                            + DevicePlatform.allCases.map(\.rawValue).joined(separator: ", "))
                }
                platform = named
            }
            let requirement = Requirement(text: text, id: pieces[0], platform: platform)
            guard
                table.devices.contains(where: {
                    $0.id.lowercased() == requirement.id.lowercased() && (platform == nil || $0.platform == platform)
                })
            else {
                var known: [String] = []
                for device in table.devices where !known.contains(device.id) { known.append(device.id) }
                let device = platform.map { "'\(requirement.id)' of \($0.rawValue)" } ?? "'\(text)'"
                throw UsageError.validation(
                    "--require-fit: no device \(device) in the device table; known: \(known.joined(separator: ", "))")
            }
            if !requirements.contains(where: {
                $0.id.lowercased() == requirement.id.lowercased() && $0.platform == platform
            }) {
                requirements.append(requirement)
            }
        }
        return requirements
    }

    /// What fails the gate among `verdicts`: each required device that does not fit, or that no
    /// verdict covers (a device of a platform that does not load the bundle).
    static func failures(_ verdicts: [Manifest.Verdict], required: [Requirement]) -> [String] {
        // A device two requirements name (`h14g` and `h14g:visionOS`) fails once.
        var failed: [Manifest.Verdict] = []
        return required.flatMap { requirement -> [String] in
            let matching = verdicts.filter(requirement.matches)
            guard !matching.isEmpty else {
                return [
                    "--require-fit \(requirement.text): no verdict for it, a device of a platform that does not load "
                        + "this bundle"
                ]
            }
            return matching.filter { $0.memory == .doesNotFit }.compactMap { verdict in
                guard !failed.contains(verdict) else { return nil }
                failed.append(verdict)
                return verdict.memoryWarning.map { "\($0) (--require-fit \(requirement.text))" }
            }
        }
    }

    /// What a required device that fits only with the entitlements needs: its warning, for the
    /// commands that print no plan (the export, `compile`).
    static func entitlementNotes(_ verdicts: [Manifest.Verdict], required: [Requirement]) -> [String] {
        verdicts.filter { verdict in verdict.memory == .needsEntitlement && required.contains { $0.matches(verdict) } }
            .compactMap(\.memoryWarning)
    }

    /// Prints each failure as an error (after `notes` as warnings); the status the command exits with.
    static func status(_ failures: [String], notes: [String] = [], context: CommandContext) -> ExitStatus {
        for note in notes { context.printError("warning: \(note)") }
        for failure in failures { context.printError("Error: \(failure)") }
        return failures.isEmpty ? .success : .verificationFailed
    }
}
