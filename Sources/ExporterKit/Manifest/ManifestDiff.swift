import Foundation

/// What changed between two manifests (plans, bundles or compiled artifacts): sizes in all
/// and per group, bits per weight, context, KV cache, memory, device verdicts and per-tensor
/// storage and SQNR. `exporter diff` prints it and, given thresholds, gates a release on it.
public struct ManifestDiff: Sendable {
    /// A number on both sides (nil where a side lacks it).
    public struct Quantity: Equatable, Sendable {
        /// What it is: `size on disk`, `bytes: mlp`…
        public let field: String
        /// Before.
        public let before: Double?
        /// After.
        public let after: Double?
        /// Whether the quantity counts bytes (printed as sizes).
        public let isBytes: Bool
        /// Whether it is a ratio printed with two decimals (bits per weight), not a count.
        public var isRatio: Bool = false

        /// `after − before`, when both exist.
        public var delta: Double? { before.flatMap { b in after.map { $0 - b } } }
        /// The change in percent of `before`, when both exist and `before` is not zero.
        public var percent: Double? {
            guard let before, let after, before != 0 else { return nil }
            return (after - before) / before * 100
        }
        /// Whether the two sides differ.
        public var changed: Bool { before != after }
    }

    /// A text field that differs.
    public struct TextChange: Equatable, Sendable {
        /// The field.
        public let field: String
        /// Before (nil: absent).
        public let before: String?
        /// After (nil: absent).
        public let after: String?
    }

    /// A tensor whose storage, bytes or SQNR changed, or which exists on one side only.
    public struct TensorChange: Equatable, Sendable {
        /// Tensor name.
        public let name: String
        /// Storage label before (nil: absent).
        public let storageBefore: String?
        /// Storage label after (nil: absent).
        public let storageAfter: String?
        /// Stored bytes before.
        public let bytesBefore: Int?
        /// Stored bytes after.
        public let bytesAfter: Int?
        /// SQNR before in dB; infinity for an exactly stored tensor of an artifact, nil when unknown.
        public let sqnrBefore: Double?
        /// SQNR after, as `sqnrBefore`.
        public let sqnrAfter: Double?

        /// How many dB the SQNR fell (positive: worse), when both sides know it.
        public var sqnrDrop: Double? {
            guard let before = sqnrBefore, let after = sqnrAfter else { return nil }
            if before == after { return 0 }
            guard before.isFinite, after.isFinite else { return before - after }
            // In hundredths, as manifests write SQNR: 21.26 − 18.45 is then 2.81, not
            // 2.8100000000000023, and a threshold of 2.81 is not exceeded.
            return ((before * 100).rounded() - (after * 100).rounded()) / 100
        }
    }

    /// Names of the two sides, as given.
    public let beforeName: String
    /// Names of the two sides, as given.
    public let afterName: String
    /// Every compared quantity, changed or not, in a fixed order.
    public let quantities: [Quantity]
    /// Text fields that differ.
    public let textChanges: [TextChange]
    /// Tensors that changed, in the order of the later manifest (removed ones last).
    public let tensorChanges: [TensorChange]
    /// Devices (`h17p iOS`) whose memory verdict is worse in the later manifest, in order.
    public let verdictsWorsened: [(device: String, before: MemoryVerdict, after: MemoryVerdict)]

    /// The thresholds of a release gate; nil (or false) checks nothing.
    public struct ReleaseGate: Sendable {
        /// `--max-size-growth`: percent the size on disk may grow by.
        public var maxSizeGrowthPercent: Double?
        /// `--max-memory-growth`: percent the memory a device needs may grow by.
        public var maxMemoryGrowthPercent: Double?
        /// `--min-sqnr-drop`: dB any tensor's SQNR may fall by.
        public var maxSQNRDrop: Double?
        /// `--no-verdict-regression`: no device's memory verdict may get worse.
        public var verdictsMustHold: Bool

        /// A gate of these thresholds.
        public init(
            maxSizeGrowthPercent: Double? = nil, maxMemoryGrowthPercent: Double? = nil, maxSQNRDrop: Double? = nil,
            verdictsMustHold: Bool = false
        ) {
            self.maxSizeGrowthPercent = maxSizeGrowthPercent
            self.maxMemoryGrowthPercent = maxMemoryGrowthPercent
            self.maxSQNRDrop = maxSQNRDrop
            self.verdictsMustHold = verdictsMustHold
        }

        /// Whether it checks anything.
        public var isEmpty: Bool {
            maxSizeGrowthPercent == nil && maxMemoryGrowthPercent == nil && maxSQNRDrop == nil && !verdictsMustHold
        }
    }

    /// Growth of the size on disk in percent (negative: smaller); nil when the earlier size is 0.
    public var sizeGrowthPercent: Double? { quantities.first { $0.field == "size on disk" }?.percent }

    /// Compares `before` with `after`.
    public init(before: LoadedArtifact, after: LoadedArtifact) {
        self.init(
            before: InspectionSummary(artifact: before, worst: 0), after: InspectionSummary(artifact: after, worst: 0),
            beforeName: before.displayPath, afterName: after.displayPath)
    }

    /// Compares two summaries.
    public init(before a: InspectionSummary, after b: InspectionSummary, beforeName: String, afterName: String) {
        self.beforeName = beforeName
        self.afterName = afterName
        let ma = a.manifest
        let mb = b.manifest
        var quantities: [Quantity] = []
        func add(_ field: String, _ x: Int?, _ y: Int?, bytes: Bool) {
            quantities.append(
                Quantity(field: field, before: x.map(Double.init), after: y.map(Double.init), isBytes: bytes))
        }
        // A compiled artifact beside a portable bundle or a plan: both as portable bundles (the
        // compiled one records its bundle's size and memory), or compiling alone would "grow" them.
        let mixedKinds = (ma.compiled == nil) != (mb.compiled == nil)
        func size(_ summary: InspectionSummary) -> Int {
            mixedKinds ? summary.manifest.compiled?.portable.bytes ?? summary.sizeOnDisk : summary.sizeOnDisk
        }
        func memory(_ manifest: Manifest) -> Int {
            mixedKinds ? manifest.memory.totalBytes : manifest.compiled?.memory.totalBytes ?? manifest.memory.totalBytes
        }
        add("size on disk", size(a), size(b), bytes: true)
        quantities.append(
            Quantity(
                field: "bits per weight", before: ma.sizes.bitsPerWeight, after: mb.sizes.bitsPerWeight, isBytes: false,
                isRatio: true))
        add("parameters", ma.parameters, mb.parameters, bytes: false)
        add("context length", ma.contextLength, mb.contextLength, bytes: false)
        add("KV cache", ma.kvCache.bytes, mb.kvCache.bytes, bytes: true)
        // Two compiled artifacts: their own plans, as inspect shows them (what each device reserves).
        add("memory", memory(ma), memory(mb), bytes: true)
        for role in TensorRole.allCases.map(\.rawValue) {
            let x = a.groups.first { $0.role == role }
            let y = b.groups.first { $0.role == role }
            guard x != nil || y != nil else { continue }
            add("bytes: \(role)", x?.bytes, y?.bytes, bytes: true)
            quantities.append(
                Quantity(
                    field: "bits/w: \(role)", before: x?.bitsPerWeight, after: y?.bitsPerWeight, isBytes: false,
                    isRatio: true))
        }
        self.quantities = quantities

        var texts: [TextChange] = []
        func text(_ field: String, _ x: String?, _ y: String?) {
            if x != y { texts.append(TextChange(field: field, before: x, after: y)) }
        }
        text("model", ma.model.name, mb.model.name)
        text("model type", ma.model.modelType, mb.model.modelType)
        text("preset", ma.model.preset ?? "none (experimental)", mb.model.preset ?? "none (experimental)")
        text("weights", ma.model.weights, mb.model.weights)
        text("platform", ma.platform, mb.platform)
        text("precision", ma.computePrecision, mb.computePrecision)
        text("compression", ma.compression.config, mb.compression.config)
        text("kind", ma.kind, mb.kind)
        // What an upgrade alone changes: other warnings, a file more (config.json from 0.7.2).
        text("tool version", ma.tool.version, mb.tool.version)
        // By id and platform: `h14g` names both a Mac and Apple Vision Pro.
        let devicesA = ManifestDiff.verdictsByDevice(a)
        let devicesB = ManifestDiff.verdictsByDevice(b)
        for device in Set(devicesA.keys).union(devicesB.keys).sorted() {
            text("verdict: \(device)", devicesA[device], devicesB[device])
        }
        textChanges = texts
        verdictsWorsened = devicesA.keys.sorted().compactMap { device in
            guard let before = devicesA[device].flatMap(MemoryVerdict.init(rawValue:)),
                let after = devicesB[device].flatMap(MemoryVerdict.init(rawValue:)),
                ManifestDiff.severity(after) > ManifestDiff.severity(before)
            else { return nil }
            return (device, before, after)
        }

        let precisionA = ComputePrecision(rawValue: ma.computePrecision) ?? .float16
        let precisionB = ComputePrecision(rawValue: mb.computePrecision) ?? .float16
        func sqnr(_ tensor: Manifest.Tensor, in manifest: Manifest) -> Double? {
            if let value = tensor.sqnrDB { return value }
            // An artifact stores a tensor without SQNR exactly; a plan does not know yet.
            return manifest.kind == "plan" ? nil : .infinity
        }
        let tensorsA = Dictionary(ma.tensors.map { ($0.name, $0) }, uniquingKeysWith: { x, _ in x })
        let namesB = Set(mb.tensors.map(\.name))
        var changes: [TensorChange] = []
        for tensor in mb.tensors {
            let old = tensorsA[tensor.name]
            let change = TensorChange(
                name: tensor.name, storageBefore: old?.compression.label(precision: precisionA),
                storageAfter: tensor.compression.label(precision: precisionB), bytesBefore: old?.storedBytes,
                bytesAfter: tensor.storedBytes, sqnrBefore: old.flatMap { sqnr($0, in: ma) },
                sqnrAfter: sqnr(tensor, in: mb))
            if old == nil || change.storageBefore != change.storageAfter || change.bytesBefore != change.bytesAfter
                || change.sqnrBefore != change.sqnrAfter
            {
                changes.append(change)
            }
        }
        for tensor in ma.tensors where !namesB.contains(tensor.name) {
            changes.append(
                TensorChange(
                    name: tensor.name, storageBefore: tensor.compression.label(precision: precisionA),
                    storageAfter: nil,
                    bytesBefore: tensor.storedBytes, bytesAfter: nil, sqnrBefore: sqnr(tensor, in: ma), sqnrAfter: nil))
        }
        tensorChanges = changes
    }

    /// The release-gate failures: the size on disk or the memory grew by more than their limits,
    /// a tensor's SQNR fell by more than its limit, a device's verdict got worse. Empty when
    /// everything holds.
    public func regressions(_ gate: ReleaseGate) -> [String] {
        var result: [String] = []
        for (field, limit, option) in [
            ("size on disk", gate.maxSizeGrowthPercent, "--max-size-growth"),
            ("memory", gate.maxMemoryGrowthPercent, "--max-memory-growth"),
        ] {
            guard let limit, let quantity = quantities.first(where: { $0.field == field }),
                let before = quantity.before, let after = quantity.after
            else { continue }
            let growth = quantity.percent ?? (after > before ? Double.infinity : 0)
            // Multiplied out rather than divided, so that growing by exactly the limit passes.
            let exceeds = before > 0 ? (after - before) * 100 > limit * before : after > before
            if exceeds {
                // From nothing, growth has no percentage: said as such, not as "inf%".
                let grew =
                    growth.isFinite ? "grew by \(ManifestDiff.percent(growth, above: limit))%" : "grew from nothing"
                result.append(
                    "\(field) \(grew) (\(String(format: "%.0f", before)) → "
                        + "\(String(format: "%.0f", after)) bytes), more than \(option) \(ManifestDiff.plain(limit))%")
            }
        }
        if let limit = gate.maxSQNRDrop {
            for change in tensorChanges {
                guard let drop = change.sqnrDrop, drop > limit else { continue }
                result.append(
                    "tensor '\(change.name)': SQNR fell by \(drop.isInfinite ? "∞ dB" : ManifestDiff.decibels(drop)) (\(ManifestDiff.decibels(change.sqnrBefore)) → "
                        + "\(ManifestDiff.decibels(change.sqnrAfter))), more than --min-sqnr-drop \(ManifestDiff.plain(limit)) dB"
                )
            }
        }
        if gate.verdictsMustHold {
            for (device, before, after) in verdictsWorsened {
                result.append(
                    "verdict of \(device): \(before.rawValue) → \(after.rawValue), against --no-verdict-regression")
            }
        }
        return result
    }

    /// Each device verdict of a summary by `<id> <platform>`, the id in lower case: the device
    /// table compares ids in any case (`H17P` is `h17p`).
    static func verdictsByDevice(_ summary: InspectionSummary) -> [String: String] {
        Dictionary(
            (summary.deviceVerdicts ?? []).map { ("\($0.device.lowercased()) \($0.platform)", $0.verdict) },
            uniquingKeysWith: { first, _ in first })
    }

    /// How far a memory verdict is from fitting: fits, then needs-entitlement, then does-not-fit.
    static func severity(_ verdict: MemoryVerdict) -> Int {
        switch verdict {
        case .fits: return 0
        case .needsEntitlement: return 1
        case .doesNotFit: return 2
        }
    }

    /// `12.34 dB`, `exact` for infinity, `—` for unknown.
    public static func decibels(_ value: Double?) -> String {
        guard let value else { return "—" }
        if value == .infinity { return "exact" }
        if value.isInfinite { return value > 0 ? "∞ dB" : "-∞ dB" }
        return String(format: "%.2f dB", value)
    }

    /// `value` with two decimals, or as many more as it takes (up to 15) to print a figure above
    /// `limit` when it is above: a growth of 2.002% against a limit of 2 is `2.002`, not `2.00`.
    static func percent(_ value: Double, above limit: Double) -> String {
        var text = String(format: "%.2f", value)
        guard value > limit, value.isFinite else { return text }
        for places in 3...15 {
            guard let shown = Double(text), shown <= limit else { break }
            text = String(format: "%.\(places)f", value)
        }
        return text
    }

    /// A threshold as typed: `5` rather than `5.0`.
    static func plain(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int(value)) : String(value)
    }
}
