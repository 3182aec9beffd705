#!/usr/bin/env python3
"""Copies an artifact and corrupts one thing in it, for run.sh's negative controls: the
reader must refuse each copy. The manifest's sizes and CRC-32s are rewritten to match, so
that only the check aimed at can catch the corruption.

usage: mutate.py MUTATION SOURCE DESTINATION
"""

import json
import shutil
import struct
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from read_artifacts import canonical_json  # noqa: E402


def first_tensor(manifest, mode):
    return next(t for t in manifest["tensors"] if t["compression"]["mode"] == mode)


def part(tensor, kind):
    return next(p for p in tensor["parts"] if p["kind"] == kind)


def patch(path, offset, new_bytes):
    data = bytearray(path.read_bytes())
    data[offset:offset + len(new_bytes)] = new_bytes
    path.write_bytes(bytes(data))


def index_bit(folder, manifest):
    """Element 0's index moves to a neighbouring entry: no longer the nearest."""
    indices = part(first_tensor(manifest, "palettize"), "indices")
    data = (folder / "weights.bin").read_bytes()
    patch(folder / "weights.bin", indices["offset"], bytes([data[indices["offset"]] ^ 1]))


def lut_entry(folder, manifest):
    """One LUT entry becomes the next float16 up: no longer its cluster's mean."""
    tensor = first_tensor(manifest, "palettize")
    entries = 1 << tensor["compression"]["bits"]
    offset = part(tensor, "lut")["offset"] + 2 * (entries // 2)
    (bits,) = struct.unpack("<H", (folder / "weights.bin").read_bytes()[offset:offset + 2])
    bits = bits + 1 if bits < 0x8000 else bits - 1
    patch(folder / "weights.bin", offset, struct.pack("<H", bits))


def int8_code(folder, manifest):
    values = part(first_tensor(manifest, "linear"), "values")
    (code,) = struct.unpack("<b", (folder / "weights.bin").read_bytes()[values["offset"]:][:1])
    patch(folder / "weights.bin", values["offset"], struct.pack("<b", code - 1 if code > 0 else code + 1))


def kept_value(folder, manifest):
    values = part(first_tensor(manifest, "keep"), "values")
    data = (folder / "weights.bin").read_bytes()
    patch(folder / "weights.bin", values["offset"], bytes([data[values["offset"]] ^ 1]))


def sqnr(folder, manifest):
    tensor = next(t for t in manifest["tensors"] if t["sqnr_db"] is not None)
    tensor["sqnr_db"] = round(tensor["sqnr_db"] + 0.01, 2)


def json_layout(folder, manifest):
    path = folder / "graph.json"
    path.write_bytes(path.read_bytes().replace(b'"layers" : ', b'"layers": ', 1))


def rope_table(folder, manifest):
    """Row 1, column 0 of the cosine table moves by 3 float32 ulps."""
    path = folder / "tables" / "rope_cos.f32"
    half = manifest["kv_cache"]["head_dim"] // 2
    (bits,) = struct.unpack("<I", path.read_bytes()[4 * half:4 * half + 4])
    patch(path, 4 * half, struct.pack("<I", bits - 3))


MUTATIONS = {"index-bit": index_bit, "lut-entry": lut_entry, "int8-code": int8_code,
             "kept-value": kept_value, "sqnr": sqnr, "json-layout": json_layout,
             "rope-table": rope_table}


def main(mutation, source, destination):
    source, destination = Path(source), Path(destination)
    shutil.copytree(source, destination)
    manifest = json.loads((destination / "manifest.json").read_text())
    MUTATIONS[mutation](destination, manifest)
    for entry in manifest["files"]:
        data = (destination / entry["path"]).read_bytes()
        entry["bytes"], entry["crc32"] = len(data), f"{zlib.crc32(data):08x}"
    (destination / "manifest.json").write_text(canonical_json(manifest) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
