import ExporterKit
import Foundation

/// `exporter list`: families, presets and compression configs.
enum ListCommand {
    static let spec = CommandSpec(
        name: "list",
        abstract: "List the model families, presets, compression configs and device architectures.",
        discussion: "Families are the registry's model types, with the platforms each exports for; presets are "
            + "the checkpoints with ready-made defaults and every name that selects them; compression configs "
            + "are the names --compression takes; device architectures are the targets of 'exporter compile' "
            + "(an * marks an estimated figure). Reads Presets/; without a flag, shows all four.",
        arguments: [
            .flag("models", help: "Only the model families and presets (same as 'exporter --list-models')."),
            .flag(
                "presets",
                help: "Only the presets and compression configs (same as 'exporter --list-presets')."),
            .flag("devices", help: "Only the device architectures (Presets/devices.json)."),
            .option(
                "device-table", valueName: "file",
                help: "Show the device architectures as a device table extends them (what --devices FILE gives "
                    + "compile, plan and the export; a farm job's device_table); implies --devices."),
            .flag("json", help: "Print JSON."),
        ])

    /// Which parts `list` prints.
    struct Sections: OptionSet {
        let rawValue: Int
        static let families = Sections(rawValue: 1)
        static let presets = Sections(rawValue: 2)
        static let compression = Sections(rawValue: 4)
        static let devices = Sections(rawValue: 8)
        static let all: Sections = [.families, .presets, .compression, .devices]
    }

    static func run(_ arguments: ParsedArguments, context: CommandContext) throws -> ExitStatus {
        var sections: Sections = []
        if arguments.flag("models") { sections.formUnion([.families, .presets]) }
        if arguments.flag("presets") { sections.formUnion([.presets, .compression]) }
        let deviceTable = arguments.value("device-table")
        if arguments.flag("devices") || deviceTable != nil { sections.insert(.devices) }
        return try show(
            sections.isEmpty ? .all : sections, json: arguments.flag("json"), deviceTable: deviceTable, context: context
        )
    }

    /// Prints `sections`, the device architectures extended by the device table at `deviceTable`
    /// (a path as the user gave it) when one is given.
    static func show(_ sections: Sections, json: Bool, deviceTable: String? = nil, context: CommandContext) throws
        -> ExitStatus
    {
        let catalog = try context.catalog()
        let compressions = try catalog.compressionConfigNames().map { try catalog.compressionConfig(named: $0) }
        let extra = deviceTable.map {
            context.fileURL($0)
        }
        let devices =
            sections.contains(.devices)
            ? try DeviceTable.load(presetsDirectory: catalog.directory, extra: extra).devices : []
        if json {
            var root = JSONObject()
            if sections.contains(.families) {
                root["families"] = .array(
                    ArchitectureRegistry.families.map { family in
                        .object(
                            JSONObject([
                                ("model_type", .string(family.modelType)),
                                ("macOS", .bool(family.supportsMacOS)),
                                ("iOS", .bool(family.supportsIOS)),
                                ("tensor_layout", .bool(family.layout != nil)),
                            ]))
                    })
                root["model_type_remapping"] = .object(
                    JSONObject(
                        ArchitectureRegistry.modelTypeRemapping.sorted { $0.key < $1.key }.map {
                            ($0.key, .string($0.value))
                        }))
            }
            if sections.contains(.presets) {
                root["presets"] = .array(
                    catalog.presets.map { preset in
                        .object(
                            JSONObject([
                                ("id", .string(preset.id)),
                                ("repo_id", .string(preset.repoID)),
                                ("aliases", .array(preset.aliases.map { .string($0) })),
                                ("platforms", .array(preset.platforms.map { .string($0.rawValue) })),
                                ("context_length", .number(String(preset.contextLength))),
                                ("compute_precision", .string(preset.computePrecision.rawValue)),
                                ("compression", .string(preset.compression)),
                            ]))
                    })
            }
            if sections.contains(.compression) {
                root["default_compression"] = .string(ExportOptions.defaultCompression)
                root["compression_configs"] = .array(
                    compressions.map { config in
                        .object(
                            JSONObject([("name", .string(config.name)), ("description", .string(config.description))]))
                    })
            }
            if sections.contains(.devices) {
                root["devices"] = .array(
                    devices.map { device in
                        .object(
                            JSONObject([
                                ("id", .string(device.id)),
                                ("platform", .string(device.platform.rawValue)),
                                ("chip", .string(device.chip)),
                                ("ahead_of_time", .bool(device.aheadOfTime)),
                                ("ram_bytes", .number(String(device.ramBytes))),
                                ("app_memory_limit_bytes", .number(String(device.appMemoryLimitBytes))),
                                (
                                    "increased_memory_limit_bytes",
                                    device.increasedMemoryLimitBytes.map { .number(String($0)) } ?? .null
                                ),
                                ("region_budget_bytes", .number(String(device.regionBudgetBytes))),
                                ("page_size", .number(String(device.pageSize))),
                                ("estimates", .array(device.estimates.map { .string(jsonKey(forTableField: $0)) })),
                            ]))
                    })
            }
            context.writeOutput(JSONWriter.string(.object(root)))
            return .success
        }
        var lines: [String] = []
        if sections.contains(.families) {
            lines.append("Model families (model_type; qwen2_5 → qwen2, gemma3 → gemma3_text):")
            lines += Format.table(
                [["model_type", "macOS", "iOS"]]
                    + ArchitectureRegistry.families.map {
                        [$0.modelType, $0.supportsMacOS ? "yes" : "no", $0.supportsIOS ? "yes" : "no"]
                    },
                indent: "  ")
            lines.append("")
        }
        if sections.contains(.presets) {
            lines.append("Presets (any name in a row selects it, case-insensitive):")
            lines += Format.table(
                [["preset", "names", "context", "precision", "compression"]]
                    + catalog.presets.map { preset in
                        [
                            preset.id, ([preset.repoID] + preset.aliases).joined(separator: ", "),
                            Format.grouped(preset.contextLength), preset.computePrecision.rawValue, preset.compression,
                        ]
                    },
                indent: "  ")
            lines.append("")
        }
        if sections.contains(.compression) {
            lines.append(
                "Compression configs (--compression NAME, or none; without a preset: "
                    + "\(ExportOptions.defaultCompression)):")
            lines += Format.table(compressions.map { [$0.name, $0.description] }, indent: "  ")
            lines.append("")
        }
        if sections.contains(.devices) {
            let source = deviceTable.map { "Presets/devices.json extended by '\($0)'" }
            lines.append("Device architectures (\(source ?? "Presets/devices.json"); * = estimate, docs/DEVICES.md):")
            lines += Format.table(
                [["id", "platform", "chip", "AOT", "RAM", "app limit", "entitled", "ANE region"]]
                    + devices.map { device in
                        let mark = { (field: String) in device.estimates.contains(field) ? "*" : "" }
                        return [
                            device.id + mark("id"), device.platform.rawValue, device.chip,
                            device.aheadOfTime ? "yes" : "no",
                            Format.mebibytes(device.ramBytes),
                            Format.mebibytes(device.appMemoryLimitBytes) + mark("app_memory_limit_bytes"),
                            device.increasedMemoryLimitBytes.map(Format.mebibytes).map {
                                $0 + mark("increased_memory_limit_bytes")
                            } ?? "-",
                            Format.mebibytes(device.regionBudgetBytes) + mark("ane_region_budget_bytes"),
                        ]
                    },
                indent: "  ")
            lines.append("")
        }
        if lines.last == "" { lines.removeLast() }
        context.print(lines: lines)
        return .success
    }

    /// The key of a device table field (`Presets/devices.json`) in a device object of
    /// `list --json`, which its `estimates` name: the same, but for the Neural Engine budget,
    /// `region_budget_bytes` as in a compiled manifest's verdict (docs/DEVICES.md).
    static func jsonKey(forTableField field: String) -> String {
        field == "ane_region_budget_bytes" ? "region_budget_bytes" : field
    }
}
