import Dispatch
import ExporterKit
import Foundation

/// Safetensors reading speed against `cat` of the same files.
///
/// `exporter-bench read [--dir D]` writes (once) a synthetic BF16 checkpoint shaped like
/// Qwen2.5-1.5B (≈3.1 GB, two shards of at most 2 GB) under `D/qwen2.5-1.5b-bf16/` (default
/// `D` = `bench-work`), then times, in the same process, `cat` of its files to /dev/null and
/// reading every tensor through `CheckpointWeights` (raw and converted to float16, using every
/// core), with the peak resident memory of each step.
enum ReadBench {
    /// Elements per read: 8 MiB of float16 per worker, like a consumer streaming row blocks.
    static let elementsPerRead = 4 << 20

    static func run(_ arguments: [String]) throws {
        var root = URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent("bench-work")
        var remaining = arguments[...]
        var ensureOnly = false
        while let argument = remaining.popFirst() {
            switch argument {
            case "--ensure-only":
                ensureOnly = true
            case "--dir":
                guard let value = remaining.popFirst() else { throw ReadBenchError("--dir needs a folder") }
                root = URL(fileURLWithPath: value)
            case _ where argument.hasPrefix("--dir="):
                root = URL(fileURLWithPath: String(argument.dropFirst("--dir=".count)))
            default:
                throw ReadBenchError("unknown argument '\(argument)' (usage: exporter-bench read [--dir D])")
            }
        }
        let directory = root.appendingPathComponent("qwen2.5-1.5b-bf16")
        let index = directory.appendingPathComponent(CheckpointWeights.indexFileName)
        if !FileManager.default.fileExists(atPath: index.path) {
            print("writing a synthetic Qwen2.5-1.5B-shaped BF16 checkpoint to \(directory.path) …")
            let start = DispatchTime.now()
            let result = try SyntheticCheckpoint.write(
                tensors: qwen25Tensors(), dtype: .bf16, seed: 1, to: directory, shardBytes: 2_000_000_000,
                replacingExisting: true)
            print(
                String(format: "wrote %.2f GB in %.1f s", Double(result.totalTensorBytes) / 1e9, seconds(since: start)))
        }
        if ensureOnly { return }

        let weights = try CheckpointWeights(directory: directory)
        let files = weights.files.map(\.url.path)
        let fileBytes = weights.files.reduce(0) { $0 + $1.byteCount }
        let workers = max(ProcessInfo.processInfo.activeProcessorCount, 1)
        print(
            "\(weights.tensorNames.count) tensors, \(files.count) files, "
                + String(format: "%.2f GB", Double(fileBytes) / 1e9) + ", \(workers) cores")

        // Page-cache warm-up so every step reads from memory, as a build farm re-reading a
        // checkpoint would; then the best of five runs of each step.
        _ = try catFiles(files)
        var rows: [(String, Double, Double?, Int?)] = []
        let catSeconds = try (0..<5).map { _ in try catFiles(files) }.min() ?? 0
        rows.append(("cat files > /dev/null", catSeconds, nil, nil))
        for (label, threads, convert) in [
            ("read raw bytes (pread)", workers, false),
            ("read → float16, 1 thread", 1, true),
            ("read → float16, \(workers) threads", workers, true),
        ] {
            var best = Double.infinity
            var bestCPU = 0.0
            var peak: Int?  // nil where the system does not say (macOS: no VmHWM to reset)
            for _ in 0..<5 {
                resetPeakResidentMemory()
                let cpuBefore = processCPUSeconds()
                let elapsed = try readAll(weights, threads: threads, convert: convert)
                if elapsed < best {
                    best = elapsed
                    bestCPU = processCPUSeconds() - cpuBefore
                }
                if let bytes = peakResidentBytes() { peak = max(peak ?? 0, bytes) }
            }
            rows.append((label, best, bestCPU, peak))
        }

        print("")
        print(pad("step", 30) + pad("seconds", 10) + pad("GB/s", 8) + pad("× cat", 8) + pad("CPU s", 8) + "peak RSS")
        for (label, time, cpu, peak) in rows {
            let rss =
                peak.map { String(format: "%.0f MiB", Double($0) / 1_048_576) } ?? (cpu == nil ? "(child)" : "n/a")
            print(
                pad(label, 30) + pad(String(format: "%.3f", time), 10)
                    + pad(String(format: "%.2f", Double(fileBytes) / time / 1e9), 8)
                    + pad(String(format: "%.2f", time / catSeconds), 8)
                    + pad(cpu.map { String(format: "%.2f", $0) } ?? "-", 8) + rss)
        }
    }

    /// The tensors of Qwen2.5-1.5B: 28 layers, hidden 1536, 2 KV heads of 128, MLP 8960.
    static func qwen25Tensors() -> [(name: String, shape: [Int])] {
        var tensors: [(name: String, shape: [Int])] = [
            ("model.embed_tokens.weight", [151_936, 1536]), ("model.norm.weight", [1536]),
        ]
        for layer in 0..<28 {
            let prefix = "model.layers.\(layer)."
            tensors += [
                (prefix + "self_attn.q_proj.weight", [1536, 1536]), (prefix + "self_attn.q_proj.bias", [1536]),
                (prefix + "self_attn.k_proj.weight", [256, 1536]), (prefix + "self_attn.k_proj.bias", [256]),
                (prefix + "self_attn.v_proj.weight", [256, 1536]), (prefix + "self_attn.v_proj.bias", [256]),
                (prefix + "self_attn.o_proj.weight", [1536, 1536]),
                (prefix + "mlp.gate_proj.weight", [8960, 1536]), (prefix + "mlp.up_proj.weight", [8960, 1536]),
                (prefix + "mlp.down_proj.weight", [1536, 8960]),
                (prefix + "input_layernorm.weight", [1536]), (prefix + "post_attention_layernorm.weight", [1536]),
            ]
        }
        return tensors
    }

    /// Reads every tensor in blocks of `elementsPerRead`, `threads` blocks at a time, each
    /// worker into its own reused buffer; returns the wall time.
    static func readAll(_ weights: CheckpointWeights, threads: Int, convert: Bool) throws -> Double {
        var blocks: [(name: String, elements: Range<Int>)] = []
        for name in weights.tensorNames {
            let count = try weights.tensor(named: name).elementCount
            for start in stride(from: 0, to: count, by: elementsPerRead) {
                blocks.append((name, start..<min(start + elementsPerRead, count)))
            }
        }
        let lock = NSLock()
        var next = 0
        var failure: Error?
        let start = DispatchTime.now()
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            let buffer = UnsafeMutableBufferPointer<Float16>.allocate(capacity: elementsPerRead)
            defer { buffer.deallocate() }
            while true {
                lock.lock()
                let index = next
                next += 1
                lock.unlock()
                guard index < blocks.count else { return }
                let (name, elements) = blocks[index]
                let destination = UnsafeMutableBufferPointer(rebasing: buffer[0..<elements.count])
                do {
                    if convert {
                        try weights.readFloat16(name, elements: elements, into: destination)
                    } else {
                        let raw = UnsafeMutableRawBufferPointer(destination)
                        try weights.readRawBytes(of: name, byteOffset: elements.lowerBound * 2, into: raw)
                    }
                } catch {
                    lock.lock()
                    failure = failure ?? error
                    next = blocks.count
                    lock.unlock()
                }
            }
        }
        let elapsed = seconds(since: start)
        if let failure { throw failure }
        return elapsed
    }

    /// Runs `cat files > /dev/null` and returns its wall time.
    static func catFiles(_ files: [String]) throws -> Double {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/cat")
        process.arguments = files
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        let start = DispatchTime.now()
        try process.run()
        process.waitUntilExit()
        let elapsed = seconds(since: start)
        guard process.terminationStatus == 0 else {
            throw ReadBenchError("cat exited with \(process.terminationStatus)")
        }
        return elapsed
    }

    /// User plus system CPU time of this process so far: with the wall time it shows whether
    /// the cores really worked in parallel (the machine may be shared).
    static func processCPUSeconds() -> Double {
        var time = timespec()
        guard clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time) == 0 else { return 0 }
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// VmHWM, the peak resident set size, from /proc/self/status (Linux only).
    static func peakResidentBytes() -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            let digits = line.split(separator: " ").dropFirst().first.flatMap { Int($0) }
            return digits.map { $0 * 1024 }
        }
        return nil
    }

    /// Writing 5 to /proc/self/clear_refs resets VmHWM to the current RSS, so each step's peak is its own.
    static func resetPeakResidentMemory() {
        try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
    }

    static func seconds(since start: DispatchTime) -> Double {
        Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
    }

    static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text + " " : text + String(repeating: " ", count: width - text.count)
    }
}

/// A bench usage or environment problem, printed by `main`.
struct ReadBenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
