import TestSupport
import Testing

@testable import ExporterKit

extension CompressionTests {
    @Suite("compression config: rules in order, globs")
    struct CompressionConfigTests {
        /// Two rules that both match layer 3's MLP, then a default.
        private let config = """
            {"schema": "exporter.compression/1", "name": "t", "description": "rules in order",
             "rules": [
               {"match": "model.layers.?.mlp.*", "mode": "keep"},
               {"match": "model.layers.*", "mode": "linear", "granularity": "per_channel"}
             ],
             "default": {"mode": "palettize", "bits": 4, "granularity": "per_tensor"}}
            """

        private func scheme(_ name: String) throws -> (CompressionScheme, CompressionConfig.Source) {
            let parsed = try CompressionConfig(bytes: Array(config.utf8), path: "t.json")
            let tensor = TensorSpec(name: name, shape: [8, 8], role: .mlp, layer: 3)
            return try parsed.scheme(for: tensor, platform: .macOS, quantizeIOSEmbedding: false)
        }

        @Test(
            "a document that is not JSON but reads as YAML is named: a reference-tool or coremltools recipe, or YAML",
            arguments: [
                (
                    "config_type: OpPalettizerConfig\nglobal_config:\n  nbits: 4\n",
                    "a coreai-opt YAML recipe of the reference tool"
                ),
                (
                    "# coreai-opt\n\n---\nkmeans_palettization_config: {}\n",
                    "a coreai-opt YAML recipe of the reference tool"
                ),
                ("\u{FEFF}name: mine\nrules: []\n", "a YAML document"),
                ("---\n", "a YAML document"),
                ("{\"schema\": \"exporter.compression/1\", \"global_config\": \n", nil),
                ("schema exporter.compression/1\n", nil),
            ] as [(String, String?)])
        func yamlNamed(_ text: String, _ kind: String?) throws {
            #expect(CompressionConfig.yamlKind(Array(text.utf8)) == kind)
            let error = #expect(throws: CompressionConfigError.self) {
                try CompressionConfig(bytes: Array(text.utf8), path: "c.yaml")
            }
            let named = error?.description.contains(", which this tool does not read; write the same rules as an ")
            #expect(named == (kind != nil))
        }

        @Test("the first matching rule wins; '?' is one character; unmatched names take the default")
        func firstMatchWins() throws {
            let layer3 = try scheme("model.layers.3.mlp.up_proj.weight")
            #expect(layer3.0 == .keep && layer3.1 == .rule(0))
            let layer12 = try scheme("model.layers.12.mlp.up_proj.weight")
            #expect(layer12.0.mode == .linear && layer12.1 == .rule(1))
            let norm = try scheme("model.norm.weight")
            #expect(norm.0.mode == .palettize && norm.1 == .defaultRule)
        }

        @Test("group_size runs from 1 to 2^20 inclusive; one past either end is refused")
        func groupSizeBounds() throws {
            func parse(_ groupSize: Int) throws -> CompressionConfig {
                let text =
                    #"{"schema": "exporter.compression/1", "name": "g", "default": {"mode": "palettize", "bits": 4, "#
                    + #""granularity": "per_grouped_channel", "group_size": \#(groupSize)}}"#
                return try CompressionConfig(bytes: Array(text.utf8), path: "g.json")
            }
            #expect(try parse(1 << 20).defaultScheme?.groupSize == 1 << 20)
            #expect(try parse(1).defaultScheme?.groupSize == 1)
            for groupSize in [(1 << 20) + 1, 0] {
                #expect(
                    throws: CompressionConfigError.invalid(
                        path: "g.json",
                        reason: "default: 'group_size' must be an integer from 1 to 1048576 for per_grouped_channel"
                    )
                ) { _ = try parse(groupSize) }
            }
        }

        @Test("globs: '*' spans dots, '?' one character, braces alternatives, the whole name")
        func globs() {
            #expect(GlobPattern.matches("model.layers.?.mlp.*", "model.layers.3.mlp.up_proj.weight"))
            #expect(!GlobPattern.matches("model.layers.?.mlp.*", "model.layers.12.mlp.up_proj.weight"))
            #expect(GlobPattern.matches("*.{q,k}_proj.weight", "model.layers.0.self_attn.k_proj.weight"))
            #expect(!GlobPattern.matches("*.{q,k}_proj.weight", "model.layers.0.self_attn.v_proj.weight"))
            #expect(!GlobPattern.matches("model.norm", "model.norm.weight"))
            #expect(GlobPattern.matches("*norm.weight", "model.layers.0.input_layernorm.weight"))
        }
    }
}
