import Foundation

/// One compiled artifact of a job.
public struct FarmDeviceResult: Codable, Equatable, Sendable {
    /// The architecture id.
    public var device: String
    /// `built`, `skipped` or `failed`.
    public var status: String
    /// The artifact, relative to the output folder (null when failed: none of this run's is there).
    @NullEncoded public var artifact: String?
    /// `fits`, `needs-entitlement` or `does-not-fit` (null when failed).
    @NullEncoded public var memory: String?
    /// `all-regions-within-budget` or `regions-over-budget` (null when failed).
    @NullEncoded public var neuralEngine: String?
    /// Why it failed (null otherwise).
    @NullEncoded public var error: String?
    /// The compile's exit status (0 unless failed; a refusal before it, the status the compile
    /// would end with).
    public var exitStatus: Int32 = 0

    enum CodingKeys: String, CodingKey {
        case device, status, artifact, memory, error
        case neuralEngine = "neural_engine"
        case exitStatus = "exit_status"
    }
}

/// One job's outcome, as the farm report records it.
public struct FarmJobResult: Codable, Equatable, Sendable {
    /// The job's name.
    public var name: String
    /// `built` (its bundle or a device was built), `skipped` (its key and artifacts were
    /// unchanged) or `failed` (its export, or any of its devices, failed).
    public var status: String
    /// The bundle's own outcome: `built`, `skipped` or `failed` (then `status` is `failed` too);
    /// a job whose devices failed after its bundle was built or skipped has its bundle's here.
    public var bundleStatus: String = "failed"
    /// The bundle, relative to the output folder (null when the export failed).
    @NullEncoded public var bundle: String?
    /// The bundle's bytes (null when the export failed).
    @NullEncoded public var bundleBytes: Int?
    /// The bundle's build key (null when failed before planning).
    @NullEncoded public var buildKey: String?
    /// Why it failed (null otherwise): the export's error, or each failed device's
    /// (`device h17p: …`), a line each.
    @NullEncoded public var error: String?
    /// The export's exit status, or the first failed device's (0 unless failed).
    public var exitStatus: Int32
    /// The job's compiled artifacts, one per device asked for.
    public var devices: [FarmDeviceResult] = []

    enum CodingKeys: String, CodingKey {
        case name, status, bundle, error, devices
        case bundleStatus = "bundle_status"
        case bundleBytes = "bundle_bytes"
        case buildKey = "build_key"
        case exitStatus = "exit_status"
    }

    /// Marks the job failed when a device failed: its status, error and exit status are then
    /// the failed devices', its bundle's own outcome stays in ``bundleStatus``.
    mutating func includeDeviceFailures() {
        let failed = devices.filter { $0.status == "failed" }
        guard let first = failed.first, status != "failed" else { return }
        status = "failed"
        exitStatus = first.exitStatus
        error = failed.map { "device \($0.device): " + ($0.error ?? "failed") }.joined(separator: "\n")
    }
}

/// `farm-report.json`: what a farm run (or a shard of one) did.
public struct FarmReport: Codable, Equatable, Sendable {
    /// The schema this version writes and collects.
    public static let currentSchema = "exporter.farm-report/2"

    /// `exporter.farm-report/2`.
    public var schema: String
    /// The farm file's name.
    public var farm: String
    /// What defined the jobs this report is of (``FarmRunner/farmDigest()``): `--collect` merges
    /// only reports of the farm as it is now.
    public var farmDigest: String
    /// The `--run-id` the run was given (null without): `--collect` merges only reports of one run.
    @NullEncoded public var runID: String?
    /// `I/N` for a shard's report, null for a whole run or a collected report.
    @NullEncoded public var shard: String?
    /// Jobs in farm-file order (a shard's report holds its own jobs only).
    public var jobs: [FarmJobResult]
    /// Seconds each job took, by name (kept apart from `jobs` so reports of equal work compare equal).
    public var seconds: [String: Double]
    /// A random id of this report, new every time one is written: two runs' reports differ even
    /// when their work was the same, so a collect tells which reports it has merged before.
    public var reportID: String
    /// In a shard report a collect merged: that collect's mark (a digest of the `report_id`s it
    /// merged); null until then. A later collect refuses a report marked by another set of reports.
    @NullEncoded public var collected: String?

    /// A report of `jobs`, with a new `report_id`.
    public init(
        farm: String, farmDigest: String, runID: String?, shard: String?, jobs: [FarmJobResult],
        seconds: [String: Double]
    ) {
        schema = FarmReport.currentSchema
        self.farm = farm
        self.farmDigest = farmDigest
        self.runID = runID
        self.shard = shard
        self.jobs = jobs
        self.seconds = seconds
        reportID = UniqueName.make().lowercased()
    }

    /// How many jobs failed (their export or a device).
    public var failedCount: Int { jobs.filter { $0.status == "failed" }.count }

    enum CodingKeys: String, CodingKey {
        case schema, farm, shard, jobs, seconds
        case farmDigest = "farm_digest"
        case runID = "run_id"
        case reportID = "report_id"
        case collected
    }

    /// Canonical JSON: sorted keys, pretty, final newline.
    /// - Throws: an `EncodingError` only for non-finite numbers.
    public func canonicalJSON() throws -> [UInt8] { try CanonicalJSON.encode(self) }
}
