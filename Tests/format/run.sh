#!/usr/bin/env bash
# Reads every kind of artifact with an independent reader written from docs/FORMAT.md and
# docs/MANIFEST.md alone (Tests/format/read_artifacts.py, Python standard library only):
# tiny synthetic checkpoints of each iOS family, exported with a spread of options that
# covers every layout feature, then compiled; each artifact must read back as the docs say,
# value for value against its checkpoint. Then a few corrupted copies must be refused, so a
# reader that checks nothing cannot pass. No network; everything in one temporary folder.
# Needs python3 (3.8 or later; no package).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO="$PWD"
EXPORTER="${EXPORTER:-.build/debug/exporter}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$EXPORTER" ]; then
    swift build --product exporter
fi
EXPORTER="$(cd "$(dirname "$EXPORTER")" && pwd)/$(basename "$EXPORTER")"
export EXPORTER_PRESETS="$REPO/Presets"
export CI=1    # no progress line
export PYTHONDONTWRITEBYTECODE=1    # mutate.py imports the reader: no __pycache__ in the tree
READER="$REPO/Tests/format/read_artifacts.py"
MUTATE="$REPO/Tests/format/mutate.py"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/exporter-format.XXXXXX")"
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
cd "$WORK"
start=$SECONDS

# --- Checkpoints: qwen3 (tied, head_dim != hidden/heads, q/k norms, bfloat16 weights),
# qwen2 (untied, q/k/v biases, float16 weights, linear RoPE scaling written as "type"),
# mistral (float32 weights, a sliding window on every layer, RoPE scaling as "rope_type").
# Row counts (150, 130, 80, 112 channels) leave smaller last groups.
mkdir qwen3 qwen2 mistral
cat > qwen3/config.json <<'EOF'
{
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
  "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
  "vocab_size": 200, "max_position_embeddings": 256, "rope_theta": 1000000.0,
  "rms_norm_eps": 1e-06, "tie_word_embeddings": true, "torch_dtype": "bfloat16"
}
EOF
cat > qwen2/config.json <<'EOF'
{
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
  "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2,
  "num_attention_heads": 6, "num_key_value_heads": 2, "vocab_size": 150,
  "max_position_embeddings": 128, "rope_theta": 10000.0,
  "rope_scaling": {"type": "linear", "factor": 2.0}, "rms_norm_eps": 1e-05,
  "tie_word_embeddings": false, "use_sliding_window": false, "sliding_window": 4096,
  "max_window_layers": 21, "torch_dtype": "float16"
}
EOF
cat > mistral/config.json <<'EOF'
{
  "architectures": ["MistralForCausalLM"], "model_type": "mistral",
  "hidden_size": 64, "intermediate_size": 112, "num_hidden_layers": 3,
  "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 130,
  "max_position_embeddings": 96, "rope_theta": 500000.0,
  "rope_scaling": {"rope_type": "linear", "factor": 3.0}, "rms_norm_eps": 1e-05,
  "sliding_window": 32, "tie_word_embeddings": false, "torch_dtype": "float32"
}
EOF
"$EXPORTER" synth qwen3 --out qwen3 --dtype BF16 --seed 1 >/dev/null
"$EXPORTER" synth qwen2 --out qwen2 --dtype F16 --seed 2 >/dev/null
"$EXPORTER" synth mistral --out mistral --dtype F32 --seed 3 >/dev/null
mkdir synthetic && cp qwen3/config.json synthetic/
"$EXPORTER" synth synthetic --out synthetic --seed 7 >/dev/null    # what --synthetic --seed 7 reads
# Tokenizer files: copied byte for byte, listed in the docs' order; <think> is a reasoning
# marker; README.md is not a tokenizer file and must not be copied.
cat > qwen3/tokenizer.json <<'EOF'
{"added_tokens": [{"id": 199, "content": "<think>", "special": false}], "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "<think>": 199}, "merges": []}}
EOF
printf '{"model_max_length": 64}\n' > qwen3/tokenizer_config.json
printf '{"a": 0, "b": 1}' > qwen3/vocab.json
printf 'a b\n' > qwen3/merges.txt
printf '{{ messages }}\n' > qwen3/chat_template.jinja
printf 'not a tokenizer file\n' > qwen3/README.md
# qwen2's weights under another config: layer_types (every layer sliding, with
# use_sliding_window, without which qwen2 has no window), RoPE scaling "default" (none), and
# the other reasoning marker, held by tokenizer_config.json only.
mkdir qwen2-variant && cp qwen2/model.safetensors qwen2-variant/
"$PYTHON" - qwen2/config.json qwen2-variant/config.json <<'EOF'
import json, sys
config = json.load(open(sys.argv[1]))
config.update(use_sliding_window=True, layer_types=["sliding_attention"] * 2, sliding_window=16, rope_scaling={"rope_type": "default"})
json.dump(config, open(sys.argv[2], "w"), indent=2)
EOF
printf '{"added_tokens_decoder": {"7": {"content": "<|reasoning_start|>"}}}\n' > qwen2-variant/tokenizer_config.json
printf '5 17 99 3 42 8 120 64 1 77 23 50\n' > calibration.txt
# Crafted float32 weights: int8 and palette edge cases, rounding ties, -0, subnormals, a
# value beyond float16's range in a norm (edge.json: the config sending each to its rule).
"$PYTHON" "$REPO/Tests/format/edge_checkpoint.py" edge

# Every palette width per tensor, per grouped channel and per block, group and block sizes
# that leave smaller last groups and blocks, outliers (with tiles of only outliers),
# int8 per channel and per tensor, kept tensors, the three searches, a rule matching nothing.
cat > spread.json <<'EOF'
{
  "schema": "exporter.compression/1",
  "name": "format_spread",
  "description": "Every layout feature of weights.bin (Tests/format)",
  "rules": [
    { "match": "*norm.weight", "mode": "keep" },
    { "match": "*.bias", "mode": "keep", "optional": true },
    { "match": "model.layers.0.self_attn.q_proj.weight", "mode": "palettize", "bits": 2, "granularity": "per_tensor" },
    { "match": "model.layers.0.self_attn.k_proj.weight", "mode": "palettize", "bits": 3, "granularity": "per_grouped_channel", "group_size": 3 },
    { "match": "model.layers.0.self_attn.v_proj.weight", "mode": "palettize", "bits": 6, "granularity": "per_grouped_channel", "group_size": 5 },
    { "match": "model.layers.0.self_attn.o_proj.weight", "mode": "palettize", "bits": 8, "granularity": "per_tensor" },
    { "match": "model.layers.0.mlp.gate_proj.weight", "mode": "palettize", "bits": 8, "granularity": "per_grouped_channel", "group_size": 32 },
    { "match": "model.layers.0.mlp.up_proj.weight", "mode": "linear", "granularity": "per_channel" },
    { "match": "model.layers.0.mlp.down_proj.weight", "mode": "linear", "bits": 8, "granularity": "per_tensor" },
    { "match": "model.layers.1.self_attn.{q,k}_proj.weight", "mode": "palettize", "bits": 4, "granularity": "per_block", "group_size": 4, "block_size": 16, "outlier_fraction": 0.01 },
    { "regex": "model\\.layers\\.1\\.self_attn\\.v_proj\\.weight", "mode": "palettize", "bits": 3, "granularity": "per_block", "group_size": 3, "block_size": 20, "outlier_fraction": 0.03 },
    { "match": "model.layers.1.self_attn.o_proj.weight", "mode": "palettize", "bits": 2, "granularity": "per_block", "group_size": 1, "block_size": 2, "outlier_fraction": 0.05 },
    { "match": "model.layers.1.mlp.gate_proj.weight", "mode": "palettize", "bits": 6, "granularity": "per_tensor", "outlier_fraction": 0.002, "search": "exact" },
    { "match": "model.layers.1.mlp.up_proj.weight", "mode": "palettize", "bits": 4, "granularity": "per_grouped_channel", "group_size": 24, "search": "thorough", "outlier_fraction": 0 },
    { "match": "model.layers.1.mlp.down_proj.weight", "mode": "keep" },
    { "match": "lm_head.weight", "mode": "palettize", "bits": 2, "granularity": "per_grouped_channel", "group_size": 16, "optional": true },
    { "match": "model.nothing.*", "mode": "keep" }
  ],
  "default": { "mode": "palettize", "bits": 4, "granularity": "per_grouped_channel", "group_size": 7 }
}
EOF
# Two made-up devices: t01p packs two of qwen3's layers in a region and puts the third in
# another (and needs the raised memory limit); t02g fits no layer (regions over budget,
# does not fit); pages of 4 KiB and 16 KiB.
cat > devices.json <<'EOF'
{
  "schema": "exporter.devices/1",
  "devices": [
    { "id": "t01p", "platform": "iOS", "chip": "Test A", "products": ["Test phone"], "ahead_of_time": true,
      "ram_bytes": 8589934592, "app_memory_limit_bytes": 300000, "increased_memory_limit_bytes": 2000000,
      "entitlements": ["com.example.more-memory"], "ane_region_budget_bytes": 280000, "page_size": 4096 },
    { "id": "t02g", "platform": "macOS", "chip": "Test M", "products": ["Test Mac"], "ahead_of_time": true,
      "ram_bytes": 8589934592, "app_memory_limit_bytes": 300000, "increased_memory_limit_bytes": null,
      "entitlements": [], "ane_region_budget_bytes": { "value": 150000, "estimate": true, "source": "test" },
      "page_size": { "value": 16384, "estimate": false, "source": "test" } }
  ]
}
EOF

export_bundle() {    # export_bundle NAME CHECKPOINT OPTIONS...: out/NAME/NAME.aimodel
    local name="$1" checkpoint="$2"
    shift 2
    "$EXPORTER" "$checkpoint" --experimental --output-dir out --output-name "$name" "$@" >/dev/null 2>"$name.err" \
        || { cat "$name.err" >&2; echo "error: format: export $name failed" >&2; exit 1; }
}
compile_bundle() {    # compile_bundle NAME OPTIONS...: compiled/NAME.<arch>.aimodelc
    local name="$1"
    shift
    "$EXPORTER" compile "out/$name/$name.aimodel" --output compiled --devices devices.json "$@" >/dev/null \
        || { echo "error: format: compile $name failed" >&2; exit 1; }
}
artifacts=0
read_artifact() {    # read_artifact ARTIFACT READER-OPTIONS...
    artifacts=$((artifacts + 1))
    "$PYTHON" "$READER" "$@" --devices devices.json > read.out \
        || { echo "error: format: the reader refused $1 (above)" >&2; exit 1; }
    grep -v '^features: ' read.out
    grep '^features: ' read.out | tr ' ' '\n' | tail -n +2 >> features.txt
}

export_bundle q3-ios qwen3 --compute-precision float16 --context 64
export_bundle q3-none qwen3 --compute-precision float16 --context 64 --compression none
export_bundle q3-mac qwen3 --compute-precision bfloat16 --context 48 --platform macOS --palette-search thorough
export_bundle q3-synthetic synthetic --compute-precision float32 --context 64 --synthetic --seed 7
export_bundle q2-spread qwen2 --compute-precision float32 --context 48 --compression-config spread.json \
    --disable-embedding-quantization-ios
export_bundle q2-spread-mac qwen2 --compute-precision bfloat16 --context 40 --platform macOS \
    --compression-config spread.json
export_bundle q2-group8 qwen2 --compute-precision float16 --context 128 --compression 4bit_weight_palettized_group8
export_bundle q2-variant qwen2-variant --compute-precision float16 --context 48
export_bundle ms-quality mistral --compute-precision float16 --context 96 --compression 4bit_quality \
    --calibration calibration.txt
export_bundle ms-none mistral --compute-precision float32 --context 32 --platform macOS --compression none
export_bundle ms-bf16 mistral --compute-precision bfloat16 --context 32 --compression none \
    --disable-embedding-quantization-ios
export_bundle ms-exact mistral --compute-precision float16 --context 64 --platform macOS --palette-search exact
export_bundle edge-mac edge --compute-precision bfloat16 --context 32 --platform macOS \
    --compression-config edge.json
export_bundle edge-clamp edge --compute-precision float16 --context 32 --allow-clamp \
    --compression-config edge.json
compile_bundle q3-ios --device h17p --device t01p
compile_bundle q3-mac --device h13g --device t02g
compile_bundle q2-spread --device t01p
compile_bundle ms-quality --platform visionOS --device h14g
compile_bundle q2-variant --device h16p

read_artifact out/q3-ios/q3-ios.aimodel --against qwen3 --context 64
read_artifact out/q3-none/q3-none.aimodel --against qwen3 --context 64
read_artifact out/q3-mac/q3-mac.aimodel --against qwen3 --context 48 --palette-search thorough
read_artifact out/q3-synthetic/q3-synthetic.aimodel --against synthetic --context 64 --synthetic
read_artifact out/q2-spread/q2-spread.aimodel --against qwen2 --context 48 --compression-config spread.json
read_artifact out/q2-spread-mac/q2-spread-mac.aimodel --against qwen2 --context 40 \
    --compression-config spread.json
read_artifact out/q2-group8/q2-group8.aimodel --against qwen2 --context 128
read_artifact out/q2-variant/q2-variant.aimodel --against qwen2-variant --context 48
read_artifact out/ms-quality/ms-quality.aimodel --against mistral --context 96 --calibration calibration.txt
read_artifact out/ms-none/ms-none.aimodel --against mistral --context 32
read_artifact out/ms-bf16/ms-bf16.aimodel --against mistral --context 32
read_artifact out/ms-exact/ms-exact.aimodel --against mistral --context 64 --palette-search exact
read_artifact out/edge-mac/edge-mac.aimodel --against edge --context 32 --compression-config edge.json
read_artifact out/edge-clamp/edge-clamp.aimodel --against edge --context 32 --compression-config edge.json \
    --allow-clamp
read_artifact compiled/q3-ios.h17p.aimodelc --bundle out/q3-ios/q3-ios.aimodel --against qwen3
read_artifact compiled/q3-ios.t01p.aimodelc --bundle out/q3-ios/q3-ios.aimodel --against qwen3
read_artifact compiled/q3-mac.h13g.aimodelc --bundle out/q3-mac/q3-mac.aimodel --against qwen3 \
    --palette-search thorough
read_artifact compiled/q3-mac.t02g.aimodelc --bundle out/q3-mac/q3-mac.aimodel --against qwen3 \
    --palette-search thorough
read_artifact compiled/q2-spread.t01p.aimodelc --bundle out/q2-spread/q2-spread.aimodel --against qwen2 \
    --compression-config spread.json
read_artifact compiled/q2-variant.h16p.aimodelc --bundle out/q2-variant/q2-variant.aimodel --against qwen2-variant
read_artifact compiled/ms-quality.h14g.aimodelc --bundle out/ms-quality/ms-quality.aimodel --against mistral \
    --calibration calibration.txt

# Every feature the docs describe must have been met by some artifact above.
required="palettize-2bit-per_tensor palettize-2bit-per_grouped_channel palettize-2bit-per_block
palettize-3bit-per_grouped_channel palettize-3bit-per_block palettize-4bit-per_grouped_channel
palettize-4bit-per_block palettize-6bit-per_tensor palettize-6bit-per_grouped_channel
palettize-8bit-per_tensor palettize-8bit-per_grouped_channel smaller-last-group-per_grouped_channel
smaller-last-group-per_block smaller-last-block outliers tile-all-outliers
tile-fewer-values-than-entries lut-means-checked search-standard search-thorough search-exact
linear-int8-per_tensor linear-int8-per_channel keep-float16-from-bfloat16 keep-float16-from-float16
keep-float16-from-float32 keep-bfloat16-from-bfloat16 keep-bfloat16-from-float32
keep-float32-from-float16 keep-float32-from-float32 keep-float32-from-bfloat16 source-bfloat16
source-float16 source-float32 precision-float16 precision-bfloat16 precision-float32 platform-iOS
platform-macOS calibration synthetic tokenizer-files rule-matching-nothing sliding-window
rope-linear-scaling tied-embeddings untied-head compiled-iOS compiled-macOS compiled-visionOS
compiled-tied-head-copy region-of-several-layers layers-split-into-regions region-over-budget
page-4096 page-16384 verdict-fits verdict-needs-entitlement verdict-does-not-fit clamped
compressed-tensor-exact int8-exact-half int8-zeros-scale-1 keep-negative-zero
negative-zero-palettize outlier-magnitude-tie reasoning-marker-<think>
reasoning-marker-<|reasoning_start|>"
missing=""
for feature in $required; do
    grep -qx "$feature" features.txt || missing="$missing $feature"
done
if [ -n "$missing" ]; then
    echo "error: format: no artifact exercised:$missing" >&2
    exit 1
fi

# Negative controls: each corrupted copy (its CRC-32s rewritten, so that only the check
# named can catch it) must be refused with the expected message.
expect_refusal() {    # expect_refusal MUTATION ARTIFACT MESSAGE READER-OPTIONS...
    local mutation="$1" artifact="$2" message="$3"
    shift 3
    rm -rf mutated && mkdir mutated
    "$PYTHON" "$MUTATE" "$mutation" "$artifact" "mutated/$(basename "$artifact")"
    if "$PYTHON" "$READER" "mutated/$(basename "$artifact")" --devices devices.json "$@" 2> refused.err >/dev/null; then
        echo "error: format: the reader accepted an artifact with $mutation" >&2
        exit 1
    fi
    grep -q -- "$message" refused.err || {
        cat refused.err >&2
        echo "error: format: $mutation was refused, but not with '$message'" >&2
        exit 1
    }
}
expect_refusal index-bit out/q2-spread/q2-spread.aimodel "index of element" --against qwen2
expect_refusal lut-entry out/q3-ios/q3-ios.aimodel "float16 means of any split" --against qwen3
expect_refusal int8-code out/q2-spread/q2-spread.aimodel "int8 code" --against qwen2
expect_refusal kept-value out/ms-none/ms-none.aimodel "kept element" --against mistral
expect_refusal sqnr out/q3-ios/q3-ios.aimodel "sqnr_db" --against qwen3
expect_refusal json-layout out/q3-ios/q3-ios.aimodel "canonical JSON" --against qwen3
expect_refusal rope-table compiled/q3-ios.h17p.aimodelc "ulps" --bundle out/q3-ios/q3-ios.aimodel
echo "format: $artifacts artifacts read as docs/FORMAT.md and docs/MANIFEST.md say, 7 corruptions refused ($((SECONDS - start)) s)"
