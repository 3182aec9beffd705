import Foundation

/// A platform compiled artifacts target. visionOS devices compile bundles exported for iOS.
public enum DevicePlatform: String, CaseIterable, Codable, Sendable {
    /// iPhone and iPad.
    case iOS
    /// Mac.
    case macOS
    /// Apple Vision Pro.
    case visionOS

    /// The export platform whose bundles compile for this platform.
    public var bundlePlatform: Platform { self == .macOS ? .macOS : .iOS }
}

/// One device architecture: what the runtime calls it, what it is, and the numbers a verdict needs.
/// Documented in `docs/DEVICES.md`.
public struct DeviceArchitecture: Equatable, Sendable {
    /// The architecture as the runtime names it (`h17p` for the A18), the `<arch>` of `<Name>.<arch>.aimodelc`.
    public var id: String
    /// The platform of the devices.
    public var platform: DevicePlatform
    /// The chip (`A18`).
    public var chip: String
    /// Example products.
    public var products: [String]
    /// Whether ahead-of-time compilation is offered for it.
    public var aheadOfTime: Bool
    /// RAM of the smallest configuration, in bytes.
    public var ramBytes: Int
    /// The app memory limit by default.
    public var appMemoryLimitBytes: Int
    /// The app memory limit with the `increased-memory-limit` entitlement; nil where no entitlement raises it.
    public var increasedMemoryLimitBytes: Int?
    /// The entitlements that raise the limit (the manifest says to add them when a model needs them).
    public var entitlements: [String]
    /// The Neural Engine's per-region compile budget: weights, state and working buffers of one region.
    public var regionBudgetBytes: Int
    /// The virtual memory page size.
    public var pageSize: Int
    /// The fields whose values are estimates rather than published facts, by their `devices.json` keys.
    public var estimates: [String]

    /// Whether `id` can name an architecture: letters, digits, `-` and `_` only (it names
    /// artifact folders, `<Name>.<id>.aimodelc`), at least one.
    public static func isValidID(_ id: String) -> Bool {
        !id.isEmpty && id.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }
    }

    /// An architecture; every field explicit.
    public init(
        id: String, platform: DevicePlatform, chip: String, products: [String], aheadOfTime: Bool, ramBytes: Int,
        appMemoryLimitBytes: Int, increasedMemoryLimitBytes: Int?, entitlements: [String], regionBudgetBytes: Int,
        pageSize: Int, estimates: [String] = []
    ) {
        self.id = id
        self.platform = platform
        self.chip = chip
        self.products = products
        self.aheadOfTime = aheadOfTime
        self.ramBytes = ramBytes
        self.appMemoryLimitBytes = appMemoryLimitBytes
        self.increasedMemoryLimitBytes = increasedMemoryLimitBytes
        self.entitlements = entitlements
        self.regionBudgetBytes = regionBudgetBytes
        self.pageSize = pageSize
        self.estimates = estimates
    }
}

/// The device table: `Presets/devices.json`, optionally extended by a user's file. Data, not code:
/// adding a device is adding an entry (docs/DEVICES.md).
public struct DeviceTable: Equatable, Sendable {
    /// The schema this version reads.
    public static let schema = "exporter.devices/1"
    /// The shipped table's file name in `Presets/`.
    public static let fileName = "devices.json"

    /// Every architecture, in file order (a user's entries replace shipped ones of the same id and platform).
    public private(set) var devices: [DeviceArchitecture]
    /// The eligibility rule of each platform, as shown in refusals.
    public private(set) var rules: [DevicePlatform: String]

    /// A table of `devices` with `rules`.
    public init(devices: [DeviceArchitecture], rules: [DevicePlatform: String]) {
        self.devices = devices
        self.rules = rules
    }

    /// Loads a table file.
    /// - Throws: `CompileError.invalidDeviceTable` or `.unsupportedDeviceTableSchema` naming the file,
    ///   `BundleError.readFailed` when it is there but cannot be read.
    public init(contentsOf url: URL) throws {
        func invalid(_ reason: String) -> CompileError { .invalidDeviceTable(path: url.path, reason: reason) }
        guard let data = try readNamedFile(url) else { throw CompileError.deviceTableNotFound(path: url.path) }
        let document: JSONValue
        do { document = try JSONParser.parse([UInt8](data)) } catch { throw invalid("\(error)") }
        guard let root = document.objectValue else { throw invalid("the document is not an object") }
        // A misspelt key (`rule` for `rules`) would otherwise leave what it gives out, unsaid.
        let rootKeys: Set<String> = ["schema", "about", "rules", "devices"]
        if let unknown = root.keys.sorted().first(where: { !rootKeys.contains($0) }) {
            throw invalid("unknown key '\(unknown)'; expected \(rootKeys.sorted().joined(separator: ", "))")
        }
        let schema = root["schema"]?.stringValue ?? ""
        guard schema == DeviceTable.schema else {
            throw CompileError.unsupportedDeviceTableSchema(
                path: url.path, found: schema, supported: DeviceTable.schema)
        }
        var rules: [DevicePlatform: String] = [:]
        if let ruleObject = root["rules"]?.objectValue {
            for (key, value) in ruleObject.members {
                guard let platform = DevicePlatform(rawValue: key), let text = value.stringValue else {
                    throw invalid("rule '\(key)' is not a platform with a text")
                }
                rules[platform] = text
            }
        }
        guard let entries = root["devices"]?.arrayValue else { throw invalid("no 'devices' array") }
        var devices: [DeviceArchitecture] = []
        for (index, entry) in entries.enumerated() {
            let device = try DeviceTable.device(entry, number: index + 1, invalid: invalid)
            if let other = devices.first(where: {
                $0.platform == device.platform && FileSystemName.clash($0.id, device.id)
            }) {
                guard other.id != device.id else {
                    throw invalid("device \(index + 1): '\(device.id)' appears twice for \(device.platform.rawValue)")
                }
                // Their artifacts (`<Name>.<id>.aimodelc`) would be one folder on a Mac.
                throw invalid(
                    "device \(index + 1): '\(device.id)' and '\(other.id)' differ only in case for "
                        + "\(device.platform.rawValue), which a case-insensitive file system (macOS) does not tell apart"
                )
            }
            devices.append(device)
        }
        self.init(devices: devices, rules: rules)
    }

    /// The shipped table of a `Presets/` folder, extended by `extra` when given.
    /// - Throws: `CompileError` for either file; `.invalidDeviceTable` for an `extra` entry that
    ///   makes a shipped device offered no ahead-of-time compilation eligible.
    public static func load(presetsDirectory: URL, extra: URL? = nil) throws -> DeviceTable {
        var table = try DeviceTable(contentsOf: presetsDirectory.appendingPathComponent(fileName))
        guard let extra else { return table }
        let mine = try DeviceTable(contentsOf: extra)
        // The shipped table's ineligible chips are the brief's rule, not an estimate: a compiled
        // artifact for them would be one no runtime loads.
        for (index, device) in mine.devices.enumerated() where device.aheadOfTime {
            guard
                let shipped = table.devices.first(where: {
                    $0.platform == device.platform && FileSystemName.clash($0.id, device.id)
                }), !shipped.aheadOfTime
            else { continue }
            throw CompileError.invalidDeviceTable(
                path: extra.path,
                reason: "device \(index + 1) ('\(device.id)'): 'ahead_of_time' cannot be true for the \(shipped.chip), "
                    + "which is not offered ahead-of-time compilation (\(table.rules[device.platform] ?? "")); "
                    + "an entry replacing a shipped one may change its numbers, not that")
        }
        table.merge(mine)
        return table
    }

    /// Adds `other`'s entries; an entry with the id and platform of an existing one replaces it
    /// in place, ids compared case-insensitively (their artifacts would be one folder on a Mac),
    /// and keeps the existing entry's id: `H17P` replaces `h17p`'s numbers, and its artifacts stay
    /// `<Name>.h17p.aimodelc`, the folder the runtime and earlier compiles know.
    public mutating func merge(_ other: DeviceTable) {
        for device in other.devices {
            if let index = devices.firstIndex(where: {
                $0.platform == device.platform && FileSystemName.clash($0.id, device.id)
            }) {
                var replacement = device
                replacement.id = devices[index].id
                devices[index] = replacement
            } else {
                devices.append(device)
            }
        }
        rules.merge(other.rules) { _, new in new }
    }

    /// The architectures of `platform` offering ahead-of-time compilation, in table order.
    public func eligible(for platform: DevicePlatform) -> [DeviceArchitecture] {
        devices.filter { $0.platform == platform && $0.aheadOfTime }
    }

    /// The architectures to compile for: `ids` in the order given, in any case (duplicates once),
    /// or every eligible one of `platform` when `ids` is empty.
    /// - Throws: `CompileError.unknownArchitecture` (listing the platform's ids),
    ///   `.architectureOnOtherPlatform`, `.ineligibleDevice` (naming the device, its chip and the rule),
    ///   `.noEligibleArchitecture` when `ids` is empty and no architecture of the platform is eligible.
    public func select(_ ids: [String], platform: DevicePlatform) throws -> [DeviceArchitecture] {
        guard !ids.isEmpty else {
            let all = eligible(for: platform)
            guard !all.isEmpty else {
                throw CompileError.noEligibleArchitecture(
                    platform: platform, known: devices.filter { $0.platform == platform }.map(\.id),
                    rule: rules[platform] ?? "not offered for this platform")
            }
            return all
        }
        var selected: [DeviceArchitecture] = []
        for id in ids {
            // Ids are told apart regardless of case, as the table's merge does (`H17P` is h17p).
            let same = { (device: DeviceArchitecture) in device.id.lowercased() == id.lowercased() }
            guard let device = devices.first(where: { same($0) && $0.platform == platform }) else {
                // The same id can name devices of two platforms (the M2 in Macs and the Vision
                // Pro): suggest one that compiles the same bundles first.
                let elsewhere = devices.filter(same).map(\.platform)
                if let suggested = elsewhere.first(where: { $0.bundlePlatform == platform.bundlePlatform })
                    ?? elsewhere.first
                {
                    throw CompileError.architectureOnOtherPlatform(id: id, platform: suggested, requested: platform)
                }
                let known = devices.filter { $0.platform == platform }.map(\.id)
                throw CompileError.unknownArchitecture(id: id, platform: platform, known: known)
            }
            guard device.aheadOfTime else {
                throw CompileError.ineligibleDevice(
                    id: device.id, products: device.products, chip: device.chip,
                    rule: rules[platform] ?? "not offered for this device")
            }
            if !selected.contains(device) { selected.append(device) }
        }
        return selected
    }

    /// The keys of a device entry.
    static let entryKeys: Set<String> = [
        "id", "platform", "chip", "products", "ahead_of_time", "ram_bytes", "app_memory_limit_bytes",
        "increased_memory_limit_bytes", "entitlements", "ane_region_budget_bytes", "page_size",
    ]
    /// The largest byte count a table may give (1 PiB): far above any device, and far enough
    /// below `Int.max` that the sums and page roundings of a plan cannot overflow.
    static let largestBytes = 1 << 50
    /// The largest page size (1 GiB, the largest huge page of any platform).
    static let largestPageSize = 1 << 30

    private static func device(
        _ entry: JSONValue, number: Int, invalid: (String) -> CompileError
    ) throws -> DeviceArchitecture {
        guard let object = entry.objectValue else { throw invalid("device \(number) is not an object") }
        // Entries are named by number until their id is read, then by both.
        var label = "device \(number)"
        if let unknown = object.keys.sorted().first(where: { !entryKeys.contains($0) }) {
            let id = object["id"].flatMap { $0.stringValue ?? $0.objectValue?["value"]?.stringValue }
            throw invalid(
                "\(label)\(id.map { " ('\($0)')" } ?? ""): unknown key '\(unknown)'; expected "
                    + entryKeys.sorted().joined(separator: ", "))
        }
        var estimates: [String] = []
        // A field is a plain value or {"value", "estimate", "source"}.
        func field(_ key: String) throws -> JSONValue? {
            guard let raw = object[key] else { throw invalid("\(label) has no '\(key)'") }
            if let wrapped = raw.objectValue {
                guard let value = wrapped["value"] else { throw invalid("\(label): '\(key)' has no 'value'") }
                if let unknown = wrapped.keys.sorted().first(where: { !["value", "estimate", "source"].contains($0) }) {
                    throw invalid(
                        "\(label): '\(key)' has an unknown key '\(unknown)'; expected estimate, source, value")
                }
                if wrapped["estimate"]?.boolValue == true { estimates.append(key) }
                return value.isNull ? nil : value
            }
            return raw.isNull ? nil : raw
        }
        func string(_ key: String) throws -> String {
            guard let value = try field(key)?.stringValue, !value.isEmpty else {
                throw invalid("\(label): '\(key)' must be a non-empty string")
            }
            return value
        }
        func bytes(_ value: JSONValue?, _ key: String, requirement: String = "") throws -> Int {
            guard let bytes = value?.intValue, bytes > 0, bytes <= largestBytes else {
                throw invalid("\(label): '\(key)' must be a positive integer of at most \(largestBytes)\(requirement)")
            }
            return bytes
        }
        let id = try string("id")
        guard DeviceArchitecture.isValidID(id) else {
            throw invalid("\(label): id '\(id)' must be letters, digits, '-' or '_'")
        }
        label = "device \(number) ('\(id)')"
        let platformName = try string("platform")
        guard let platform = DevicePlatform(rawValue: platformName) else {
            throw invalid(
                "\(label): platform '\(platformName)'; expected one of: "
                    + DevicePlatform.allCases.map(\.rawValue).joined(separator: ", "))
        }
        let chip = try string("chip")
        // A list of names: an entry that is not a string is refused, never left out.
        func names(_ key: String) -> [String]? {
            guard let values = object[key]?.arrayValue else { return nil }
            let names = values.compactMap(\.stringValue)
            return names.count == values.count ? names : nil
        }
        guard let products = names("products"), !products.isEmpty else {
            throw invalid("\(label): 'products' must be a non-empty list of names")
        }
        guard let aheadOfTime = try field("ahead_of_time")?.boolValue else {
            throw invalid("\(label): 'ahead_of_time' must be true or false")
        }
        let ram = try bytes(try field("ram_bytes"), "ram_bytes")
        let limit = try bytes(try field("app_memory_limit_bytes"), "app_memory_limit_bytes")
        // One app cannot be allowed more than the device has.
        guard limit <= ram else {
            throw invalid("\(label): 'app_memory_limit_bytes' (\(limit)) is more than 'ram_bytes' (\(ram))")
        }
        var increased: Int?
        if let value = try field("increased_memory_limit_bytes") {
            let raised = try bytes(
                value, "increased_memory_limit_bytes", requirement: ", or null, and at least the default limit")
            guard raised >= limit else {
                throw invalid(
                    "\(label): 'increased_memory_limit_bytes' must be null or at least the default limit")
            }
            // A Mac kills no app: its limit is where it starts to swap, and nothing raises that.
            guard platform != .macOS else {
                throw invalid(
                    "\(label): 'increased_memory_limit_bytes' must be null for a Mac: no entitlement raises its limit")
            }
            guard raised <= ram else {
                throw invalid(
                    "\(label): 'increased_memory_limit_bytes' (\(raised)) is more than 'ram_bytes' (\(ram))")
            }
            increased = raised
        }
        guard let entitlements = names("entitlements") else {
            throw invalid("\(label): 'entitlements' must be a list of names")
        }
        guard !entitlements.contains(where: { $0.isEmpty }), Set(entitlements).count == entitlements.count else {
            throw invalid("\(label): 'entitlements' must name each entitlement once, none empty")
        }
        // A verdict of needs-entitlement must say what to add.
        guard increased == nil || !entitlements.isEmpty else {
            throw invalid(
                "\(label): 'entitlements' is empty, but 'increased_memory_limit_bytes' says an entitlement raises the "
                    + "limit: name it (com.apple.developer.kernel.increased-memory-limit), or make the limit null")
        }
        let budget = try bytes(try field("ane_region_budget_bytes"), "ane_region_budget_bytes")
        let pageValue = try field("page_size")
        guard let page = pageValue?.intValue, page >= 4096, page <= largestPageSize, page & (page - 1) == 0 else {
            throw invalid(
                "\(label): 'page_size' must be a power of two of at least 4096 and at most \(largestPageSize)")
        }
        return DeviceArchitecture(
            id: id, platform: platform, chip: chip, products: products, aheadOfTime: aheadOfTime, ramBytes: ram,
            appMemoryLimitBytes: limit, increasedMemoryLimitBytes: increased, entitlements: entitlements,
            regionBudgetBytes: budget, pageSize: page, estimates: estimates)
    }
}
