import Foundation

/// What an artifact is, from its manifest alone: "what am I shipping". `exporter inspect`
/// prints it, as text, JSON or an HTML report.
public struct InspectionSummary: Sendable {
    /// Sizes of one group of tensors (a role: embedding, attention, MLP, norms, head).
    public struct Group: Equatable, Sendable {
        /// The role.
        public let role: String
        /// Tensors in the group.
        public let tensors: Int
        /// Parameters.
        public let parameters: Int
        /// Stored bytes, without padding.
        public let bytes: Int
        /// `8 × bytes / parameters`.
        public let bitsPerWeight: Double
        /// The storage labels used, in first-use order (`4-bit LUT g8`, `fp16`…).
        public let storage: [String]
    }

    /// One row of the per-layer view: the embedding, each decoder layer, then the final norm and head.
    public struct Layer: Equatable, Sendable {
        /// `embedding`, `0`, `1`, …, `final norm`, `head`.
        public let label: String
        /// The decoder layer, nil for the rows outside the layers.
        public let layer: Int?
        /// Parameters.
        public let parameters: Int
        /// Stored bytes.
        public let bytes: Int
        /// `8 × bytes / parameters`.
        public let bitsPerWeight: Double
        /// Lowest SQNR of its compressed tensors, in dB; nil when none has one.
        public let minimumSQNR: Double?
        /// Mean SQNR of its compressed tensors, in dB; nil when none has one.
        public let meanSQNR: Double?
    }

    /// A tensor and its SQNR.
    public struct TensorQuality: Equatable, Sendable {
        /// Tensor name.
        public let name: String
        /// SQNR against the source, in dB.
        public let sqnrDB: Double
        /// Storage label.
        public let storage: String
    }

    /// Whether the artifact fits one device, as a compiled artifact records it.
    public struct DeviceVerdict: Equatable, Sendable {
        /// The device or its architecture (`h17p`).
        public let device: String
        /// Its platform: one id (`h14g`) names both a Mac and Apple Vision Pro.
        public let platform: String
        /// The verdict as recorded (`fits`, `tight`, `does not fit`…).
        public let verdict: String
        /// Why, when recorded.
        public let detail: String?
    }

    /// The manifest summarised.
    public let manifest: Manifest
    /// Groups by role, in role order.
    public let groups: [Group]
    /// The per-layer rows.
    public let layers: [Layer]
    /// The tensors with the lowest SQNR, lowest first.
    public let worstTensors: [TensorQuality]
    /// Whether any tensor has an SQNR (none listed under `--worst 0` does not mean none recorded).
    public let recordsSQNR: Bool
    /// Per-device verdicts (a compiled artifact's, or a plan's); nil when there are none.
    public let deviceVerdicts: [DeviceVerdict]?
    /// Bytes of every file of the artifact (the manifest's `sizes.bundle_bytes`), or the planned
    /// weights file for a plan.
    public let sizeOnDisk: Int
    /// What `sizeOnDisk` is, for people: `size on disk` for an artifact, `size (est.)` for a plan
    /// (no `sizes.bundle_bytes`), whose figure is the planned `weights.bin`, never written.
    public var sizeLabel: String { manifest.sizes.bundleBytes == nil ? "size (est.)" : "size on disk" }

    /// What a compiled artifact's device reserves for the KV cache, where `kv_cache.bytes` is the
    /// bundle's unpadded figure: `reserved on h17p: 64.0 KiB, each layer's K and V padded to the
    /// 16.0 KiB page`; nil for a bundle or a plan.
    public var reservedKVCache: String? {
        manifest.compiled.map {
            "reserved on \($0.architecture): \(Format.mebibytes($0.memory.kvCacheBytes)), each layer's K and V "
                + "padded to the \(Format.mebibytes($0.pageSize)) page"
        }
    }

    /// Whether the weights were generated (`--synthetic`): such an artifact must never ship.
    public var isSynthetic: Bool { manifest.model.weights == "synthetic" }

    /// Summarises `artifact`, listing its `worst` lowest-SQNR tensors.
    public init(artifact: LoadedArtifact, worst: Int = 5) {
        self.init(manifest: artifact.manifest, worst: worst)
    }

    /// Summarises `manifest`.
    public init(manifest: Manifest, worst: Int = 5) {
        self.manifest = manifest
        let precision = ComputePrecision(rawValue: manifest.computePrecision) ?? .float16
        func bits(_ bytes: Int, _ parameters: Int) -> Double {
            Manifest.rounded(Double(bytes) * 8 / Double(max(parameters, 1)))
        }
        groups = TensorRole.allCases.compactMap { role in
            let tensors = manifest.tensors.filter { $0.role == role.rawValue }
            guard !tensors.isEmpty else { return nil }
            let parameters = tensors.map(\.shape.saturatingProduct).saturatingSum
            let bytes = tensors.map(\.storedBytes).saturatingSum
            var labels: [String] = []
            for tensor in tensors {
                let label = tensor.compression.label(precision: precision)
                if !labels.contains(label) { labels.append(label) }
            }
            return Group(
                role: role.rawValue, tensors: tensors.count, parameters: parameters, bytes: bytes,
                bitsPerWeight: bits(bytes, parameters), storage: labels)
        }
        var keys: [String] = []
        var members: [String: [Manifest.Tensor]] = [:]
        for tensor in manifest.tensors {
            let key: String
            if let layer = tensor.layer {
                key = String(layer)
            } else {
                key = tensor.role == "norm" ? "final norm" : tensor.role
            }
            if members[key] == nil { keys.append(key) }
            members[key, default: []].append(tensor)
        }
        layers = keys.map { key in
            let tensors = members[key] ?? []
            let parameters = tensors.map(\.shape.saturatingProduct).saturatingSum
            let bytes = tensors.map(\.storedBytes).saturatingSum
            let sqnr = tensors.compactMap(\.sqnrDB)
            return Layer(
                label: key, layer: tensors.first?.layer, parameters: parameters, bytes: bytes,
                bitsPerWeight: bits(bytes, parameters), minimumSQNR: sqnr.min(),
                meanSQNR: sqnr.isEmpty ? nil : Manifest.rounded(sqnr.reduce(0, +) / Double(sqnr.count)))
        }
        worstTensors = manifest.tensors.compactMap { tensor in
            tensor.sqnrDB.map {
                TensorQuality(name: tensor.name, sqnrDB: $0, storage: tensor.compression.label(precision: precision))
            }
        }
        .sorted { ($0.sqnrDB, $0.name) < ($1.sqnrDB, $1.name) }
        .prefix(worst).map { $0 }
        recordsSQNR = manifest.tensors.contains { $0.sqnrDB != nil }
        deviceVerdicts = InspectionSummary.verdicts(of: manifest)
        sizeOnDisk = manifest.sizes.bundleBytes ?? manifest.sizes.estimatedBundleBytes
    }

    /// Device verdicts: a compiled artifact's own (`compiled.verdict`), or a plan's for every
    /// eligible device (`verdicts`); nil when the manifest has none (a portable bundle).
    static func verdicts(of manifest: Manifest) -> [DeviceVerdict]? {
        let list = manifest.compiled.map { [$0.verdict] } ?? manifest.verdicts
        guard !list.isEmpty else { return nil }
        return list.map { verdict in
            var detail = verdict.aheadOfTime ? "" : "no AOT; "
            detail += "\(Format.mebibytes(verdict.totalBytes)) of \(Format.mebibytes(verdict.appMemoryLimitBytes))"
            if let raised = verdict.increasedMemoryLimitBytes { detail += " (\(Format.mebibytes(raised)) entitled)" }
            if !verdict.regionsOverBudget.isEmpty {
                detail +=
                    "; ANE regions \(verdict.regionsOverBudget.map(String.init).joined(separator: ", ")) over budget"
            }
            return DeviceVerdict(
                device: verdict.architecture, platform: verdict.platform, verdict: verdict.memory.rawValue,
                detail: detail)
        }
    }
}

extension InspectionSummary {
    /// The summary as JSON, keys in a fixed order.
    public var json: JSONValue {
        let m = manifest
        func int(_ value: Int) -> JSONValue { .number(String(value)) }
        func double(_ value: Double?) -> JSONValue {
            guard let value, value.isFinite else { return .null }
            return .number(Format.decimal(value))
        }
        func string(_ value: String?) -> JSONValue { value.map { .string($0) } ?? .null }
        var root = JSONObject()
        root["kind"] = .string(m.kind)
        root["tool_version"] = .string(m.tool.version)
        root["bundle_tool_version"] = string(m.compiled?.portable.toolVersion)
        root["model"] = .object(
            JSONObject([
                ("name", .string(m.model.name)),
                ("model_type", .string(m.model.modelType)),
                ("registry_type", .string(m.model.registryType)),
                ("preset", string(m.model.preset)),
                ("experimental", .bool(m.model.experimental)),
                ("weights", .string(m.model.weights)),
                ("synthetic", .bool(isSynthetic)),
            ]))
        root["platform"] = .string(m.platform)
        root["compute_precision"] = .string(m.computePrecision)
        root["context_length"] = int(m.contextLength)
        root["parameters"] = int(m.parameters)
        root["kv_cache_bytes"] = int(m.kvCache.bytes)
        root["kv_cache_reserved_bytes"] = m.compiled.map { int($0.memory.kvCacheBytes) } ?? .null
        root["memory_total_bytes"] = int(m.compiled?.memory.totalBytes ?? m.memory.totalBytes)
        root["size_on_disk_bytes"] = int(sizeOnDisk)
        root["bits_per_weight"] = double(m.sizes.bitsPerWeight)
        root["groups"] = .array(
            groups.map { group in
                .object(
                    JSONObject([
                        ("role", .string(group.role)), ("tensors", int(group.tensors)),
                        ("parameters", int(group.parameters)),
                        ("bytes", int(group.bytes)), ("bits_per_weight", double(group.bitsPerWeight)),
                        ("storage", .array(group.storage.map { .string($0) })),
                    ]))
            })
        root["layers"] = .array(
            layers.map { layer in
                .object(
                    JSONObject([
                        ("label", .string(layer.label)), ("parameters", int(layer.parameters)),
                        ("bytes", int(layer.bytes)),
                        ("bits_per_weight", double(layer.bitsPerWeight)), ("min_sqnr_db", double(layer.minimumSQNR)),
                        ("mean_sqnr_db", double(layer.meanSQNR)),
                    ]))
            })
        root["worst_sqnr"] = .array(
            worstTensors.map {
                .object(
                    JSONObject([
                        ("name", .string($0.name)), ("sqnr_db", double($0.sqnrDB)), ("storage", .string($0.storage)),
                    ]))
            })
        root["device_verdicts"] =
            deviceVerdicts.map { verdicts in
                .array(
                    verdicts.map {
                        .object(
                            JSONObject([
                                ("device", .string($0.device)), ("platform", .string($0.platform)),
                                ("verdict", .string($0.verdict)),
                                ("detail", string($0.detail)),
                            ]))
                    })
            } ?? .null
        root["tokenizer"] =
            m.tokenizer.map { tokenizer in
                .object(
                    JSONObject([
                        ("files", .array(tokenizer.files.map { .string($0) })),
                        ("reasoning_marker", string(tokenizer.reasoningMarker)),
                        ("default_response_tokens", int(tokenizer.defaultResponseTokens)),
                    ]))
            } ?? .null
        root["warnings"] = .array(m.warnings.map { .string($0) })
        return .object(root)
    }
}
