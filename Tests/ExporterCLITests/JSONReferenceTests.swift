import Foundation
import TestSupport
import Testing

@testable import ExporterKit

/// The tables of `docs/JSON.md`: for each heading above a `| key | type | meaning |` table, its
/// keys (paths from the document's root: `compiled[].artifact`, `sqnr_db.<tensor>` for any key of
/// a map) with the types each row allows (`int`, `number or null`, `[object]`…).
struct JSONReference {
    /// The keys of one table, by path, with the types allowed.
    typealias Table = [String: Set<String>]

    let tables: [String: Table]

    static let url = Fixtures.repositoryRoot.appendingPathComponent("docs/JSON.md")

    /// The types a row may name, alone or joined by ` or `.
    static let types: Set<String> = [
        "int", "number", "string", "bool", "object", "null", "[int]", "[number]", "[string]", "[bool]", "[object]",
    ]

    init(tables: [String: Table]) { self.tables = tables }

    init(text: String) throws {
        var tables: [String: Table] = [:]
        var heading = ""
        var current: Table?
        func finish() {
            if let table = current { tables[heading, default: [:]].merge(table) { $0.union($1) } }
            current = nil
        }
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.hasPrefix("#") {
                finish()
                heading = String(line.drop { $0 == "#" }.dropFirst())
            } else if line == "| key | type | meaning |" {
                finish()
                current = [:]
            } else if current != nil, line.hasPrefix("|") {
                if line.hasPrefix("|---") { continue }
                let cells = line.dropFirst(2).components(separatedBy: " | ")
                guard cells.count >= 3 else { throw Malformed(line: line, reason: "fewer than three cells") }
                let alternatives = Set(cells[1].components(separatedBy: " or "))
                guard alternatives.isSubset(of: JSONReference.types) else {
                    throw Malformed(
                        line: line, reason: "type '\(cells[1])' is not one of \(JSONReference.types.sorted())")
                }
                for key in cells[0].components(separatedBy: ", ") {
                    guard key.count > 2, key.hasPrefix("`"), key.hasSuffix("`") else {
                        throw Malformed(line: line, reason: "key '\(key)' is not in backticks")
                    }
                    let path = String(key.dropFirst().dropLast())
                    guard current?[path] == nil else { throw Malformed(line: line, reason: "'\(path)' listed twice") }
                    current?[path] = alternatives
                }
            } else {
                finish()
            }
        }
        finish()
        self.tables = tables
    }

    struct Malformed: Error, CustomStringConvertible {
        let line: String
        let reason: String
        var description: String { "docs/JSON.md: \(reason): \(line)" }
    }

    /// The paths and types `documents` hold, walked as `table` describes them: a key the table
    /// lists without keys below it is not entered (a manifest, which MANIFEST.md specifies),
    /// and a map's keys are its row's `<name>`.
    static func observed(_ documents: [JSONValue], table: Table) -> [String: Set<String>] {
        var found: [String: Set<String>] = [:]
        func kinds(_ value: JSONValue) -> Set<String> {
            switch value {
            case .null: return ["null"]
            case .bool: return ["bool"]
            case .string: return ["string"]
            case .object: return ["object"]
            case .number: return [value.integerLiteralValue != nil ? "int" : "number"]
            case .array(let items):
                guard !items.isEmpty else { return ["[]"] }
                return Set(items.flatMap(kinds).map { "[\($0)]" })
            }
        }
        func walk(_ value: JSONValue, _ path: String, recorded: Bool) {
            if recorded { found[path, default: []].formUnion(kinds(value)) }
            switch value {
            case .object(let object):
                let prefix = path.isEmpty ? "" : path + "."
                let below = table.keys.filter { $0.hasPrefix(prefix) && $0 != path }
                guard path.isEmpty || !below.isEmpty else { return }
                let map = below.first { $0.dropFirst(prefix.count).hasPrefix("<") }
                    .map { String($0.dropFirst(prefix.count).prefix { $0 != "." }) }
                for member in object.members { walk(member.value, prefix + (map ?? member.key), recorded: true) }
            case .array(let items):
                guard table.keys.contains(where: { $0.hasPrefix(path + "[]") }) else { return }
                for item in items { walk(item, path + "[]", recorded: false) }
            default:
                return
            }
        }
        for document in documents { walk(document, "", recorded: false) }
        return found
    }

    /// Whether a value of kind `kind` is one of the types a row allows.
    static func allows(_ allowed: Set<String>, _ kind: String) -> Bool {
        switch kind {
        case "int": return allowed.contains("int") || allowed.contains("number")
        case "[int]": return allowed.contains("[int]") || allowed.contains("[number]")
        case "[]": return allowed.contains { $0.hasPrefix("[") }
        default: return allowed.contains(kind)
        }
    }

    /// What differs between the table under `heading` and `documents`, one line each; empty
    /// when the documents hold every key of the table, no other, each of a type its row allows.
    func differences(_ heading: String, _ documents: [JSONValue]) -> [String] {
        guard let table = tables[heading] else { return ["no table under '\(heading)'"] }
        let found = JSONReference.observed(documents, table: table)
        var result: [String] = []
        for path in Set(found.keys).subtracting(table.keys).sorted() {
            result.append("\(heading): '\(path)' is printed but not in docs/JSON.md")
        }
        for path in Set(table.keys).subtracting(found.keys).sorted() {
            result.append("\(heading): '\(path)' is in docs/JSON.md but never printed")
        }
        for (path, kinds) in found.sorted(by: { $0.key < $1.key }) {
            guard let allowed = table[path] else { continue }
            for kind in kinds.sorted() where !JSONReference.allows(allowed, kind) {
                result.append("\(heading): '\(path)' is \(kind), docs/JSON.md says \(allowed.sorted())")
            }
        }
        return result
    }
}

/// The keys docs/MANIFEST.md lists: its tables' first cells, each under the path its heading
/// names (`tensors[]`, both `verdicts[]` and `compiled.verdict`), for the manifest and for the
/// package manifest apart. Rows that describe an object's keys in words (`parts`,
/// `model.source.files`) are leaves.
struct ManifestReference {
    /// The path each table's heading (or `` `x[]`: `` line) puts its keys under.
    static let prefixes: [String: [String]] = [
        "The manifest, schema `exporter.manifest/1`": [""], "`conversion`": ["conversion"],
        "`tensors[]`": ["tensors[]"], "`files[]`": ["files[]"],
        "Verdicts (`verdicts[]` and `compiled.verdict`)": ["verdicts[]", "compiled.verdict"],
        "`compiled`": ["compiled"], "`compiled.regions[]`": ["compiled.regions[]"],
        "The package manifest, schema `exporter.mlpackage/1`": [""], "`tensors[]`:": ["tensors[]"],
        "`constants[]`:": ["constants[]"],
    ]

    /// The manifest's keys, and the package manifest's.
    let manifest: JSONReference.Table
    let package: JSONReference.Table

    init(text: String) throws {
        var manifest: JSONReference.Table = [:]
        var package: JSONReference.Table = [:]
        var inPackage = false
        var prefixes: [String]?
        var heading = ""
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.hasPrefix("#") || (line.hasPrefix("`") && line.hasSuffix("`:")) {
                heading = line.hasPrefix("#") ? String(line.drop { $0 == "#" }.dropFirst()) : line
                if heading.hasPrefix("The package manifest") { inPackage = true }
                prefixes = ManifestReference.prefixes[heading]
            } else if line.hasPrefix("| key | type |") {
                guard prefixes != nil else {
                    throw JSONReference.Malformed(
                        line: heading, reason: "docs/MANIFEST.md: a table under an unknown heading")
                }
            } else if line.hasPrefix("| `"), let prefixes {
                let cell = line.dropFirst(2).components(separatedBy: " | ")[0]
                for key in cell.components(separatedBy: ", ") where key.hasPrefix("`") && key.hasSuffix("`") {
                    for prefix in prefixes {
                        let path = (prefix.isEmpty ? "" : prefix + ".") + key.dropFirst().dropLast()
                        if inPackage { package[path] = [] } else { manifest[path] = [] }
                    }
                }
            }
        }
        // `model.name` implies `model`, `tensors[].compression.mode` implies `tensors[].compression`.
        func withParents(_ table: JSONReference.Table) -> JSONReference.Table {
            var result = table
            for path in table.keys {
                var parent = Substring(path)
                while let end = parent.lastIndex(where: { $0 == "." }) {
                    parent = parent[..<end]
                    let key = parent.hasSuffix("[]") ? String(parent.dropLast(2)) : String(parent)
                    result[key] = result[key] ?? []
                }
            }
            return result
        }
        self.manifest = withParents(manifest)
        self.package = withParents(package)
    }

    /// What differs between `table` and the keys of `documents`.
    static func differences(_ name: String, _ table: JSONReference.Table, _ documents: [JSONValue]) -> [String] {
        let found = Set(JSONReference.observed(documents, table: table).keys)
        return Set(found).subtracting(table.keys).sorted().map {
            "\(name): '\($0)' is printed but not in docs/MANIFEST.md"
        }
            + Set(table.keys).subtracting(found).sorted().map {
                "\(name): '\($0)' is in docs/MANIFEST.md but never printed"
            }
    }
}

@Suite("docs/JSON.md: every key of every --json output")
struct JSONReferenceTests {
    /// The headings of docs/JSON.md whose tables each test runs.
    static let commandHeadings = [
        "The export: `exporter <model> --json`", "`exporter list --json`", "`exporter compile --json`",
        "`exporter convert --json`", "`inspect` of a bundle, a compiled artifact or a manifest",
        "`verify` of a bundle, a compiled artifact or a manifest", "`verify` of a Core ML package",
        "`exporter diff --json`", "`exporter eval --json`",
    ]
    static let batchHeadings = ["The farm report", "`--matrix`"]

    static func reference() throws -> JSONReference {
        try JSONReference(text: String(decoding: try Data(contentsOf: JSONReference.url), as: UTF8.self))
    }

    /// The JSON a run printed, which must have succeeded (or failed with `status`).
    static func document(_ run: CommandLineRun, status: Int32 = 0, _ label: String) throws -> JSONValue {
        #expect(run.status == status, "\(label): \(run.error)")
        return try JSONParser.parse(Array(run.output.utf8))
    }

    @Test("every key table is one a test checks, its types are of the doc's words, and the README links it")
    func tables() throws {
        let reference = try Self.reference()
        #expect(Set(reference.tables.keys) == Set(Self.commandHeadings + Self.batchHeadings))
        #expect(reference.tables["`exporter eval --json`"]?["tokens"] == ["int"])
        #expect(
            reference.tables["`verify` of a bundle, a compiled artifact or a manifest"]?["forward.tokens"] == ["[int]"])
        let readme = try Data(contentsOf: Fixtures.repositoryRoot.appendingPathComponent("README.md"))
        let linked = String(decoding: readme, as: UTF8.self).contains("[docs/JSON.md](docs/JSON.md)")
        #expect(linked, "README.md does not link docs/JSON.md")
        // The walk: a documented leaf object is not entered, a map's keys are its row's name.
        let table: JSONReference.Table = [
            "manifest": ["object"], "sqnr_db": ["object"], "sqnr_db.<tensor>": ["number", "null"],
        ]
        let document = try JSONParser.parse(Array(#"{"manifest": {"x": 1}, "sqnr_db": {"a.b": 1.5, "c": null}}"#.utf8))
        #expect(
            JSONReference.observed([document], table: table)
                == ["manifest": ["object"], "sqnr_db": ["object"], "sqnr_db.<tensor>": ["number", "null"]])
        let reported = JSONReference(tables: ["t": ["a": ["int"], "b": ["string"]]])
            .differences("t", [try JSONParser.parse(Array(#"{"a": 1.5, "c": true}"#.utf8))])
        #expect(
            reported == [
                "t: 'c' is printed but not in docs/JSON.md", "t: 'b' is in docs/JSON.md but never printed",
                "t: 'a' is number, docs/JSON.md says [\"int\"]",
            ])
    }

    @Test(
        "export, list, compile, convert, inspect, verify, diff and eval print the keys docs/JSON.md lists, of its types"
    )
    func commands() throws {
        let reference = try Self.reference()
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let experimental = ["--experimental", "--compute-precision", "float16"]
        var documents: [String: [JSONValue]] = [:]
        func add(_ heading: String, _ run: CommandLineRun, status: Int32 = 0, _ label: String) throws {
            documents[heading, default: []].append(try Self.document(run, status: status, label))
        }

        // The export, with every step and with none.
        let full = try Fixtures.temporaryDirectory()
        let export = "The export: `exporter <model> --json`"
        try add(
            export,
            runExporter(
                [checkpoint.path] + experimental + [
                    "--output-dir", full.path, "--compile", "--format", "mlpackage", "--json",
                ]), "export --compile --format mlpackage")
        let plain = try Fixtures.temporaryDirectory()
        try add(
            export, runExporter([checkpoint.path] + experimental + ["--output-dir", plain.path, "--json"]), "export")
        let bundle = full.appendingPathComponent("tiny/Tiny.aimodel")
        let compiled = full.appendingPathComponent("tiny/Tiny.h17p.aimodelc")
        let package = full.appendingPathComponent("tiny/Tiny.mlpackage")
        let plainBundle = plain.appendingPathComponent("tiny/Tiny.aimodel")

        try add("`exporter list --json`", runExporter(["list", "--json"]), "list")
        try add("`exporter list --json`", runExporter(["list", "--models", "--json"]), "list --models")
        let compileOutput = try Fixtures.temporaryDirectory()
        try add(
            "`exporter compile --json`",
            runExporter(["compile", plainBundle.path, "--device", "h17p", "--output", compileOutput.path, "--json"]),
            "compile")
        try add(
            "`exporter convert --json`",
            runExporter([
                "convert", plainBundle.path, "--output",
                try Fixtures.temporaryDirectory().appendingPathComponent("Tiny.mlpackage").path, "--json",
            ]), "convert")

        let planFile = try Fixtures.temporaryDirectory().appendingPathComponent("plan.json")
        let plan = runExporter(["plan", checkpoint.path] + experimental + ["--json"])
        #expect(plan.status == 0, "\(plan.error)")
        try Data(plan.output.utf8).write(to: planFile)
        for artifact in [bundle, compiled, planFile] {
            try add(
                "`inspect` of a bundle, a compiled artifact or a manifest",
                runExporter(["inspect", artifact.path, "--json"]), "inspect \(artifact.lastPathComponent)")
        }

        let verify = "`verify` of a bundle, a compiled artifact or a manifest"
        for artifact in [bundle, compiled, planFile] {
            try add(verify, runExporter(["verify", artifact.path, "--json"]), "verify \(artifact.lastPathComponent)")
        }
        try add(
            verify,
            runExporter(["verify", bundle.path, "--against", checkpoint.path, "--run", "--tokens", "1,5,9", "--json"]),
            "verify --run")
        let damaged = try TinyArtifacts.copy(plainBundle)
        let weights = damaged.appendingPathComponent("weights.bin")
        var bytes = try Data(contentsOf: weights)
        bytes[bytes.count - 100] ^= 0x01
        try bytes.write(to: weights)
        try add(verify, runExporter(["verify", damaged.path, "--json"]), status: 1, "verify of a damaged bundle")

        let verifyPackage = "`verify` of a Core ML package"
        try add(verifyPackage, runExporter(["verify", package.path, "--json"]), "verify of a package")
        let alone = try Fixtures.temporaryDirectory().appendingPathComponent("Tiny.mlpackage")
        try FileManager.default.copyItem(at: package, to: alone)
        try add(verifyPackage, runExporter(["verify", alone.path, "--json"]), "verify of a package alone")
        let blobs = alone.appendingPathComponent(MLPackageWriter.weightsPath)
        try Data(try Data(contentsOf: blobs).prefix(100)).write(to: blobs)
        try add(verifyPackage, runExporter(["verify", alone.path, "--json"]), status: 1, "verify of a damaged package")

        // Diffs that change text fields, tensors and a verdict, and fail a gate.
        let keptOutput = try Fixtures.temporaryDirectory()
        let kept = runExporter(
            [checkpoint.path] + experimental + ["--compression", "none", "--output-dir", keptOutput.path])
        #expect(kept.status == 0, "\(kept.error)")
        let keptBundle = keptOutput.appendingPathComponent("tiny/Tiny.aimodel")
        try add(
            "`exporter diff --json`",
            runExporter(["diff", plainBundle.path, keptBundle.path, "--max-size-growth", "1", "--json"]), status: 1,
            "diff of two bundles")
        try add(
            "`exporter diff --json`", runExporter(["diff", planFile.path, compiled.path, "--json"]),
            "diff of a plan and a compiled artifact")

        try add(
            "`exporter eval --json`",
            runExporter(["eval", bundle.path, "--against", checkpoint.path, "--tokens", "1,5,9,200", "--json"]), "eval")

        #expect(Set(documents.keys) == Set(Self.commandHeadings))
        for heading in Self.commandHeadings {
            let differences = reference.differences(heading, documents[heading] ?? [])
            #expect(differences.isEmpty, "\(differences.joined(separator: "\n"))")
        }
    }

    @Test("batch's report (a built job, a failed one) and its --matrix print the keys docs/JSON.md lists")
    func batch() throws {
        let reference = try Self.reference()
        let folder = try Fixtures.temporaryDirectory("farm")
        let checkpoint = try Fixtures.syntheticCheckpoint()
        try FileManager.default.moveItem(at: checkpoint, to: folder.appendingPathComponent("good"))
        let broken = try Fixtures.checkpointDirectory(config: Fixtures.tinyConfig())
        try FileManager.default.moveItem(at: broken, to: folder.appendingPathComponent("broken"))
        let farm = folder.appendingPathComponent("farm.json")
        try Data(
            """
            {
              "schema": "exporter.farm/1",
              "defaults": { "experimental": true, "compute_precision": "float16", "devices": ["h17p"] },
              "jobs": [{ "name": "good", "model": "good" }, { "name": "broken", "model": "broken" }]
            }
            """.utf8
        ).write(to: farm)
        let run = try BuiltExporter.run([
            "batch", farm.path, "--output", folder.appendingPathComponent("out").path, "--run-id", "42", "--json",
        ])
        #expect(run.status == 1, "\(run.error)")
        let report = try JSONParser.parse(Array(run.output.utf8))
        let statuses = report.objectValue?["jobs"]?.arrayValue?.compactMap { $0.objectValue?["status"]?.stringValue }
        #expect(statuses == ["built", "failed"])
        let reportDifferences = reference.differences("The farm report", [report])
        #expect(reportDifferences.isEmpty, "\(reportDifferences.joined(separator: "\n"))")

        let matrix = try BuiltExporter.run(["batch", farm.path, "--matrix", "--shards", "2"])
        #expect(matrix.status == 0, "\(matrix.error)")
        let matrixDifferences = reference.differences("`--matrix`", [try JSONParser.parse(Array(matrix.output.utf8))])
        #expect(matrixDifferences.isEmpty, "\(matrixDifferences.joined(separator: "\n"))")
    }
}

extension JSONReferenceTests {
    @Test(
        "the manifests of a plan, a bundle, a compiled artifact and a Core ML package hold the keys docs/MANIFEST.md lists"
    )
    func manifests() throws {
        let reference = try ManifestReference(
            text: String(
                decoding: try Data(contentsOf: Fixtures.repositoryRoot.appendingPathComponent("docs/MANIFEST.md")),
                as: UTF8.self))
        let checkpoint = try Fixtures.syntheticCheckpoint(reasoning: true)
        let experimental = ["--experimental", "--compute-precision", "float16"]
        let output = try Fixtures.temporaryDirectory()
        let export = runExporter(
            [checkpoint.path] + experimental + [
                "--output-dir", output.path, "--compile", "--format", "mlpackage", "--json",
            ])
        let report = try #require(try Self.document(export, "export").objectValue)
        let plan = try Self.document(runExporter(["plan", checkpoint.path] + experimental + ["--json"]), "plan")
        // The keys written only for some configs: calibration, blocks, outliers, the search.
        let calibration = try Fixtures.temporaryDirectory().appendingPathComponent("calibration.txt")
        try Data("1 5 9 200".utf8).write(to: calibration)
        let quality = try Self.document(
            runExporter(
                ["plan", checkpoint.path] + experimental + [
                    "--compression", "4bit_quality", "--palette-search", "thorough", "--calibration", calibration.path,
                    "--json",
                ]), "plan --compression 4bit_quality")
        var manifests = [plan, quality, try #require(report["manifest"])]
        manifests += try #require(report["compiled"]?.arrayValue).compactMap { $0.objectValue?["manifest"] }
        let package = try #require(report["mlpackage"]?.objectValue?["manifest"])
        let differences =
            ManifestReference.differences("manifest", reference.manifest, manifests)
            + ManifestReference.differences("package manifest", reference.package, [package])
        #expect(differences.isEmpty, "\(differences.joined(separator: "\n"))")
    }
}
