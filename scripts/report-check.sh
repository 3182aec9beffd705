#!/usr/bin/env bash
# `make report-check`: renders a sample `exporter inspect --html` report in headless Chromium
# and checks the screenshot shows the charts. Needs a browser, so it is not part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${REPORT_CHECK_DIR:-report-check}"
SWIFT="${SWIFT:-swift}"
rm -rf "$OUT" && mkdir -p "$OUT"

BROWSER="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
if [ -z "$BROWSER" ] && [ "$(uname -s)" = Darwin ]; then
    for app in "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome" \
        "/Applications/Chromium.app/Contents/MacOS/Chromium"; do
        if [ -x "$app" ]; then BROWSER="$app"; break; fi
    done
    if [ -z "$BROWSER" ]; then
        echo "error: report-check needs Google Chrome or Chromium in /Applications (or chromium on PATH)" >&2
        exit 1
    fi
fi
if [ -z "$BROWSER" ]; then
    echo "chromium is missing: installing it (Debian package 'chromium')"
    if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO=sudo;
    else echo "error: run 'apt-get install chromium' as root" >&2; exit 1; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium fonts-dejavu-core >/dev/null
    BROWSER="$(command -v chromium)"
fi

"$SWIFT" build --product exporter
EXPORTER="$("$SWIFT" build --show-bin-path)/exporter"
export EXPORTER_PRESETS="$PWD/Presets"

# A small synthetic Qwen3 with 8 layers, exported with the 4-bit group-8 config.
mkdir -p "$OUT/config"
cat > "$OUT/config/config.json" <<'JSON'
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 128, "intermediate_size": 384,
 "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 1024,
 "max_position_embeddings": 2048, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
 "torch_dtype": "bfloat16"}
JSON
"$EXPORTER" synth "$OUT/config" --out "$OUT/checkpoint" --seed 1
"$EXPORTER" "$OUT/checkpoint" --experimental --compute-precision float16 --compression 4bit_weight_palettized_group8 \
    --output-dir "$OUT/artifacts" --output-name Sample --context 2048 > /dev/null
BUNDLE="$OUT/artifacts/sample/Sample.aimodel"
"$EXPORTER" verify "$BUNDLE" --against "$OUT/checkpoint" --run
"$EXPORTER" inspect "$BUNDLE" --html "$OUT/report.html"

"$BROWSER" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=800,1900 \
    --screenshot="$PWD/$OUT/report.png" "file://$PWD/$OUT/report.html" 2>/dev/null

# The charts draw their bars in #4e79a7: count those pixels in the screenshot (PNG decoded by hand).
python3 - "$OUT/report.png" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, width, height, ctype = 8, b"", 0, 0, 0
while pos < len(data):
    length, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + length]
    if kind == b"IHDR":
        width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
        assert depth == 8 and ctype in (2, 6), f"unexpected PNG format {depth}/{ctype}"
    elif kind == b"IDAT":
        idat += body
    pos += 12 + length
raw = zlib.decompress(idat)
bpp = 3 if ctype == 2 else 4
stride = width * bpp
rows, prev, i = [], bytearray(stride), 0
for _ in range(height):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride]); i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b = prev[x]; c = prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line); prev = line
bars = sum(1 for line in rows for x in range(0, stride, bpp) if abs(line[x] - 0x4e) < 8 and abs(line[x + 1] - 0x79) < 8 and abs(line[x + 2] - 0xa7) < 8)
print(f"screenshot {width}x{height}: {bars} chart-bar pixels")
if bars < 2000:
    sys.exit("error: the report's charts did not render")
PY
echo "report-check: charts render ($OUT/report.png)"
