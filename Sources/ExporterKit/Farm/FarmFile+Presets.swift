import Foundation

extension FarmFile {
    /// Checks what the farm file and the presets alone decide, before any job runs: every
    /// `compression` names a shipped config (or `none`), every `preset` a preset, and a
    /// `context` is within the `max_position_embeddings` of the preset a job's model names.
    /// - Throws: `FarmError.invalidJob` naming the job and the key (`.invalidJobs`, each job's
    ///   first fault, when several jobs have one).
    public func check(against catalog: PresetCatalog) throws {
        let compressions = catalog.compressionConfigNames() + ["none"]
        let folder = path.deletingLastPathComponent()
        try FarmError.throwAll(
            jobs.compactMap { job -> FarmError? in
                func bad(_ reason: String) -> FarmError { .invalidJob(path: path.path, job: job.name, reason: reason) }
                if let name = job.compression, !compressions.contains(name) {
                    return bad("'compression' is '\(name)'; expected one of: \(compressions.joined(separator: ", "))")
                }
                if let name = job.preset, catalog.preset(named: name) == nil {
                    return bad(
                        "'preset' is '\(name)'; expected one of: \(catalog.presets.map(\.id).joined(separator: ", "))")
                }
                // A model that names a preset, not a folder (which the export would take first).
                guard let context = job.context, job.preset == nil,
                    job.modelArgument(farmDirectory: folder) == job.model,
                    let preset = catalog.preset(named: job.model),
                    let maximum = (try? ModelConfig(contentsOf: preset.configURL))?.maxPositionEmbeddings,
                    context > maximum
                else { return nil }
                return bad(
                    "'context' is \(context), more than the max_position_embeddings of preset '\(preset.id)' "
                        + "(\(maximum))")
            })
    }
}
