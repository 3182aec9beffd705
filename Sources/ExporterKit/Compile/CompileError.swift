import Foundation

/// Why a compile (or a device verdict) cannot be made.
public enum CompileError: ExporterError, Equatable {
    /// The device table is unreadable or malformed.
    case invalidDeviceTable(path: String, reason: String)
    /// The device table was written for another schema version.
    case unsupportedDeviceTableSchema(path: String, found: String, supported: String)
    /// No architecture of that id on the requested platform.
    case unknownArchitecture(id: String, platform: DevicePlatform, known: [String])
    /// The architecture exists, but on another platform.
    case architectureOnOtherPlatform(id: String, platform: DevicePlatform, requested: DevicePlatform)
    /// The architecture exists, but on a platform whose devices cannot take this bundle (exported
    /// for `bundlePlatform`): passing that platform would be refused, the bundle must be exported again.
    case architectureNeedsOtherBundle(
        id: String, platform: DevicePlatform, bundlePlatform: String, registryType: String)
    /// Ahead-of-time compilation is not offered for this device.
    case ineligibleDevice(id: String, products: [String], chip: String, rule: String)
    /// The minimum deployment version is below the first that loads compiled artifacts.
    case deploymentVersionTooLow(given: String, minimum: String)
    /// The minimum deployment version is not `MAJOR.MINOR`.
    case invalidDeploymentVersion(String)
    /// The bundle was exported for a platform whose devices are not the requested ones.
    case platformMismatch(bundle: String, bundlePlatform: String, requested: DevicePlatform, registryType: String)
    /// No architecture of the platform is eligible (a device table that marks none ahead of time).
    case noEligibleArchitecture(platform: DevicePlatform, known: [String], rule: String)
    /// No device table at the path (`--devices`).
    case deviceTableNotFound(path: String)
    /// No bundle at the path.
    case bundleNotFound(path: String)
    /// The graph uses a rotary scaling the static tables cannot be precomputed for.
    case unsupportedRopeScaling(String)
    /// The artifact is not a compiled artifact this version reads.
    case notACompiledArtifact(path: String, reason: String)
    /// Artifacts of the compile are there already, without `--overwrite`: their paths, and the
    /// devices still to compile (an interrupted compile is finished by compiling only those),
    /// with what else shapes the artifacts, repeated in the command suggested: the output folder
    /// (nil: the bundle's), the user's device table and the minimum deployment version (nil: 27.0);
    /// and those of `paths` compiled from another bundle than this one (an export replaced it).
    case artifactsExist(
        paths: [String], bundle: String, platform: DevicePlatform, missingDevices: [String], output: String? = nil,
        deviceTable: String? = nil, minimumDeploymentVersion: String? = nil, fromOtherBundle: [String] = [])
    /// A file of the bundle is no longer what the manifest the compile read says of it: the
    /// bundle was replaced (`replaced`, its manifest changed too) or the file changed since.
    case bundleChanged(path: String, replaced: Bool)
    /// Where an artifact would go, one of another platform is (an M2 Mac's and Apple Vision
    /// Pro's share the architecture id `h14g`): neither skipped as done nor replaced.
    case artifactOfOtherPlatform(path: String, found: String, platform: DevicePlatform)

    /// The message, naming the device, the bundle or the flag, and what to do instead.
    public var description: String {
        switch self {
        case .invalidDeviceTable(let path, let reason):
            return "device table '\(path)': \(reason)"
        case .unsupportedDeviceTableSchema(let path, let found, let supported):
            return "device table '\(path)' has schema '\(found)'; this version reads '\(supported)'"
        case .unknownArchitecture(let id, let platform, let known):
            return "unknown \(platform.rawValue) architecture '\(id)'; known: \(known.joined(separator: ", "))"
        case .architectureOnOtherPlatform(let id, let platform, let requested):
            return "architecture '\(id)' is \(platform == .iOS ? "an" : "a") \(platform.rawValue) device, "
                + "not \(requested.rawValue); "
                + "pass --platform \(platform.rawValue)"
        case .architectureNeedsOtherBundle(let id, let platform, let bundlePlatform, let registryType):
            let needed = platform.bundlePlatform
            let family = try? ArchitectureRegistry.family(for: registryType)
            let remedy =
                family.map { !$0.supports(needed) } == true
                ? RegistryError.noIOSVariant(modelType: registryType).description
                : "export with --platform \(needed.rawValue) to compile for it"
            return "architecture '\(id)' is \(platform == .iOS ? "an" : "a") \(platform.rawValue) device, "
                + "and this bundle was exported for \(bundlePlatform): \(remedy)"
        case .ineligibleDevice(let id, let products, let chip, let rule):
            return
                "ahead-of-time compilation is not offered for '\(id)' (\(products.joined(separator: ", ")); \(chip)): "
                + rule
        case .deploymentVersionTooLow(let given, let minimum):
            return
                "--min-deployment-version \(given) is below \(minimum), the first version that loads compiled artifacts"
        case .invalidDeploymentVersion(let given):
            return "--min-deployment-version expects a version such as 27.0, got '\(given)'"
        case .platformMismatch(let bundle, let bundlePlatform, let requested, let registryType):
            let needed = requested.bundlePlatform
            let family = try? ArchitectureRegistry.family(for: registryType)
            if let family, !family.supports(needed) {
                return
                    "'\(bundle)' was exported for \(bundlePlatform) and cannot be compiled for \(requested.rawValue): "
                    + RegistryError.noIOSVariant(modelType: registryType).description
            }
            return "'\(bundle)' was exported for \(bundlePlatform) and cannot be compiled for \(requested.rawValue); "
                + "export it with --platform \(needed.rawValue)"
        case .noEligibleArchitecture(let platform, let known, let rule):
            let listed =
                known.isEmpty
                ? "the device table has none"
                : "the device table marks none of \(known.joined(separator: ", ")) as eligible"
            return "no \(platform.rawValue) architecture to compile for: \(listed) (\(rule))"
        case .deviceTableNotFound(let path):
            return "no device table at '\(path)'"
        case .bundleNotFound(let path):
            return "no bundle at '\(path)'"
        case .unsupportedRopeScaling(let type):
            return "rope scaling '\(type)' has no precomputed tables yet; compile a model without it"
        case .notACompiledArtifact(let path, let reason):
            return "'\(path)' is not a compiled artifact: \(reason)"
        case .artifactsExist:
            return descriptionLines.joined(separator: "\n")
        case .artifactOfOtherPlatform(let path, let found, let platform):
            return "'\(path)' is a \(found) artifact of the same architecture id; "
                + "compile for \(platform.rawValue) into another folder (--output DIR)"
        case .bundleChanged(let path, let replaced):
            return "'\(path)' changed while it was compiled: "
                + (replaced ? "the bundle was replaced" : "it no longer matches the bundle's manifest")
                + "; compile again"
        }
    }

    /// One line, but for ``artifactsExist(paths:bundle:platform:missingDevices:output:deviceTable:minimumDeploymentVersion:)``:
    /// the paths there, then the command that compiles only the missing devices into the same
    /// folder, from the same device table, for the same deployment version.
    public var descriptionLines: [String] {
        guard
            case .artifactsExist(
                let paths, let bundle, let platform, let missing, let output, let table, let version, let stale) = self
        else {
            return [description]
        }
        let listed = paths.map { "'\($0)'" }.joined(separator: ", ")
        let verb = paths.count == 1 ? "exists" : "exist"
        var lines = ["\(listed) already \(verb); pass --overwrite to replace \(paths.count == 1 ? "it" : "them")"]
        if !stale.isEmpty {
            let names = stale.map { "'\(($0 as NSString).lastPathComponent)'" }.joined(separator: ", ")
            lines.append(
                "\(names) \(stale.count == 1 ? "was" : "were") compiled from another bundle than '\(bundle)' (it was "
                    + "exported again since): compile with --overwrite to bring \(stale.count == 1 ? "it" : "them") up to date"
            )
        }
        if !missing.isEmpty {
            var words = ["exporter", "compile", ShellWord.quoted(bundle), "--platform", platform.rawValue]
            if let output { words += ["--output", ShellWord.quoted(output)] }
            if let table { words += ["--devices", ShellWord.quoted(table)] }
            if let version { words += ["--min-deployment-version", version] }
            words += missing.flatMap { ["--device", $0] }
            lines.append("or compile only the missing: " + words.joined(separator: " "))
        }
        return lines
    }

    /// `badInput` (65), `unsupported` (69) for a refused device or platform, `usage` (64) for
    /// `--min-deployment-version`, `notFound` (66), `ioFailure` (74) for a bundle that changed
    /// while it was read.
    public var exitStatus: ExitStatus {
        switch self {
        case .invalidDeviceTable, .unsupportedDeviceTableSchema, .notACompiledArtifact: return .badInput
        case .unknownArchitecture, .architectureOnOtherPlatform, .architectureNeedsOtherBundle, .ineligibleDevice,
            .noEligibleArchitecture, .platformMismatch,
            .unsupportedRopeScaling:
            return .unsupported
        case .deploymentVersionTooLow, .invalidDeploymentVersion: return .usage
        case .bundleNotFound, .deviceTableNotFound: return .notFound
        case .artifactsExist, .artifactOfOtherPlatform: return .outputExists
        case .bundleChanged: return .ioFailure
        }
    }
}
