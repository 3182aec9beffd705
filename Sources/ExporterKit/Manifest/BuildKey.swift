import Foundation

/// The key of an artifact's inputs: the same key means the same artifact would be built,
/// so a farm can skip it. Derived from the tool version, the resolved config, the options,
/// the compression config and a content fingerprint of every checkpoint file — never from
/// paths or timestamps, so the same inputs give the same key on any machine.
public enum BuildKey {
    /// Windows sampled per file for its fingerprint.
    static let sampleCount = 64
    /// Bytes per sampled window.
    static let sampleBytes = 64 << 10

    /// Bytes read at the start, middle and end of every tensor.
    static let tensorSampleBytes = 4 << 10

    /// A file's content fingerprint: its size and the CRC-32 of evenly spaced windows (first
    /// and last included) and, for a weights file, of three small windows in every tensor
    /// (`tensorRanges`, file offsets): start, middle and end, or the whole of a small one.
    /// A fine-tune changes values everywhere, a LoRA merge or a norm edit every value of the
    /// tensors it touches, so a window changes; reading a few MiB instead of gigabytes keeps a
    /// farm's no-op run in seconds. A change to a few values of a large tensor can go unseen:
    /// `batch --force` rebuilds. A file the bundle copies (`whole`: the tokenizer's, the index)
    /// is read whole, as one token renamed matters: the same digest as sampling gives a file
    /// of 4 MiB or less, which one window covers.
    /// - Throws: `BundleError.readFailed` naming the file.
    public static func fingerprint(of url: URL, tensorRanges: [Range<Int>] = [], whole: Bool = false) throws
        -> String
    {
        // Positioned reads into one buffer (FileHandle read each window 4 KiB at a time).
        try BundleError.readingFile(url.path) {
            let file = try ReadOnlyFile(path: url.path)
            let size = file.byteCount
            let windows = size <= sampleBytes * sampleCount ? 1 : sampleCount
            let windowBytes = windows == 1 || whole ? min(size, sampleBytes * sampleCount) : sampleBytes
            let stepBytes = windows == 1 ? 0 : (size - sampleBytes) / (windows - 1)
            var ranges =
                whole
                ? stride(from: 0, to: size, by: max(windowBytes, 1)).map { $0..<min($0 + windowBytes, size) }
                : (0..<windows).map { ($0 * stepBytes)..<($0 * stepBytes + windowBytes) }
            for tensor in tensorRanges where tensor.lowerBound >= 0 && tensor.upperBound <= size && !tensor.isEmpty {
                if tensor.count <= 3 * tensorSampleBytes {
                    ranges.append(tensor)
                    continue
                }
                let middle = tensor.lowerBound + (tensor.count - tensorSampleBytes) / 2
                for start in [tensor.lowerBound, middle, tensor.upperBound - tensorSampleBytes] {
                    ranges.append(start..<(start + tensorSampleBytes))
                }
            }
            let buffer = UnsafeMutableRawBufferPointer.allocate(
                byteCount: max(windowBytes, 3 * tensorSampleBytes), alignment: 16)
            defer { buffer.deallocate() }
            var crc = CRC32()
            for range in ranges {
                let part = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<range.count])
                try file.read(into: part, at: range.lowerBound)
                crc.update(UnsafeRawBufferPointer(part))
            }
            return "\(size):\(BundleWriter.hex(crc.value))"
        }
    }

    /// The key of an export of `plan` from files with the given fingerprints
    /// (name → fingerprint), or from synthetic weights with `syntheticSeed`. Besides the
    /// options, it digests the manifest the plan determines (``Manifest/init(plan:kind:weights:)``:
    /// every figure and name an export writes before reading a weight, such as the compression
    /// config's name and its rules as each tensor's `rule`), so that an input written into the
    /// artifact cannot change without its key: equal keys, equal bytes.
    public static func export(
        plan: ExportPlan, fileFingerprints: [(name: String, fingerprint: String)], syntheticSeed: UInt64?,
        allowClamp: Bool, calibration: String? = nil
    ) -> String {
        var hash = SHA256()
        hash.update(field: "exporter.build-key/2")
        hash.update(field: ToolVersion.current)
        hash.update(field: plan.platform.rawValue)
        hash.update(field: plan.precision.rawValue)
        hash.update(field: String(plan.contextLength))
        hash.update(field: plan.outputName)
        hash.update(field: plan.model.preset?.id ?? "")
        hash.update(field: allowClamp ? "clamp" : "refuse")
        if let calibration { hash.update(field: "calibration:\(calibration)") }
        // "synthetic/2": generated as the config's torch_dtype stores weights (float16 before),
        // so artifacts from the earlier generator are built again.
        hash.update(field: syntheticSeed.map { "synthetic/2:\($0)" } ?? "checkpoint")
        if let config = try? Data(contentsOf: plan.model.configURL) { hash.update(config) }
        hash.update(field: "tensors")
        for tensor in plan.tensors {
            let scheme = tensor.scheme
            hash.update(
                field: "\(tensor.spec.name)|\(tensor.spec.shape)|\(scheme.mode.rawValue)|\(scheme.bits ?? 0)|"
                    + "\(scheme.granularity?.rawValue ?? "")|\(scheme.groupSize ?? 0)|\(scheme.unevenGroups.rawValue)"
                    + (scheme.blockSize.map { "|block \($0)" } ?? "")
                    + (scheme.outlierFraction.map { "|outliers \($0)" } ?? "")
                    + (scheme.search.map { "|search \($0.rawValue)" } ?? ""))
        }
        hash.update(field: "files")
        for file in fileFingerprints.sorted(by: { $0.name < $1.name }) {
            hash.update(field: "\(file.name)=\(file.fingerprint)")
        }
        hash.update(field: "planned manifest")
        // Canonical JSON: sorted keys, so the same plan gives the same bytes on any machine.
        hash.update((try? CanonicalJSON.encode(Manifest(plan: plan, kind: "bundle"))) ?? [])
        return hash.hexDigest()
    }

    /// The key of a compiled artifact: its bundle's key, the whole device entry (every number
    /// the compiler reads, and its products and estimates, which the manifest records or
    /// `docs/DEVICES.md` explains), and the minimum deployment version. A changed device entry
    /// recompiles that device only; a changed bundle recompiles every device.
    public static func compiled(bundleKey: String, device: DeviceArchitecture, minimumDeploymentVersion: String)
        -> String
    {
        var hash = SHA256()
        hash.update(field: "exporter.compiled-key/2")
        hash.update(field: bundleKey)
        hash.update(field: minimumDeploymentVersion)
        hash.update(
            field: "\(device.id)|\(device.platform.rawValue)|\(device.chip)|\(device.aheadOfTime)|\(device.ramBytes)|"
                + "\(device.appMemoryLimitBytes)|\(device.increasedMemoryLimitBytes ?? -1)|"
                + "\(device.entitlements.joined(separator: ","))|\(device.regionBudgetBytes)|\(device.pageSize)")
        // A field each, so that no name can run into the next.
        hash.update(field: "products \(device.products.count)")
        for product in device.products { hash.update(field: product) }
        hash.update(field: "estimates \(device.estimates.count)")
        for estimate in device.estimates { hash.update(field: estimate) }
        return hash.hexDigest()
    }
}
