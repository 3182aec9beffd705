#!/usr/bin/env bash
# Checks the Core ML packages with coremltools (load, milproto rebuild, weights bit for bit)
# and a NumPy interpreter (logits against a transcription of the model). Needs Python 3.9
# or later with venv; installs pinned coremltools and numpy into a virtual environment.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${COREML_VENV:-.build/coreml-venv}"
EXPORTER="${EXPORTER:-.build/debug/exporter}"
PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
    for candidate in python3.11 python3.12 python3.10 python3; do
        if command -v "$candidate" >/dev/null; then PYTHON="$candidate"; break; fi
    done
fi
if [ -z "$PYTHON" ]; then
    echo "error: the Core ML check needs python3 (with venv) to install coremltools" >&2
    exit 1
fi
if [ ! -x "$EXPORTER" ]; then
    swift build --product exporter
fi
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import coremltools, numpy" 2>/dev/null; then
    echo "coreml: installing coremltools 9.0 and numpy into $VENV"
    "$PYTHON" -m venv "$VENV" || { echo "error: '$PYTHON -m venv' failed (apt-get install python3-venv)" >&2; exit 1; }
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "coremltools==9.0" "numpy==2.4.6" \
        || { echo "error: pip could not install coremltools==9.0 and numpy==2.4.6" >&2; exit 1; }
fi
# coremltools warns on Linux that it cannot predict (no Core ML framework): expected, filtered.
"$VENV/bin/python" Tests/coreml/check_mlpackage.py --exporter "$EXPORTER" 2> >(grep -v "libcoremlpython" >&2)
