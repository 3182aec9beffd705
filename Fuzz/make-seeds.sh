#!/bin/sh
# Seed corpora for the fuzz targets, from the repository's fixtures and a tiny exported
# bundle. Usage: Fuzz/make-seeds.sh <exporter binary> <output folder>
set -eu
exporter=$1
out=$2
root=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$out/seeds"
mkdir -p "$out/seeds/FuzzSafetensors" "$out/seeds/FuzzConfig" "$out/seeds/FuzzBundle" "$out/seeds/FuzzTables" "$out/work"

# Configs: the shipped checkpoint configs and the tiny one.
n=0
for config in "$root"/Presets/checkpoints/*/config.json "$root"/Fuzz/Seeds/tiny/config.json; do
    n=$((n + 1)); cp "$config" "$out/seeds/FuzzConfig/config-$n.json"
done

# Safetensors: the test fixtures and a tiny synthetic checkpoint (bf16 and f32).
n=0
for file in $(find "$root/Tests/ExporterKitTests/Checkpoint/Fixtures" -name '*.safetensors'); do
    n=$((n + 1)); cp "$file" "$out/seeds/FuzzSafetensors/fixture-$n.safetensors"
done
for dtype in BF16 F32; do
    rm -rf "$out/work/tiny-$dtype"
    EXPORTER_PRESETS="$root/Presets" "$exporter" synth "$root/Fuzz/Seeds/tiny" --out "$out/work/tiny-$dtype" --dtype $dtype >/dev/null
    cp "$out/work/tiny-$dtype/model.safetensors" "$out/seeds/FuzzSafetensors/tiny-$dtype.safetensors"
done

# Bundles: manifest, NUL, graph, NUL, weights — for three compression choices.
for compression in 4bit_weight_palettized_group8 none; do
    rm -rf "$out/work/bundle-$compression"
    EXPORTER_PRESETS="$root/Presets" "$exporter" "$out/work/tiny-BF16" --experimental --compute-precision float16 \
        --compression "$compression" --output-dir "$out/work/bundle-$compression" --output-name Tiny >/dev/null
    bundle="$out/work/bundle-$compression/tiny/Tiny.aimodel"
    { cat "$bundle/manifest.json"; printf '\0'; cat "$bundle/graph.json"; printf '\0'; cat "$bundle/weights.bin"; } \
        >"$out/seeds/FuzzBundle/bundle-$compression"
done
# Tables: a selector byte (0 device table, 1 compression config, 2 farm file), then a shipped file.
{ printf '\000'; cat "$root/Presets/devices.json"; } >"$out/seeds/FuzzTables/devices"
n=0
for config in "$root"/Presets/compression/*.json; do
    n=$((n + 1)); { printf '\001'; cat "$config"; } >"$out/seeds/FuzzTables/compression-$n"
done
{ printf '\002'; cat "$root/Presets/farm.json"; } >"$out/seeds/FuzzTables/farm"
# Inputs that once failed (Fuzz/Regressions/<target>/) stay in the seeds.
for target in FuzzSafetensors FuzzConfig FuzzBundle FuzzTables; do
    if [ -d "$root/Fuzz/Regressions/$target" ]; then cp "$root/Fuzz/Regressions/$target"/* "$out/seeds/$target/"; fi
done
echo "seeds: $(ls "$out/seeds/FuzzSafetensors" | wc -l) safetensors, $(ls "$out/seeds/FuzzConfig" | wc -l) configs, $(ls "$out/seeds/FuzzBundle" | wc -l) bundles, $(ls "$out/seeds/FuzzTables" | wc -l) tables"
