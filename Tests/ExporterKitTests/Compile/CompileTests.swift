import Foundation
import TestSupport
import Testing

@testable import ExporterKit

/// A small synthetic model, its bundle, and two made-up architectures with tight budgets.
struct CompileFixture {
    let bundleURL: URL
    let plan: ExportPlan
    let table: DeviceTable

    static let wide = DeviceArchitecture(
        id: "t1a", platform: .iOS, chip: "Test A", products: ["Test phone A"], aheadOfTime: true, ramBytes: 1 << 30,
        appMemoryLimitBytes: 2_000_000, increasedMemoryLimitBytes: 4_000_000, entitlements: ["test.entitlement"],
        regionBudgetBytes: 1_600_000, pageSize: 4096)
    static let narrow = DeviceArchitecture(
        id: "t1b", platform: .iOS, chip: "Test B", products: ["Test phone B"], aheadOfTime: true, ramBytes: 1 << 30,
        appMemoryLimitBytes: 1_000_000, increasedMemoryLimitBytes: 2_000_000, entitlements: ["test.entitlement"],
        regionBudgetBytes: 1_500_000, pageSize: 16384)
    static let old = DeviceArchitecture(
        id: "t0", platform: .iOS, chip: "Test 0", products: ["Old phone"], aheadOfTime: false, ramBytes: 1 << 30,
        appMemoryLimitBytes: 1_000_000, increasedMemoryLimitBytes: nil, entitlements: [], regionBudgetBytes: 1_000_000,
        pageSize: 16384)

    init(layers: Int = 6) throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(overrides: ["num_hidden_layers": layers])
        plan = try Fixtures.plan(checkpoint)
        bundleURL = try ExportRunner.run(
            plan, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory())
        )
        .bundleURL
        table = DeviceTable(
            devices: [CompileFixture.old, CompileFixture.wide, CompileFixture.narrow], rules: [.iOS: "test rule"])
    }

    func compile(_ devices: [DeviceArchitecture], into output: URL? = nil, faults: FaultInjector? = nil) throws
        -> [CompileResult]
    {
        var request = CompileRequest(
            platform: .iOS, devices: devices, minimumDeploymentVersion: .minimum,
            outputDirectory: try output ?? Fixtures.temporaryDirectory())
        request.faults = faults
        return try Compiler.compile(bundleURL: bundleURL, request: request)
    }
}

@Suite("ahead-of-time compilation")
struct CompileTests {
    @Test("two architectures give two different artifacts whose regions respect each budget and cover every layer once")
    func twoArchitectures() throws {
        let fixture = try CompileFixture()
        let results = try fixture.compile([CompileFixture.wide, CompileFixture.narrow])
        #expect(results.map(\.url.lastPathComponent) == ["Tiny.t1a.aimodelc", "Tiny.t1b.aimodelc"])
        var layouts: [[String]] = []
        for (result, device) in zip(results, [CompileFixture.wide, CompileFixture.narrow]) {
            let compiled = try #require(result.manifest.compiled)
            #expect(result.manifest.kind == "compiled")
            #expect(compiled.architecture == device.id)
            #expect(compiled.pageSize == device.pageSize)
            #expect(compiled.regions.first?.kind == "embedding")
            #expect(compiled.regions.last?.kind == "head")
            var layers: [Int] = []
            for region in compiled.regions {
                #expect(region.withinBudget)
                #expect(region.footprintBytes <= device.regionBudgetBytes)
                #expect(region.footprintBytes == region.bytes + region.kvCacheBytes + region.workingBytes)
                #expect(region.offset % device.pageSize == 0)
                if let first = region.firstLayer, let last = region.lastLayer { layers += Array(first...last) }
            }
            #expect(layers == Array(0..<6))
            // The tied head carries its own copy of the embedding, after the final norm.
            #expect(compiled.regions.last?.tensors.map(\.name) == ["model.norm.weight", "model.embed_tokens.weight"])
            layouts.append(compiled.regions.map { "\($0.kind) \($0.firstLayer ?? -1)-\($0.lastLayer ?? -1)" })
        }
        #expect(layouts[0] == ["embedding -1--1", "layers 0-2", "layers 3-5", "head -1--1"])
        #expect(layouts[1] == ["embedding -1--1", "layers 0-1", "layers 2-3", "layers 4-5", "head -1--1"])
        let first = try Data(contentsOf: results[0].url.appendingPathComponent("weights.bin"))
        let second = try Data(contentsOf: results[1].url.appendingPathComponent("weights.bin"))
        #expect(first != second)
    }

    @Test("the reader loads each artifact and every tensor dequantises as from the portable bundle")
    func readerMatchesBundle() throws {
        let fixture = try CompileFixture()
        let bundle = try BundleReader(url: fixture.bundleURL)
        for result in try fixture.compile([CompileFixture.wide, CompileFixture.narrow]) {
            let reader = try CompiledArtifactReader(url: result.url)
            #expect(reader.manifest == result.manifest)
            var seen: [String: Int] = [:]
            for region in reader.regions {
                for tensor in try reader.tensors(inRegion: region.index) {
                    #expect(
                        try reader.dequantize(tensor.name, region: region.index) == (try bundle.dequantize(tensor.name))
                    )
                    seen[tensor.name, default: 0] += 1
                }
            }
            #expect(Set(seen.keys) == Set(bundle.tensorNames))
            #expect(seen.filter { $0.value > 1 }.map(\.key) == ["model.embed_tokens.weight"])
            for name in bundle.tensorNames { #expect(try reader.dequantize(name) == (try bundle.dequantize(name))) }
        }
    }

    @Test("compiling twice gives the same bytes")
    func reproducible() throws {
        let fixture = try CompileFixture()
        let runs = try (0..<2).map { _ in try fixture.compile([CompileFixture.narrow]) }
        let files = runs[0][0].manifest.files.map(\.path) + ["manifest.json"]
        #expect(
            files == [
                "config.json", "graph.json", "static.json", "tables/rope_cos.f32", "tables/rope_sin.f32",
                "tokenizer/tokenizer.json",
                "weights.bin", "manifest.json",
            ])
        for path in files {
            let a = try Data(contentsOf: runs[0][0].url.appendingPathComponent(path))
            let b = try Data(contentsOf: runs[1][0].url.appendingPathComponent(path))
            #expect(a == b, "\(path) differs")
        }
    }

    @Test("the plan's verdict is the compiled artifact's")
    func planAgreesWithCompile() throws {
        let fixture = try CompileFixture()
        let results = try fixture.compile([CompileFixture.wide, CompileFixture.narrow])
        let all = CompilePlan.verdicts(for: CompileSubject(plan: fixture.plan), table: fixture.table)
        // A device offered no ahead-of-time compilation gets the verdict of the same plan, marked so.
        #expect(all.filter { !$0.aheadOfTime }.map(\.architecture) == ["t0"])
        let verdicts = all.filter(\.aheadOfTime)
        #expect(verdicts == results.compactMap(\.manifest.compiled?.verdict))
        // wide: weights 167,936 (4 KiB pages) + KV 393,216 + working 1,310,720 + tables 32,768, within 2,000,000;
        // narrow: weights 229,376 (16 KiB pages, one more region), over 1,000,000, within 2,000,000.
        #expect(verdicts.map(\.memory) == [.fits, .needsEntitlement])
        #expect(verdicts.map(\.totalBytes) == [1_904_640, 1_966_080])
        #expect(verdicts.map(\.entitlements) == [[], ["test.entitlement"]])
    }

    @Test(
        "at a context shorter than the prefill chunk, the compile's working memory takes the chunk the bundle records")
    func shortContextChunk() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(overrides: ["num_hidden_layers": 2])
        let plan = try Fixtures.plan(checkpoint, contextLength: 64)
        let bundle = try BundleReader(url: try Fixtures.export(checkpoint, contextLength: 64))
        #expect(bundle.manifest.memory.prefillChunk == 64)
        for subject in [CompileSubject(plan: plan), try CompileSubject(bundle: bundle)] {
            #expect(subject.prefillChunk == 64)
            // A layer's peak: 4·64·64·4 + 2·64·128·4 + 4 heads·64·64·4 (hidden 64, intermediate 128).
            let compiled = CompilePlan(subject: subject, device: CompileFixture.wide)
            #expect(compiled.memory.workingBytes == 196_608)
            #expect(compiled.memory.workingBytes == compiled.regions[1].workingBytes)
        }
    }

    @Test("a layer larger than the budget is a region of its own, flagged, never split")
    func overBudgetLayers() throws {
        let fixture = try CompileFixture(layers: 3)
        var tight = CompileFixture.narrow
        tight.regionBudgetBytes = 1_000_000
        tight.appMemoryLimitBytes = 100
        tight.increasedMemoryLimitBytes = nil
        let plan = CompilePlan(subject: CompileSubject(plan: fixture.plan), device: tight)
        #expect(plan.regions.map(\.label) == ["embedding", "layer 0", "layer 1", "layer 2", "head"])
        #expect(plan.regionsOverBudget.map(\.index) == [1, 2, 3])
        // The three layers tie for the most working memory: the first of them is the peak.
        #expect(Set(plan.regions[1...3].map(\.workingBytes)).count == 1)
        #expect(plan.memory.peakRegion == 1)
        #expect(plan.memory.workingBytes == plan.regions[1].workingBytes)
        let verdict = plan.verdict
        #expect(verdict.neuralEngine == .regionsOverBudget)
        #expect(verdict.regionsOverBudget == [1, 2, 3])
        #expect(verdict.memory == .doesNotFit)
        #expect(verdict.entitlements == [])
    }

    @Test("verdict limits are inclusive: a total equal to a limit fits it, one byte over does not")
    func verdictBoundaries() throws {
        let plan = try Fixtures.plan(try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig()))
        let subject = CompileSubject(plan: plan)
        var device = CompileFixture.wide
        device.regionBudgetBytes = 1 << 40
        let roomy = CompilePlan(subject: subject, device: device)
        #expect(roomy.regions.map(\.label) == ["embedding", "layers 0–1", "head"])
        let total = roomy.memory.totalBytes
        let largest = try #require(roomy.regions.map(\.footprintBytes).max())

        device.regionBudgetBytes = largest
        device.appMemoryLimitBytes = total
        device.increasedMemoryLimitBytes = nil
        let exact = CompilePlan(subject: subject, device: device)
        #expect(exact.regions.map(\.label) == ["embedding", "layers 0–1", "head"])
        #expect(exact.regionsOverBudget.isEmpty)
        #expect(exact.verdict.memory == .fits)
        #expect(exact.verdict.neuralEngine == .allRegionsWithinBudget)

        device.appMemoryLimitBytes = total - 1
        device.increasedMemoryLimitBytes = total
        let entitled = CompilePlan(subject: subject, device: device).verdict
        #expect(entitled.memory == .needsEntitlement)
        #expect(entitled.entitlements == ["test.entitlement"])

        device.increasedMemoryLimitBytes = total - 1
        #expect(CompilePlan(subject: subject, device: device).verdict.memory == .doesNotFit)
    }

    @Test("KV buffers that do not fill a page: every slot rounded up to the page, offsets and total exact")
    func kvCacheSlotsPadded() throws {
        var options = ExportOptions(model: try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig()).path)
        options.experimental = true
        options.computePrecision = .float16
        options.contextLength = 100
        let plan = try ExportPlan.make(options: options, resolver: try Fixtures.resolver())
        let layout = KVCacheLayout(graph: GraphDescription(plan: plan), pageSize: 4096)
        // 2 KV heads × 100 positions × head_dim 16 × 2 bytes, in 4,096-byte pages.
        #expect(layout.bufferBytes == 6400)
        #expect(layout.slotBytes == 8192)
        #expect(layout.layers.map(\.keyOffset) == [0, 16_384])
        #expect(layout.layers.map(\.valueOffset) == [8192, 24_576])
        #expect(layout.totalBytes == 32_768)
    }

    @Test("a compiled artifact whose header or manifest lies about its regions or page size is refused, naming the lie")
    func lyingCompiledArtifact() throws {
        let fixture = try CompileFixture(layers: 2)
        let compiled = try #require(try fixture.compile([CompileFixture.narrow]).first).url
        let regions = try CompiledArtifactReader(url: compiled).regions
        #expect(regions.map(\.kind) == ["embedding", "layers", "head"])
        /// The error opening a copy of the artifact edited by `edit` (without the CRC check).
        func failure(_ edit: (URL) throws -> Void) throws -> BundleError? {
            let copy = try Fixtures.temporaryDirectory().appendingPathComponent(compiled.lastPathComponent)
            try FileManager.default.copyItem(at: compiled, to: copy)
            try edit(copy)
            do {
                _ = try CompiledArtifactReader(url: copy, verifyFiles: false)
                return nil
            } catch let error as BundleError {
                return error
            }
        }
        func editWeights(_ copy: URL, _ body: (inout [UInt8]) -> Void) throws {
            let url = copy.appendingPathComponent("weights.bin")
            var bytes = [UInt8](try Data(contentsOf: url))
            body(&bytes)
            try Data(bytes).write(to: url)
        }
        func editManifest(_ copy: URL, _ body: (inout Manifest) -> Void) throws {
            let url = copy.appendingPathComponent("manifest.json")
            var manifest = try Manifest.decoded(from: Data(contentsOf: url), path: url.path)
            body(&manifest)
            try Data(try manifest.canonicalJSON()).write(to: url)
        }
        #expect(try failure { _ in } == nil)
        #expect(
            try failure { try editWeights($0) { $0[20] += 1 } }
                == .fileMismatch(path: "weights.bin", reason: "4 regions in the header, 3 in the manifest"))
        #expect(
            try failure { try editManifest($0) { $0.compiled?.pageSize = 12_288 } }
                == .fileMismatch(path: "weights.bin", reason: "page size 12288 is not a power of two"))
        // Region 1 over region 0, in the header's table and the manifest alike.
        let first = regions[0].offset
        #expect(
            try failure { copy in
                try editWeights(copy) { bytes in
                    for k in 0..<8 { bytes[64 + 16 + k] = UInt8(truncatingIfNeeded: first >> (8 * k)) }
                }
                try editManifest(copy) { $0.compiled?.regions[1].offset = first }
            }
                == .fileMismatch(
                    path: "weights.bin", reason: "region 1 at \(first) is not page-aligned after the previous one"))
    }

    @Test("static tables: RoPE known answers and page-aligned KV buffers")
    func staticTables() throws {
        let fixture = try CompileFixture(layers: 2)
        let result = try #require(try fixture.compile([CompileFixture.narrow]).first)
        let reader = try CompiledArtifactReader(url: result.url)
        let description = reader.staticDescription
        #expect(description.rope.shape == [512, 8])
        #expect(description.causalMask.shape == [512, 512])
        #expect(description.kvCache.bufferShape == [2, 512, 16])
        #expect(description.kvCache.bufferBytes == 32_768)
        #expect(description.kvCache.slotBytes == 32_768)
        #expect(description.kvCache.layers.map(\.kOffset) == [0, 65_536])
        #expect(description.kvCache.layers.map(\.vOffset) == [32_768, 98_304])
        let (cosines, sines) = try reader.ropeTables()
        #expect(cosines.count == 512 * 8)
        #expect(cosines[0..<8].allSatisfy { $0 == 1 } && sines[0..<8].allSatisfy { $0 == 0 })
        #expect(cosines[8] == Float(cos(1.0)) && sines[8] == Float(sin(1.0)))
        // i = 1 at position 1: θ^(−2/16) with θ = 10000.
        #expect(sines[9] == Float(sin(pow(10_000.0, -2.0 / 16.0))))
    }

    @Test("a corrupted bundle is refused and nothing is published")
    func corruptedBundle() throws {
        let fixture = try CompileFixture(layers: 2)
        let weights = fixture.bundleURL.appendingPathComponent("weights.bin")
        var bytes = try Data(contentsOf: weights)
        bytes[bytes.count - 200] ^= 0xFF
        try bytes.write(to: weights)
        let output = try Fixtures.temporaryDirectory()
        #expect(throws: BundleError.self) { try fixture.compile([CompileFixture.narrow], into: output) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == [])
    }

    @Test(
        "a bundle replaced by an --overwrite export once the weights are copied fails the compile, leaving no artifact")
    func bundleReplacedBeforeSmallFiles() throws {
        let checkpoint = try Fixtures.syntheticCheckpoint(overrides: ["num_hidden_layers": 2])
        let bundleURL = try Fixtures.export(checkpoint, contextLength: 512)
        let newer = try Fixtures.export(checkpoint, contextLength: 256)
        let graph = "graph.json"
        #expect(
            try Data(contentsOf: bundleURL.appendingPathComponent(graph))
                != Data(contentsOf: newer.appendingPathComponent(graph)))
        let output = try Fixtures.temporaryDirectory()
        let request = CompileRequest(
            platform: .iOS, devices: [CompileFixture.narrow], minimumDeploymentVersion: .minimum,
            outputDirectory: output)
        // The last progress report comes once every weight is copied, before the graph and
        // tokenizer files are: the bundle is exchanged there, as the race did it.
        var exchanged = 0
        let expected = CompileError.bundleChanged(
            path: bundleURL.appendingPathComponent(graph).path, replaced: true)
        #expect(throws: expected) {
            try Compiler.compile(bundleURL: bundleURL, request: request) { progress in
                guard progress.done == progress.total, exchanged == 0 else { return }
                exchanged += (try? Fixtures.exchange(bundleURL, newer)) == nil ? 0 : 1
            }
        }
        #expect(exchanged == 1)
        #expect(
            expected.description
                == "'\(bundleURL.path)/graph.json' changed while it was compiled: the bundle was replaced; compile again"
        )
        #expect(expected.exitStatus == .ioFailure)
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == [])
        // Edited in place, under the same manifest: said so.
        #expect(
            CompileError.bundleChanged(path: "/b/Tiny.aimodel/config.json", replaced: false).description
                == "'/b/Tiny.aimodel/config.json' changed while it was compiled: it no longer matches the bundle's "
                + "manifest; compile again")
    }

    @Test(
        "a bundle replaced between two devices: the first artifact is the old bundle's, whole; the second fails on its weights"
    )
    func bundleReplacedBetweenDevices() throws {
        // The same graph and tokenizer, other weights: only the weights file tells the bundles apart.
        let bundleURL = try Fixtures.export(
            try Fixtures.syntheticCheckpoint(overrides: ["num_hidden_layers": 2], seed: 7))
        let newer = try Fixtures.export(try Fixtures.syntheticCheckpoint(overrides: ["num_hidden_layers": 2], seed: 8))
        for name in ["graph.json", "config.json"] {
            #expect(
                try Data(contentsOf: bundleURL.appendingPathComponent(name))
                    == Data(contentsOf: newer.appendingPathComponent(name)))
        }
        let output = try Fixtures.temporaryDirectory()
        let request = CompileRequest(
            platform: .iOS, devices: [CompileFixture.wide, CompileFixture.narrow], minimumDeploymentVersion: .minimum,
            outputDirectory: output)
        let firstWeights = CompilePlan(
            subject: try CompileSubject(bundle: try BundleReader(url: bundleURL)), device: CompileFixture.wide
        ).memory.weightsBytes
        var exchanged = false
        #expect(
            throws: CompileError.bundleChanged(
                path: bundleURL.appendingPathComponent("weights.bin").path, replaced: true)
        ) {
            try Compiler.compile(bundleURL: bundleURL, request: request) { progress in
                // The first device's last report: its weights are copied from the file already open.
                guard !exchanged, progress.stage.hasPrefix("t1a"), progress.done == firstWeights else { return }
                exchanged = (try? Fixtures.exchange(bundleURL, newer)) != nil
            }
        }
        #expect(exchanged)
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == ["Tiny.t1a.aimodelc"])
        // Every byte of the first artifact is the old bundle's.
        let artifact = output.appendingPathComponent("Tiny.t1a.aimodelc")
        let reader = try CompiledArtifactReader(url: artifact)
        let old = try BundleReader(url: newer)  // the old bundle, now at the other path
        #expect(
            reader.manifest.compiled?.portable.manifestCRC32
                == BundleWriter.hex(old.manifestData.withUnsafeBytes { CRC32.checksum($0) }))
        for tensor in old.manifest.tensors {
            #expect(try reader.dequantize(tensor.name) == old.dequantize(tensor.name))
        }
    }

    @Test("a failed write at any step leaves no artifact and keeps a previous one")
    func faultSweep() throws {
        let fixture = try CompileFixture(layers: 2)
        let output = try Fixtures.temporaryDirectory()
        let good = try #require(try fixture.compile([CompileFixture.narrow], into: output).first)
        let before = try Data(contentsOf: good.url.appendingPathComponent("manifest.json"))
        let counter = FaultInjector(failAtOperation: Int.max)
        var request = CompileRequest(
            platform: .iOS, devices: [CompileFixture.narrow], minimumDeploymentVersion: .minimum,
            outputDirectory: output)
        request.overwrite = true
        request.faults = counter
        _ = try Compiler.compile(bundleURL: fixture.bundleURL, request: request)
        #expect(counter.operations > 10)
        for operation in 1...counter.operations {
            request.faults = FaultInjector(failAtOperation: operation)
            #expect(throws: BundleError.self) { try Compiler.compile(bundleURL: fixture.bundleURL, request: request) }
            #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == ["Tiny.t1b.aimodelc"])
            #expect(try Data(contentsOf: good.url.appendingPathComponent("manifest.json")) == before)
        }
    }

    @Test("device selection: every eligible one by default, refusals name device, chip and rule")
    func selection() throws {
        let table = try CompileFixture().table
        #expect(try table.select([], platform: .iOS).map(\.id) == ["t1a", "t1b"])
        #expect(try table.select(["t1b", "t1b"], platform: .iOS).map(\.id) == ["t1b"])
        #expect(try table.select(["T1B", "t1b"], platform: .iOS).map(\.id) == ["t1b"])
        #expect(
            throws: CompileError.ineligibleDevice(id: "t0", products: ["Old phone"], chip: "Test 0", rule: "test rule")
        ) {
            try table.select(["t0"], platform: .iOS)
        }
        #expect(throws: CompileError.unknownArchitecture(id: "zz", platform: .iOS, known: ["t0", "t1a", "t1b"])) {
            try table.select(["zz"], platform: .iOS)
        }
        #expect(throws: CompileError.deploymentVersionTooLow(given: "26.9", minimum: "27.0")) {
            try DeploymentVersion(parsing: "26.9")
        }
        #expect(throws: CompileError.invalidDeploymentVersion("27.x")) { try DeploymentVersion(parsing: "27.x") }
        #expect(try DeploymentVersion(parsing: "27").description == "27.0")
        #expect(try DeploymentVersion(parsing: "28.1") > .minimum)
    }

    @Test("the shipped device table loads, marks its estimates, and a user's file extends it")
    func shippedTable() throws {
        let table = try DeviceTable.load(presetsDirectory: Fixtures.presetsDirectory)
        #expect(table.eligible(for: .iOS).map(\.id) == ["h16p", "h17p"])
        #expect(table.eligible(for: .macOS).map(\.id) == ["h13g", "h14g", "h15g", "h16g"])
        #expect(table.eligible(for: .visionOS).map(\.id) == ["h14g"])
        let h17p = try #require(table.devices.first { $0.id == "h17p" })
        #expect(h17p.chip == "A18")
        #expect(h17p.ramBytes == 8 << 30)
        #expect(!h17p.estimates.contains("id"))
        #expect(h17p.estimates.contains("app_memory_limit_bytes"))
        #expect(h17p.estimates.contains("ane_region_budget_bytes"))
        #expect(table.devices.filter { !$0.aheadOfTime }.map(\.chip) == ["A15 Bionic", "A16 Bionic"])

        let extra = try Fixtures.temporaryDirectory().appendingPathComponent("mine.json")
        try Data(
            """
            {"schema": "exporter.devices/1", "devices": [
              {"id": "h17p", "platform": "iOS", "chip": "A18", "products": ["iPhone 16"], "ahead_of_time": true,
               "ram_bytes": 8589934592, "app_memory_limit_bytes": 4000000000, "increased_memory_limit_bytes": null,
               "entitlements": [], "ane_region_budget_bytes": {"value": 1073741824, "estimate": true, "source": "mine"},
               "page_size": 16384},
              {"id": "h99p", "platform": "iOS", "chip": "A99", "products": ["iPhone 99"], "ahead_of_time": true,
               "ram_bytes": 8589934592, "app_memory_limit_bytes": 4000000000, "increased_memory_limit_bytes": null,
               "entitlements": [], "ane_region_budget_bytes": 1073741824, "page_size": 16384}
            ]}
            """.utf8
        ).write(to: extra)
        let merged = try DeviceTable.load(presetsDirectory: Fixtures.presetsDirectory, extra: extra)
        #expect(merged.eligible(for: .iOS).map(\.id) == ["h16p", "h17p", "h99p"])
        #expect(merged.devices.first { $0.id == "h17p" }?.regionBudgetBytes == 1 << 30)
        #expect(merged.devices.first { $0.id == "h17p" }?.estimates == ["ane_region_budget_bytes"])
        // Its rules replace the shipped ones, platform by platform, and refusals quote them.
        try Data(#"{"schema": "exporter.devices/1", "rules": {"iOS": "ours"}, "devices": []}"#.utf8).write(to: extra)
        let ruled = try DeviceTable.load(presetsDirectory: Fixtures.presetsDirectory, extra: extra)
        #expect(ruled.rules[.iOS] == "ours")
        #expect(ruled.rules[.macOS] == "Mac needs an M1 or later")
        #expect(
            throws: CompileError.ineligibleDevice(
                id: "h15p", products: ["iPhone 14 Pro", "iPhone 14 Pro Max", "iPhone 15", "iPhone 15 Plus"],
                chip: "A16 Bionic", rule: "ours")
        ) { try ruled.select(["h15p"], platform: .iOS) }

        for page in [12_288, 2048] {
            try Data(
                """
                {"schema": "exporter.devices/1", "devices": [
                  {"id": "h99p", "platform": "iOS", "chip": "A99", "products": ["iPhone 99"], "ahead_of_time": true,
                   "ram_bytes": 8589934592, "app_memory_limit_bytes": 4000000000, "increased_memory_limit_bytes": null,
                   "entitlements": [], "ane_region_budget_bytes": 1073741824, "page_size": \(page)}
                ]}
                """.utf8
            ).write(to: extra)
            #expect(
                throws: CompileError.invalidDeviceTable(
                    path: extra.path,
                    reason:
                        "device 1 ('h99p'): 'page_size' must be a power of two of at least 4096 and at most 1073741824")
            ) { try DeviceTable(contentsOf: extra) }
        }
        try Data(#"{"schema": "exporter.devices/2", "devices": []}"#.utf8).write(to: extra)
        #expect(
            throws: CompileError.unsupportedDeviceTableSchema(
                path: extra.path, found: "exporter.devices/2", supported: "exporter.devices/1")
        ) { try DeviceTable(contentsOf: extra) }
        try Data(#"{"schema": "exporter.devices/1", "devices": [{"id": "x"}]}"#.utf8).write(to: extra)
        #expect(throws: CompileError.invalidDeviceTable(path: extra.path, reason: "device 1 ('x') has no 'platform'")) {
            try DeviceTable(contentsOf: extra)
        }
    }

    @Test("device table bounds are inclusive: a 4,096-byte page and an increased limit equal to the default load")
    func deviceTableBounds() throws {
        let file = try Fixtures.temporaryDirectory().appendingPathComponent("mine.json")
        func write(page: Int, increased: Int) throws {
            try Data(
                (#"{"schema": "exporter.devices/1", "devices": [{"id": "h99p", "platform": "iOS", "chip": "A99", "#
                    + #""products": ["iPhone 99"], "ahead_of_time": true, "ram_bytes": 8589934592, "#
                    + #""app_memory_limit_bytes": 4000000000, "increased_memory_limit_bytes": \#(increased), "#
                    + #""entitlements": ["e"], "ane_region_budget_bytes": 1073741824, "page_size": \#(page)}]}"#).utf8
            ).write(to: file)
        }
        try write(page: 4096, increased: 4_000_000_000)
        let device = try #require(try DeviceTable(contentsOf: file).devices.first)
        #expect(device.pageSize == 4096)
        #expect(device.appMemoryLimitBytes == 4_000_000_000)
        #expect(device.increasedMemoryLimitBytes == 4_000_000_000)
        try write(page: 4096, increased: 3_999_999_999)
        #expect(
            throws: CompileError.invalidDeviceTable(
                path: file.path,
                reason: "device 1 ('h99p'): 'increased_memory_limit_bytes' must be null or at least the default limit")
        ) { try DeviceTable(contentsOf: file) }
        // The largest page (1 GiB) loads; one beyond it is refused, not left to overflow a plan.
        try write(page: 1 << 30, increased: 4_000_000_000)
        #expect(try DeviceTable(contentsOf: file).devices.first?.pageSize == 1 << 30)
    }

    @Test("a device table entry that contradicts itself, or that a plan's arithmetic cannot take, is refused by id")
    func deviceTableContradictions() throws {
        let file = try Fixtures.temporaryDirectory().appendingPathComponent("mine.json")
        func refusal(_ replacements: [String: String]) throws -> String? {
            var fields: [(String, String)] = [
                ("id", #""h99p""#), ("platform", #""iOS""#), ("chip", #""A99""#), ("products", #"["iPhone 99"]"#),
                ("ahead_of_time", "true"), ("ram_bytes", "8589934592"), ("app_memory_limit_bytes", "4000000000"),
                ("increased_memory_limit_bytes", "6000000000"), ("entitlements", #"["e"]"#),
                ("ane_region_budget_bytes", "1073741824"), ("page_size", "16384"),
            ]
            for (key, value) in replacements {
                if let index = fields.firstIndex(where: { $0.0 == key }) {
                    fields[index].1 = value
                } else {
                    fields.append((key, value))
                }
            }
            let entry = fields.map { "\"\($0.0)\": \($0.1)" }.joined(separator: ", ")
            try Data(#"{"schema": "exporter.devices/1", "devices": [{\#(entry)}]}"#.utf8).write(to: file)
            do { _ = try DeviceTable.load(presetsDirectory: Fixtures.presetsDirectory, extra: file) } catch let
                error as CompileError
            {
                guard case .invalidDeviceTable(let path, let reason) = error, path == file.path else { throw error }
                #expect(error.exitStatus == .badInput)
                return reason
            }
            return nil
        }
        #expect(try refusal([:]) == nil)
        #expect(
            try refusal(["page_size": "1152921504606846976"])
                == "device 1 ('h99p'): 'page_size' must be a power of two of at least 4096 and at most 1073741824")
        #expect(
            try refusal(["page_size": "-9223372036854775808"])?.hasSuffix(
                "'page_size' must be a power of two of at least 4096 and at most 1073741824") == true)
        #expect(
            try refusal(["ram_bytes": "1125899906842625"])
                == "device 1 ('h99p'): 'ram_bytes' must be a positive integer of at most 1125899906842624")
        #expect(try refusal(["ram_bytes": "1125899906842624", "ane_region_budget_bytes": "1125899906842624"]) == nil)
        #expect(
            try refusal(["app_memory_limit_bytes": "9000000000", "increased_memory_limit_bytes": "null"])
                == "device 1 ('h99p'): 'app_memory_limit_bytes' (9000000000) is more than 'ram_bytes' (8589934592)")
        #expect(
            try refusal(["increased_memory_limit_bytes": "8589934593"])
                == "device 1 ('h99p'): 'increased_memory_limit_bytes' (8589934593) is more than 'ram_bytes' (8589934592)"
        )
        #expect(
            try refusal(["entitlements": "[]"])
                == "device 1 ('h99p'): 'entitlements' is empty, but 'increased_memory_limit_bytes' says an entitlement "
                + "raises the limit: name it (com.apple.developer.kernel.increased-memory-limit), or make the limit null"
        )
        #expect(try refusal(["entitlements": "[]", "increased_memory_limit_bytes": "null"]) == nil)
        #expect(
            try refusal(["platform": #""macOS""#, "id": #""m99""#])
                == "device 1 ('m99'): 'increased_memory_limit_bytes' must be null for a Mac: no entitlement raises its "
                + "limit")
        #expect(
            try refusal(["ram": "1"])?.hasPrefix("device 1 ('h99p'): unknown key 'ram'; expected ahead_of_time, ")
                == true)
        #expect(
            try refusal(["page_size": #"{"value": 16384, "estimat": true}"#])
                == "device 1 ('h99p'): 'page_size' has an unknown key 'estimat'; expected estimate, source, value")
        // Every byte count is positive; a limit may be all of the RAM ("at most", docs/DEVICES.md).
        #expect(
            try refusal(["ane_region_budget_bytes": "0"])
                == "device 1 ('h99p'): 'ane_region_budget_bytes' must be a positive integer of at most 1125899906842624"
        )
        #expect(
            try refusal(["app_memory_limit_bytes": "8589934592", "increased_memory_limit_bytes": "8589934592"]) == nil)
        // A list of names has one at least (products) and nothing but names: none is left out unsaid.
        for products in ["[]", #"["iPhone 99", 5]"#] {
            #expect(
                try refusal(["products": products]) == "device 1 ('h99p'): 'products' must be a non-empty list of names"
            )
        }
        #expect(
            try refusal(["entitlements": "[5]", "increased_memory_limit_bytes": "null"])
                == "device 1 ('h99p'): 'entitlements' must be a list of names")
        for names in [#"[""]"#, #"["e", "e"]"#] {
            #expect(
                try refusal(["entitlements": names])
                    == "device 1 ('h99p'): 'entitlements' must name each entitlement once, none empty")
        }
        try Data(#"{"schema": "exporter.devices/1", "rule": {"iOS": "ours"}, "devices": []}"#.utf8).write(to: file)
        #expect(
            throws: CompileError.invalidDeviceTable(
                path: file.path, reason: "unknown key 'rule'; expected about, devices, rules, schema")
        ) { try DeviceTable(contentsOf: file) }
        // A shipped chip offered no ahead-of-time compilation stays so; its numbers may change.
        #expect(
            try refusal(["id": #""H15P""#, "chip": #""A16 Bionic""#])
                == "device 1 ('H15P'): 'ahead_of_time' cannot be true for the A16 Bionic, which is not offered "
                + "ahead-of-time compilation (iPhone and iPad need an A17 Pro or later); an entry replacing a shipped "
                + "one may change its numbers, not that")
        #expect(try refusal(["id": #""h15p""#, "ahead_of_time": "false"]) == nil)
    }

    @Test(
        "device ids differing only in case (one artifact folder on a Mac) are refused in a table, replaced by a merge")
    func deviceIdCase() throws {
        func entry(_ id: String, budget: Int = 1 << 30) -> String {
            #"{"id": "\#(id)", "platform": "iOS", "chip": "A99", "products": ["iPhone 99"], "ahead_of_time": true, "#
                + #""ram_bytes": 8589934592, "app_memory_limit_bytes": 4000000000, "#
                + #""increased_memory_limit_bytes": null, "entitlements": [], "#
                + #""ane_region_budget_bytes": \#(budget), "page_size": 16384}"#
        }
        let file = try Fixtures.temporaryDirectory().appendingPathComponent("mine.json")
        try Data(#"{"schema": "exporter.devices/1", "devices": [\#(entry("h99p")), \#(entry("H99P"))]}"#.utf8)
            .write(to: file)
        #expect(
            throws: CompileError.invalidDeviceTable(
                path: file.path,
                reason: "device 2: 'H99P' and 'h99p' differ only in case for iOS, which a case-insensitive file system "
                    + "(macOS) does not tell apart")
        ) { try DeviceTable(contentsOf: file) }
        try Data(#"{"schema": "exporter.devices/1", "devices": [\#(entry("h99p")), \#(entry("h99p"))]}"#.utf8)
            .write(to: file)
        #expect(
            throws: CompileError.invalidDeviceTable(path: file.path, reason: "device 2: 'h99p' appears twice for iOS")
        ) { try DeviceTable(contentsOf: file) }

        try Data(#"{"schema": "exporter.devices/1", "devices": [\#(entry("H17P", budget: 1 << 29))]}"#.utf8)
            .write(to: file)
        let merged = try DeviceTable.load(presetsDirectory: Fixtures.presetsDirectory, extra: file)
        // The shipped id stays, so the artifact is the one folder `<Name>.h17p.aimodelc` on every system.
        #expect(merged.eligible(for: .iOS).map(\.id) == ["h16p", "h17p"])
        #expect(merged.devices.first { $0.id == "h17p" }?.regionBudgetBytes == 1 << 29)
        #expect(try merged.select(["H17P"], platform: .iOS).map(\.id) == ["h17p"])
        #expect(FileSystemName.clash("Qwen.aimodel", "qwen.AIMODEL"))
        #expect(FileSystemName.clash("Caf\u{E9}", "CAFE\u{301}"))
        #expect(!FileSystemName.clash("qwen-a", "qwen-b"))
    }

    @Test(
        "preset verdicts on h17p: Qwen2.5-1.5B fits; Qwen3-4B needs the entitlement and loses its embedding and head regions"
    )
    func presetVerdicts() throws {
        let table = try DeviceTable.load(presetsDirectory: Fixtures.presetsDirectory)
        let h17p = try table.select(["h17p"], platform: .iOS)[0]
        func plan(_ model: String) throws -> CompilePlan {
            let export = try ExportPlan.make(options: ExportOptions(model: model), resolver: try Fixtures.resolver())
            return CompilePlan(subject: CompileSubject(plan: export), device: h17p)
        }
        let small = try plan("qwen2.5-1.5b")
        #expect(small.verdict.memory == .fits)
        #expect(small.verdict.neuralEngine == .allRegionsWithinBudget)
        #expect(
            small.regions.map(\.label) == [
                "embedding", "layers 0–7", "layers 8–15", "layers 16–23", "layers 24–27", "head",
            ])
        let large = try plan("qwen3-4b")
        #expect(large.verdict.memory == .needsEntitlement)
        #expect(
            large.verdict.entitlements == [
                "com.apple.developer.kernel.increased-memory-limit",
                "com.apple.developer.kernel.extended-virtual-addressing",
            ])
        #expect(large.verdict.neuralEngine == .regionsOverBudget)
        #expect(large.regionsOverBudget.map(\.label) == ["embedding", "head"])
        #expect(large.regions.count == 20)
    }
}

@Suite("CRC-32 of copied spans")
struct CRCCombineTests {
    @Test("appending a span's checksum equals checksumming its bytes")
    func combine() {
        let first = (0..<1000).map { UInt8(truncatingIfNeeded: $0 * 7) }
        let second = (0..<4099).map { UInt8(truncatingIfNeeded: $0 * 13 + 1) }
        var direct = CRC32()
        first.withUnsafeBytes { direct.update($0) }
        second.withUnsafeBytes { direct.update($0) }
        var combined = CRC32()
        first.withUnsafeBytes { combined.update($0) }
        combined.append(checksum: second.withUnsafeBytes { CRC32.checksum($0) }, length: second.count)
        #expect(combined.value == direct.value)
        combined.append(checksum: 0, length: 0)
        #expect(combined.value == direct.value)
    }
}

@Suite("compile: RoPE tables")
struct RopeTableTests {
    /// The graph of a tiny model (head dimension 16, context 512, θ 10,000).
    private func graph() throws -> GraphDescription {
        GraphDescription(plan: try Fixtures.plan(try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig())))
    }

    /// cos and sin of `position / factor` times each frequency, in double, rounded once.
    private func expected(_ graph: GraphDescription, position: Int, factor: Double) -> (cos: [Float], sin: [Float]) {
        let dimension = graph.attention.headDim
        let angles = (0..<(dimension / 2)).map {
            Double(position) / factor * (1 / pow(graph.rope.theta, Double(2 * $0) / Double(dimension)))
        }
        return (angles.map { Float(cos($0)) }, angles.map { Float(sin($0)) })
    }

    @Test("rows hold cos and sin of the position (divided by a linear factor) times each frequency; 'default' is none")
    func values() throws {
        var graph = try graph()
        let half = graph.attention.headDim / 2
        let plain = try RopeTables.make(graph)
        #expect(plain.cos.count == graph.contextLength * half)
        for position in [0, 1, 7, graph.contextLength - 1] {
            let row = expected(graph, position: position, factor: 1)
            #expect(Array(plain.cos[(position * half)..<((position + 1) * half)]) == row.cos)
            #expect(Array(plain.sin[(position * half)..<((position + 1) * half)]) == row.sin)
        }
        graph.rope.scalingType = "default"
        #expect(try RopeTables.make(graph).cos == plain.cos)
        graph.rope.scalingType = "linear"
        graph.rope.scalingFactor = 3
        let scaled = try RopeTables.make(graph)
        // Every row, as the reference forward pass divides positions.
        let rows = (0..<graph.contextLength).map { expected(graph, position: $0, factor: 3) }
        #expect(scaled.cos == rows.flatMap(\.cos))
        #expect(scaled.sin == rows.flatMap(\.sin))
        graph.rope.scalingType = "dynamic"
        graph.rope.scalingFactor = 2
        #expect(throws: CompileError.unsupportedRopeScaling("dynamic")) { try RopeTables.make(graph) }
        // Linear scaling has tables; without a positive factor the graph has no meaning (before,
        // these were said to be a scaling with "no precomputed tables yet").
        graph.rope.scalingType = "linear"
        for (factor, reason) in [
            (
                nil,
                "rope.scaling_type is 'linear' but rope.scaling_factor is null; linear scaling divides positions by it"
            ),
            (0, "rope.scaling_factor is 0.0; linear scaling divides positions by a positive number"),
            (-2, "rope.scaling_factor is -2.0; linear scaling divides positions by a positive number"),
            (.infinity, "rope.scaling_factor is inf; linear scaling divides positions by a positive number"),
        ] as [(Double?, String)] {
            graph.rope.scalingFactor = factor
            let error = #expect(throws: BundleError.self) { try RopeTables.make(graph) }
            #expect(error == .invalidGraph(path: "graph.json", reason: reason))
            #expect(error?.exitStatus == .badInput)
        }
    }
}

@Suite("compile: refusals")
struct CompileRefusalTests {
    @Test("a device of another platform is named with its platform, with the right article")
    func otherPlatform() {
        #expect(
            CompileError.architectureOnOtherPlatform(id: "h17p", platform: .iOS, requested: .macOS).description
                == "architecture 'h17p' is an iOS device, not macOS; pass --platform iOS")
        #expect(
            CompileError.architectureOnOtherPlatform(id: "h13g", platform: .macOS, requested: .iOS).description
                == "architecture 'h13g' is a macOS device, not iOS; pass --platform macOS")
    }

    @Test("a device of a platform that cannot take the bundle says which export it needs, not which platform to pass")
    func deviceNeedsOtherBundle() throws {
        let table = try DeviceTable.load(presetsDirectory: Fixtures.presetsDirectory)
        let checkpoint = try Fixtures.syntheticCheckpoint(overrides: ["num_hidden_layers": 2])
        let macOS = try Fixtures.plan(checkpoint, platform: .macOS)
        let bundle = try ExportRunner.run(
            macOS, settings: ExportSettings(outputDirectory: try Fixtures.temporaryDirectory()))
        let manifest = try BundleReader(url: bundle.bundleURL).manifest
        #expect(
            throws: CompileError.architectureNeedsOtherBundle(
                id: "h17p", platform: .iOS, bundlePlatform: "macOS", registryType: "qwen2")
        ) { try Compiler.selectDevices(["h17p"], from: table, platform: .macOS, manifest: manifest) }
        #expect(
            CompileError.architectureNeedsOtherBundle(
                id: "h17p", platform: .iOS, bundlePlatform: "macOS", registryType: "qwen2"
            ).description
                == "architecture 'h17p' is an iOS device, and this bundle was exported for macOS: export with "
                + "--platform iOS to compile for it")
        #expect(
            CompileError.architectureNeedsOtherBundle(
                id: "h13g", platform: .macOS, bundlePlatform: "iOS", registryType: "qwen2"
            ).description
                == "architecture 'h13g' is a macOS device, and this bundle was exported for iOS: export with "
                + "--platform macOS to compile for it")
        #expect(
            CompileError.architectureNeedsOtherBundle(
                id: "h17p", platform: .iOS, bundlePlatform: "macOS", registryType: "phi3"
            ).description
                == "architecture 'h17p' is an iOS device, and this bundle was exported for macOS: Model 'phi3' does not "
                + "support iOS variant")
        #expect(
            CompileError.architectureNeedsOtherBundle(
                id: "h17p", platform: .iOS, bundlePlatform: "macOS", registryType: "qwen2"
            ).exitStatus == .unsupported)
        // The M2 of Macs is also the Vision Pro's: an iOS bundle is pointed at visionOS, which takes it.
        let iOS = try BundleReader(url: try CompileFixture(layers: 2).bundleURL).manifest
        #expect(
            throws: CompileError.architectureOnOtherPlatform(id: "h14g", platform: .visionOS, requested: .iOS)
        ) { try Compiler.selectDevices(["h14g"], from: table, platform: .iOS, manifest: iOS) }
    }
}
