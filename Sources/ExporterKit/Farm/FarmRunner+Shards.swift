import Foundation

extension FarmRunner {
    /// The jobs of shard `index` of `count`: jobs sorted by estimated cost (``splitCost(of:)``,
    /// largest first, ties by name), each given to the shard with the least work so far (ties
    /// to the lower shard), so every job is in exactly one shard and shards are balanced. The
    /// split depends on the farm file and the configs it leads to only, never on the job order
    /// or on weights being on this machine: every machine computes the same one. Jobs are
    /// returned in farm-file order.
    public func shardJobs(index: Int, count: Int) -> [FarmJob] {
        let costs = farm.jobs.map(splitCost(of:))
        let order = farm.jobs.indices.sorted {
            costs[$0] != costs[$1] ? costs[$0] > costs[$1] : farm.jobs[$0].name < farm.jobs[$1].name
        }
        var load = [Int](repeating: 0, count: count)
        var assigned = [Int](repeating: 0, count: farm.jobs.count)
        for job in order {
            let target = load.indices.min { load[$0] != load[$1] ? load[$0] < load[$1] : $0 < $1 } ?? 0
            assigned[job] = target
            load[target] = load[target].saturatingAdding(costs[job])
        }
        return farm.jobs.indices.filter { assigned[$0] == index - 1 }.map { farm.jobs[$0] }
    }

    /// A job's estimated cost for the split: the parameters of the tensors its config implies.
    /// The config comes from files every machine has, never from the Hugging Face cache: the
    /// shipped config of its `preset`, else of its model's folder (`config.json`; weights or
    /// not), else of the preset its model names. A job with none of these (an `org/model` id
    /// without a preset, a folder missing here) or of a family without a known tensor layout
    /// costs 1.
    func splitCost(of job: FarmJob) -> Int {
        guard let url = splitConfigURL(of: job), let config = try? ModelConfig(contentsOf: url),
            let tensors = try? ArchitectureRegistry.tensors(for: config, configPath: url.path)
        else { return 1 }
        return max(1, tensors.map(\.shape.saturatingProduct).saturatingSum)
    }

    /// The config ``splitCost(of:)`` reads, if any.
    private func splitConfigURL(of job: FarmJob) -> URL? {
        let catalog = resolver.catalog
        if let name = job.preset, let preset = catalog.preset(named: name) { return preset.configURL }
        // As the export resolves a model: a folder first (relative to the farm file), then a preset.
        let argument = job.modelArgument(farmDirectory: farm.path.deletingLastPathComponent())
        var isDirectory: ObjCBool = false
        if argument != job.model || job.model.hasPrefix("/"),
            FileManager.default.fileExists(atPath: argument, isDirectory: &isDirectory), isDirectory.boolValue
        {
            return URL(fileURLWithPath: argument).appendingPathComponent("config.json")
        }
        return catalog.preset(named: job.model)?.configURL
    }
}
