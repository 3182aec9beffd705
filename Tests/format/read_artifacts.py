#!/usr/bin/env python3
"""An independent reader of exporter's artifacts, written from docs/FORMAT.md,
docs/MANIFEST.md and README.md alone (clean room: Sources/ was read only afterwards, to
confirm where the docs and the bytes disagreed; the docs were then fixed, and this reader
follows the fixed text).

It checks the docs' claim that "a runtime can read its artifacts without our code": every
byte of a portable bundle (<Name>.aimodel) or a compiled artifact (<Name>.<arch>.aimodelc)
is parsed as the docs say, every tensor is dequantised and compared with the checkpoint it
came from, and every figure of the manifest that can be recomputed is recomputed.

Python 3 standard library only. Exit status 0 when everything holds, 1 with one line per
mismatch (file, tensor, byte offset) otherwise, 2 on a usage error.
"""

import argparse
import bisect
import json
import math
import re
import struct
import sys
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_PRINTED_ERRORS = 200


# ---------------------------------------------------------------------------------------
# Problems are collected, not raised, so that one run lists every mismatch it can find.

class Problems:
    def __init__(self):
        self.errors = []
        self.context = ""

    def fail(self, where, what):
        self.errors.append(f"{self.context}{where}: {what}")

    def check(self, condition, where, what):
        if not condition:
            self.fail(where, what)
        return condition


P = Problems()
FEATURES = set()    # what the artifacts exercised, for run.sh to check its coverage


class Refusal(Exception):
    """A mismatch after which reading on would only produce noise (a bad header, say)."""


# ---------------------------------------------------------------------------------------
# Canonical JSON (FORMAT.md, "JSON"): the form every JSON file we write must have.

def load_json_bytes(raw, where):
    """Parses JSON, refusing duplicate keys and NaN/Infinity, which the canonical form lacks."""
    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            raise Refusal(f"{where}: duplicate key in an object")
        return dict(pairs)

    def no_constants(name):
        raise Refusal(f"{where}: non-JSON number {name}")

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Refusal(f"{where}: not UTF-8 at byte {error.start}")
    try:
        return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constants)
    except json.JSONDecodeError as error:
        raise Refusal(f"{where}: not JSON: {error}")


def swift_double(x):
    """Swift's shortest round-trip `description` of a Double, without a trailing `.0`,
    in exponent form below 1e-4 and above 2^53 (FORMAT.md). Python's repr has the same
    shortest digits but switches to exponent form only from 1e16."""
    if not math.isfinite(x):
        raise Refusal(f"a non-finite number {x!r} cannot be written as JSON")
    if x == int(x) and abs(x) <= 2.0 ** 53:
        text = str(int(x))
        return "-0" if text == "0" and math.copysign(1.0, x) < 0 else text
    text = repr(x)
    if abs(x) > 2.0 ** 53 and "e" not in text:
        # An integral double in (2^53, 1e16): repr writes it out, Swift in exponent form.
        digits = text.rstrip("0").rstrip(".").lstrip("-")
        exponent = len(digits) - 1
        mantissa = digits.rstrip("0")
        mantissa = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
        text = ("-" if x < 0 else "") + f"{mantissa}e+{exponent:02d}"
    return text


def json_string(s):
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "\b\t\n\f\r":
            out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def canonical_json(value, depth=0):
    pad = "  " * depth
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return swift_double(value)
    if isinstance(value, str):
        return json_string(value)
    if isinstance(value, list):
        if not value:
            return "[\n\n" + pad + "]"
        inner = ",\n".join(pad + "  " + canonical_json(v, depth + 1) for v in value)
        return "[\n" + inner + "\n" + pad + "]"
    if isinstance(value, dict):
        if not value:
            return "{\n\n" + pad + "}"
        items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-8"))
        inner = ",\n".join(pad + "  " + json_string(k) + " : " + canonical_json(v, depth + 1)
                           for k, v in items)
        return "{\n" + inner + "\n" + pad + "}"
    raise TypeError(type(value))


def read_our_json(path):
    """Reads a JSON file we wrote and checks it is byte for byte its canonical form."""
    raw = path.read_bytes()
    value = load_json_bytes(raw, path.name)
    expected = (canonical_json(value) + "\n").encode("utf-8")
    if raw != expected:
        at = next((i for i, (a, b) in enumerate(zip(raw, expected)) if a != b),
                  min(len(raw), len(expected)))
        P.fail(f"{path.name} byte {at}",
               f"not in the canonical JSON form: {raw[max(0, at - 30):at + 30]!r} where the "
               f"rules give {expected[max(0, at - 30):at + 30]!r}")
    return value


# ---------------------------------------------------------------------------------------
# A small schema language for MANIFEST.md's tables: a dict is an object with exactly those
# keys ("key?" may be absent), [t] a list of t, and the names below the scalar types.

STR, INT, NUM, BOOL = "string", "int", "number", "bool"


def nullable(t):
    return ("nullable", t)


def enum(*values):
    return ("enum", values)


def literal(value):
    return ("enum", (value,))


def matches_type(value, t):
    if t == STR:
        return isinstance(value, str)
    if t == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if t == NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == BOOL:
        return isinstance(value, bool)
    raise ValueError(t)


def check_schema(value, schema, where):
    if isinstance(schema, tuple) and schema[0] == "nullable":
        if value is None:
            return
        check_schema(value, schema[1], where)
    elif isinstance(schema, tuple) and schema[0] == "enum":
        P.check(value in schema[1] and type(value) is type(schema[1][0]), where,
                f"{value!r} is none of {list(schema[1])}")
    elif isinstance(schema, list):
        if P.check(isinstance(value, list), where, f"expected a list, found {value!r:.60}"):
            for i, item in enumerate(value):
                check_schema(item, schema[0], f"{where}[{i}]")
    elif isinstance(schema, dict):
        if set(schema) == {"*"}:          # an object with any keys, each value of one schema
            if P.check(isinstance(value, dict), where, "expected an object"):
                for key, item in value.items():
                    check_schema(item, schema["*"], f"{where}.{key}")
            return
        if not P.check(isinstance(value, dict), where, f"expected an object, found {value!r:.60}"):
            return
        required = {k for k in schema if not k.endswith("?")}
        allowed = {k.rstrip("?") for k in schema}
        for key in sorted(required - set(value)):
            P.fail(where, f"missing key '{key}'")
        for key in sorted(set(value) - allowed):
            P.fail(where, f"key '{key}' is not in the docs")
        for key, sub in schema.items():
            name = key.rstrip("?")
            if name in value:
                check_schema(value[name], sub, f"{where}.{name}")
    else:
        P.check(matches_type(value, schema), where, f"expected {schema}, found {value!r:.60}")


PRECISIONS = ("float16", "bfloat16", "float32")

PART_SCHEMA = {"kind": enum("values", "lut", "indices", "scales", "outlier_indices",
                            "outlier_values"),
               "dtype": enum("float16", "bfloat16", "float32", "int8", "uint2", "uint3",
                             "uint4", "uint6", "uint8", "uint32"),
               "file": STR, "offset": INT, "bytes": INT}

TENSOR_SCHEMA = {
    "name": STR, "shape": [INT], "role": enum("embedding", "attention", "mlp", "norm", "head"),
    "layer": nullable(INT),
    "compression": {"mode": enum("keep", "palettize", "linear"), "bits?": INT,
                    "granularity?": enum("per_tensor", "per_grouped_channel", "per_block",
                                         "per_channel"),
                    "group_size?": INT, "block_size?": INT, "outlier_fraction?": NUM,
                    "uneven_groups": enum("smaller_last_group", "refuse"),
                    "search?": enum("thorough", "exact")},
    "last_group_rows": nullable(INT), "rule": STR, "stored_bytes": INT, "parts": [PART_SCHEMA],
    "sqnr_db": nullable(NUM),
}

VERDICT_SCHEMA = {
    "architecture": STR, "platform": enum("iOS", "macOS", "visionOS"), "chip": STR,
    "memory": enum("fits", "needs-entitlement", "does-not-fit"), "total_bytes": INT,
    "app_memory_limit_bytes": INT, "increased_memory_limit_bytes": nullable(INT),
    "entitlements": [STR], "neural_engine": enum("all-regions-within-budget",
                                                 "regions-over-budget"),
    "region_budget_bytes": INT, "regions": INT, "regions_over_budget": [INT],
    "ahead_of_time": BOOL,
}

REGION_SCHEMA = {
    "index": INT, "kind": enum("embedding", "layers", "head"), "first_layer": nullable(INT),
    "last_layer": nullable(INT), "offset": INT, "bytes": INT, "stored_bytes": INT,
    "kv_cache_bytes": INT, "working_bytes": INT, "footprint_bytes": INT, "budget_bytes": INT,
    "within_budget": BOOL, "tensors": [{"name": STR, "parts": [PART_SCHEMA]}],
}

COMPILED_SCHEMA = {
    "architecture": STR, "platform": enum("iOS", "macOS", "visionOS"), "chip": STR,
    "products": [STR], "min_deployment_version": STR, "page_size": INT,
    "regions": [REGION_SCHEMA],
    "memory": {"weights_bytes": INT, "kv_cache_bytes": INT, "working_bytes": INT,
               "tables_bytes": INT, "total_bytes": INT, "peak_region": INT},
    "verdict": VERDICT_SCHEMA,
    "portable": {"name": STR, "bytes": INT, "manifest_crc32": STR, "tool_version?": STR},
    "size_delta_bytes": INT,
}

MANIFEST_SCHEMA = {
    "schema": literal("exporter.manifest/1"),
    "kind": enum("plan", "bundle", "compiled"),
    "tool": {"name": literal("exporter"), "version": STR},
    "model": {
        "name": STR, "model_type": STR, "registry_type": STR, "architectures": [STR],
        "preset": nullable(STR), "experimental": BOOL,
        "source": {"kind": enum("directory", "huggingface-cache", "preset-config"),
                   "repo_id": nullable(STR), "revision": nullable(STR),
                   "files": [{"name": STR, "bytes": INT, "fingerprint?": STR}]},
        "weights": enum("checkpoint", "synthetic", "none"),
    },
    "platform": enum("iOS", "macOS"),
    "compute_precision": enum(*PRECISIONS),
    "context_length": INT,
    "parameters": INT,
    "compression": {"config": STR, "ios_embedding_int8": BOOL,
                    "calibration?": {"weighting": literal("activation_energy"), "tokens": INT,
                                     "tokens_crc32": STR}},
    "kv_cache": {"bytes": INT, "layers": INT, "kv_heads": INT, "head_dim": INT,
                 "context_length": INT, "dtype": enum(*PRECISIONS)},
    "memory": {"weights_bytes": INT, "kv_cache_bytes": INT, "working_bytes": INT,
               "total_bytes": INT, "prefill_chunk": INT},
    "sizes": {"estimated_bundle_bytes": INT, "bundle_bytes": nullable(INT),
              "bits_per_weight": NUM,
              "by_role": {"*": {"parameters": INT, "bytes": INT, "bits_per_weight": NUM}}},
    "tokenizer": nullable({"files": [STR], "reasoning_marker": nullable(STR),
                           "default_response_tokens": INT}),
    "tensors": [TENSOR_SCHEMA],
    "files": [{"path": STR, "bytes": INT, "crc32": STR}],
    "warnings": [STR],
    "build_key": nullable(STR),
    "compiled": nullable(COMPILED_SCHEMA),
    "verdicts": [VERDICT_SCHEMA],
    "conversion": nullable({"peak_bytes": INT, "peak_tensor": STR, "workers": INT,
                            "storage_from": enum("checkpoint", "torch_dtype", "synthetic"),
                            "available_bytes": nullable(INT),
                            "available_limit?": nullable(enum("RLIMIT_AS", "RLIMIT_DATA"))}),
}

GRAPH_SCHEMA = {
    "schema": literal("exporter.graph/1"), "architecture": STR, "layers": INT,
    "hidden_size": INT, "intermediate_size": INT, "vocab_size": INT, "context_length": INT,
    "compute_precision": enum(*PRECISIONS),
    "attention": {"heads": INT, "kv_heads": INT, "head_dim": INT, "qkv_bias": BOOL,
                  "qk_norm": BOOL, "sliding_window": nullable(INT)},
    "rope": {"theta": NUM, "scaling_type": nullable(STR), "scaling_factor": nullable(NUM)},
    "rms_norm_eps": NUM, "activation": literal("silu"), "tie_word_embeddings": BOOL,
    "shapes": {"input_ids": [INT], "logits": [INT], "kv_cache_per_layer": [INT],
               "causal_mask": [INT]},
}

STATIC_SCHEMA = {
    "schema": literal("exporter.static/1"), "context_length": INT,
    "causal_mask": {"shape": [INT], "rule": STR, "dtype": enum(*PRECISIONS)},
    "rope": {"theta": NUM, "scaling_type": nullable(STR), "scaling_factor": nullable(NUM),
             "shape": [INT], "dtype": literal("float32"), "cos": STR, "sin": STR},
    "kv_cache": {"dtype": enum(*PRECISIONS), "buffer_shape": [INT], "buffer_bytes": INT,
                 "slot_bytes": INT, "alignment": INT, "total_bytes": INT,
                 "layers": [{"layer": INT, "k_offset": INT, "v_offset": INT}]},
}


# ---------------------------------------------------------------------------------------
# Numbers: conversions between the float formats, done exactly (FORMAT.md, "Conversion").

ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def align(n, a):
    return (n + a - 1) // a * a


def ceil_div(a, b):
    return -(-a // b)


def round2(x):
    """Two decimals, ties away from zero: the manifest's 4.125 bits per weight is 4.13."""
    scaled = x * 100
    return math.copysign(math.floor(abs(scaled) + 0.5), scaled) / 100


def f32(x):
    """Rounds a double to float32, to nearest even (exact for +, -, *, / of float32s)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def decode_float16(raw):
    return struct.unpack(f"<{len(raw) // 2}e", raw)


def decode_bfloat16(raw):
    halves = struct.unpack(f"<{len(raw) // 2}H", raw)
    return struct.unpack(f"<{len(halves)}f", struct.pack(f"<{len(halves)}I",
                                                         *(h << 16 for h in halves)))


def decode_float32(raw):
    return struct.unpack(f"<{len(raw) // 4}f", raw)


DECODERS = {"float16": decode_float16, "bfloat16": decode_bfloat16, "float32": decode_float32}


def encode_float16(values):
    """Rounds to nearest even; raises OverflowError past float16's range."""
    return struct.pack(f"<{len(values)}e", *values)


def encode_bfloat16(values):
    """Each value must be exactly a float32 (it is: it comes from a checkpoint)."""
    bits = struct.unpack(f"<{len(values)}I", struct.pack(f"<{len(values)}f", *values))
    out = []
    for b in bits:
        if (b & 0x7F800000) == 0x7F800000:
            out.append(b >> 16)
        else:
            out.append((b + 0x7FFF + ((b >> 16) & 1)) >> 16)
    return struct.pack(f"<{len(out)}H", *out)


def encode_float32(values):
    return struct.pack(f"<{len(values)}f", *values)


ENCODERS = {"float16": encode_float16, "bfloat16": encode_bfloat16, "float32": encode_float32}


# ---------------------------------------------------------------------------------------
# The source checkpoint: safetensors (8-byte little-endian header length, JSON header,
# raw little-endian data), one file or shards listed by model.safetensors.index.json.

SAFETENSORS_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32"}


def read_checkpoint(folder):
    tensors = {}
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise Refusal(f"{folder}: no .safetensors file")
    for path in files:
        data = path.read_bytes()
        (header_length,) = struct.unpack_from("<Q", data, 0)
        header = json.loads(data[8:8 + header_length])
        base = 8 + header_length
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            dtype = SAFETENSORS_DTYPES.get(entry["dtype"])
            if dtype is None:
                raise Refusal(f"{path.name}: tensor {name} has dtype {entry['dtype']}")
            start, end = entry["data_offsets"]
            count = math.prod(entry["shape"])
            if end - start != count * ELEMENT_BYTES[dtype] or base + end > len(data):
                raise Refusal(f"{path.name}: tensor {name} has bad data_offsets")
            tensors[name] = {"dtype": dtype, "shape": entry["shape"], "file": path.name,
                             "values": DECODERS[dtype](data[base + start:base + end])}
    return tensors, files


# ---------------------------------------------------------------------------------------
# The plan of a tensor's parts, from its shape and scheme (FORMAT.md, "weights.bin").

def rows_columns(shape):
    """PyTorch shapes, output channels first; a 1-D tensor is one row."""
    if len(shape) == 1:
        return 1, shape[0]
    return shape[0], math.prod(shape[1:])


def outlier_count(elements, compression):
    """n = floor(elements x f), the product an IEEE double."""
    fraction = compression.get("outlier_fraction", 0)
    return math.floor(float(elements) * float(fraction))


def tile_layout(tensor):
    """(number of tiles, function (r, c) -> tile) of a palettised tensor."""
    c = tensor["compression"]
    rows, columns = rows_columns(tensor["shape"])
    if c["granularity"] == "per_tensor":
        return 1, lambda r, col: 0
    group = c["group_size"]
    if c["granularity"] == "per_grouped_channel":
        return ceil_div(rows, group), lambda r, col: r // group
    block = c["block_size"]
    blocks = ceil_div(columns, block)
    return ceil_div(rows, group) * blocks, lambda r, col: (r // group) * blocks + col // block


def planned_parts(tensor, precision):
    """[(kind, dtype, bytes)] of a tensor, as the format table gives them."""
    c = tensor["compression"]
    elements = math.prod(tensor["shape"])
    rows, _ = rows_columns(tensor["shape"])
    if c["mode"] == "keep":
        return [("values", precision, elements * ELEMENT_BYTES[precision])]
    if c["mode"] == "linear":
        scales = 1 if c["granularity"] == "per_tensor" else rows
        return [("scales", "float32", 4 * scales), ("values", "int8", elements)]
    bits = c["bits"]
    tiles, _ = tile_layout(tensor)
    parts = [("lut", "float16", tiles * (1 << bits) * 2),
             ("indices", f"uint{bits}", ceil_div(elements * bits, 8))]
    n = outlier_count(elements, c)
    if n >= 1:
        parts += [("outlier_indices", "uint32", 4 * n), ("outlier_values", "float16", 2 * n)]
    return parts


def check_scheme_keys(tensor, where):
    """MANIFEST.md: which compression keys exist for which mode and granularity."""
    c = tensor["compression"]
    mode, granularity = c["mode"], c.get("granularity")
    expect = {"bits": mode != "keep", "granularity": mode != "keep",
              "group_size": granularity in ("per_grouped_channel", "per_block"),
              "block_size": granularity == "per_block"}
    for key, present in expect.items():
        P.check((key in c) == present, where,
                f"compression.{key} {'missing' if present else 'present'} for mode {mode}"
                f"{' ' + granularity if granularity else ''}")
    if mode != "palettize":
        for key in ("outlier_fraction", "search"):
            P.check(key not in c, where, f"compression.{key} present for mode {mode}")
    if mode == "palettize":
        P.check(c.get("bits") in (2, 3, 4, 6, 8), where, f"palette bits {c.get('bits')}")
        P.check(granularity in ("per_tensor", "per_grouped_channel", "per_block"), where,
                f"palettize granularity {granularity}")
        P.check(0 <= c.get("outlier_fraction", 0) <= 0.05, where, "outlier_fraction out of 0…0.05")
    if mode == "linear":
        P.check(c.get("bits") == 8, where, "linear bits must be 8")
        P.check(granularity in ("per_tensor", "per_channel"), where,
                f"linear granularity {granularity}")
    rows, _ = rows_columns(tensor["shape"])
    group = c.get("group_size")
    uneven = group is not None and rows % group != 0
    P.check(tensor["last_group_rows"] == (rows % group if uneven else None), where,
            f"last_group_rows {tensor['last_group_rows']}, {rows} rows in groups of {group} "
            f"give {rows % group if uneven else None}")


# ---------------------------------------------------------------------------------------
# Index packing: one little-endian bit stream, least significant bit first.

def unpack_indices(raw, count, bits, where, offset):
    """Element i is stream bits [i*bits, (i+1)*bits); stream bit j is bit j%8 of byte j//8.
    Reads whole chunks of lcm(bits, 8) bits as little-endian integers."""
    if bits == 8:
        return list(raw[:count])
    per_chunk = 8 // math.gcd(bits, 8)          # elements per chunk
    chunk_bytes = per_chunk * bits // 8
    mask = (1 << bits) - 1
    out = []
    padded = raw + bytes(chunk_bytes)
    for start in range(0, ceil_div(count, per_chunk) * chunk_bytes, chunk_bytes):
        word = int.from_bytes(padded[start:start + chunk_bytes], "little")
        for k in range(per_chunk):
            out.append((word >> (k * bits)) & mask)
    used_bits = count * bits
    if used_bits % 8:
        spare = raw[-1] >> (used_bits % 8)
        P.check(spare == 0, f"{where} byte {offset + len(raw) - 1}",
                f"unused high bits of the last index byte are {spare:#x}, not zero")
    return out[:count]


# ---------------------------------------------------------------------------------------
# Decoding one tensor from its parts, and checking it against its source values.

def nearest_index(lut, value):
    """The nearest LUT entry, ties to the lower index; lut is sorted ascending."""
    p = bisect.bisect_left(lut, value)
    best = None
    for q in (p - 1, p):
        if 0 <= q < len(lut):
            q = bisect.bisect_left(lut, lut[q])     # the lowest index holding that value
            distance = abs(value - lut[q])
            if best is None or distance < best[0] or (distance == best[0] and q < best[1]):
                best = (distance, q)
    return best[1]


def decode_palettized(tensor, parts, w, calibrated, where):
    """Decodes, and checks every rule a reader can see: LUT order, sign of zero, unused
    entries, cluster means, nearest-entry indices, outliers. Returns the decoded values."""
    c = tensor["compression"]
    bits = c["bits"]
    entries = 1 << bits
    rows, columns = rows_columns(tensor["shape"])
    elements = rows * columns
    tiles, tile_of = tile_layout(tensor)
    lut_raw = parts["lut"][1]
    lut_all = decode_float16(lut_raw)
    lut_bits = struct.unpack(f"<{len(lut_raw) // 2}H", lut_raw)
    lut_offset = parts["lut"][0]
    idx_offset, idx_raw = parts["indices"]
    indices = unpack_indices(idx_raw, elements, bits, where, idx_offset)
    FEATURES.add(f"palettize-{bits}bit-{c['granularity']}")
    if tensor["last_group_rows"] is not None:
        FEATURES.add(f"smaller-last-group-{c['granularity']}")
    if c["granularity"] == "per_block" and columns % c["block_size"]:
        FEATURES.add("smaller-last-block")
    FEATURES.add(f"search-{c.get('search', 'standard')}")

    outliers = {}
    if "outlier_indices" in parts:
        o_offset, o_raw = parts["outlier_indices"]
        positions = struct.unpack(f"<{len(o_raw) // 4}I", o_raw)
        v_offset, v_raw = parts["outlier_values"]
        values = decode_float16(v_raw)
        value_bits = struct.unpack(f"<{len(v_raw) // 2}H", v_raw)
        for k, e in enumerate(positions):
            at = f"{where} byte {o_offset + 4 * k}"
            if not P.check(e < elements, at, f"outlier index {e} not below {elements}"):
                continue
            P.check(k == 0 or e > positions[k - 1], at, "outlier indices not strictly ascending")
            P.check(math.isfinite(values[k]), f"{where} byte {v_offset + 2 * k}",
                    "outlier value not finite")
            if w is not None:
                source_bits = struct.unpack("<H", encode_float16([w[e]]))[0]
                P.check(value_bits[k] == source_bits, f"{where} byte {v_offset + 2 * k}",
                        f"outlier value {values[k]!r} (bits {value_bits[k]:#06x}) is not the "
                        f"source's float16 {w[e]!r} (bits {source_bits:#06x}) at element {e}")
            outliers[e] = values[k]
        FEATURES.add("outliers")
        if w is not None and not calibrated:
            # Ours: the n largest |w| (importance 1 without calibration), ties to the lower
            # element. FORMAT.md calls the choice the writer's; we check what it says of ours.
            order = sorted(range(elements), key=lambda e: (-abs(w[e]), e))
            chosen = sorted(order[:len(positions)])
            if len(order) > len(positions) and \
                    abs(w[order[len(positions) - 1]]) == abs(w[order[len(positions)]]):
                FEATURES.add("outlier-magnitude-tie")
            P.check(chosen == list(positions), f"{where} byte {o_offset}",
                    "outliers are not the largest |w| (ties to the lower element)")

    # Per tile: which elements it holds (row-major element numbers).
    members = [[] for _ in range(tiles)]
    for r in range(rows):
        for col in range(columns):
            members[tile_of(r, col)].append(r * columns + col)

    decoded = [0.0] * elements
    for t in range(tiles):
        lut = list(lut_all[t * entries:(t + 1) * entries])
        at = f"{where} byte {lut_offset + t * entries * 2}"
        P.check(all(math.isfinite(v) for v in lut), at, f"LUT of tile {t} not finite")
        P.check(all(lut[i] <= lut[i + 1] for i in range(entries - 1)), at,
                f"LUT of tile {t} not ascending: {lut}")
        negative_zero = [i for i in range(entries) if lut_bits[t * entries + i] == 0x8000]
        P.check(not negative_zero, at, f"LUT of tile {t} holds -0 at entries {negative_zero}")
        for e in members[t]:
            index = indices[e]
            decoded[e] = lut[index] if e not in outliers else outliers[e]
        if w is None:
            continue
        check_lut_against_source(t, lut, [e for e in members[t] if e not in outliers],
                                 w, indices, calibrated, at)
        for e in members[t]:
            expected = nearest_index(lut, w[e])
            if indices[e] != expected:
                P.fail(f"{where} byte {idx_offset + e * bits // 8}",
                       f"index of element {e} (w = {w[e]!r}) is {indices[e]} "
                       f"(= {lut[indices[e]]!r}); the nearest entry of tile {t} is {expected} "
                       f"(= {lut[expected]!r})")
                break
    return decoded


def check_lut_against_source(t, lut, kept, w, indices, calibrated, at):
    """FORMAT.md, "LUT": fewer distinct values than entries give those values, then the
    largest repeated; all outliers give zeros; otherwise each entry is the float16 rounding
    of its cluster's mean (unweighted without --calibration)."""
    entries = len(lut)
    distinct = sorted({w[e] + 0.0 for e in kept})     # +0.0 merges -0 into +0
    if not distinct:
        FEATURES.add("tile-all-outliers")
        P.check(all(v == 0 for v in lut), at, f"tile {t} is all outliers but its LUT is {lut}")
        return
    if len(distinct) < entries:
        FEATURES.add("tile-fewer-values-than-entries")
        expected = distinct + [distinct[-1]] * (entries - len(distinct))
        P.check(lut == expected, at, f"tile {t} has {len(distinct)} distinct values "
                f"{distinct} but its LUT is {lut}")
        return
    if calibrated:
        return      # the means are weighted by activation energies we do not have
    FEATURES.add("lut-means-checked")
    if not lut_is_partition_means(lut, [w[e] + 0.0 for e in kept]):
        P.fail(at, f"the LUT of tile {t} is not the float16 means of any split of its "
               f"{len(kept)} weights into {entries} runs of consecutive values: {lut}")


SCALE = 2 ** 25     # float16 values and the midpoints between them are multiples of 2^-25


def float16_rounding_interval(value):
    """[low, high] * 2^-25: the reals that round to this float16 (both ends included, so
    that a mean computed in double may round either way at an exact tie)."""
    if value == 0:
        return -1, 1
    bits = struct.unpack("<H", struct.pack("<e", value))[0]
    below = struct.unpack("<e", struct.pack("<H", bits - 1 if value > 0 else bits + 1))[0]
    above_bits = bits + 1 if value > 0 else bits - 1
    if (above_bits & 0x7C00) == 0x7C00:         # past the largest finite float16
        above = value + (value - below)
    else:
        above = struct.unpack("<e", struct.pack("<H", above_bits))[0]
    low, high = sorted(((value + below) / 2, (value + above) / 2))
    return int(low * SCALE), int(high * SCALE)


def lut_is_partition_means(lut, values):
    """FORMAT.md, "LUT": each entry is the float16 rounding of its cluster's mean. A 1-D
    k-means cluster is a run of consecutive values, so the tile's sorted weights must split
    into len(lut) non-empty runs, run i's mean rounding to lut[i]. The bytes give each
    weight's nearest entry, not its cluster (a cluster may end off the midpoint of two
    entries), so we search the splits: for a run starting at s, the ends whose mean rounds
    to the entry form an interval, as the mean grows with the end. Exact integer sums."""
    distinct = sorted(set(values))
    counts = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    sums, sizes = [0], [0]
    for v in distinct:
        sums.append(sums[-1] + int(v * SCALE) * counts[v])
        sizes.append(sizes[-1] + counts[v])
    u = len(distinct)
    starts = {0}
    for entry in lut:
        low, high = float16_rounding_interval(entry)
        ends = set()
        for s in starts:
            first = first_true(s + 1, u + 1,
                               lambda e: sums[e] - sums[s] >= low * (sizes[e] - sizes[s]))
            past = first_true(s + 1, u + 1,
                              lambda e: sums[e] - sums[s] > high * (sizes[e] - sizes[s]))
            ends.update(range(first, past))
        starts = ends
        if not starts:
            return False
    return u in starts


def first_true(lo, hi, predicate):
    """The smallest n in [lo, hi) where the monotone predicate holds; hi if none."""
    while lo < hi:
        mid = (lo + hi) // 2
        if predicate(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def int8_reference(w_rows):
    """FORMAT.md, "Int8": float32 arithmetic from the float16 w, half away from zero."""
    peak = max(abs(v) for row in w_rows for v in row)
    scale = f32(peak / 127) if peak > 0 else 1.0
    if peak == 0:
        FEATURES.add("int8-zeros-scale-1")
    codes = []
    for row in w_rows:
        for v in row:
            q = min(127.0, max(-127.0, f32(v / scale)))
            if abs(q) % 1 == 0.5:
                FEATURES.add("int8-exact-half")
            codes.append(int(math.copysign(math.floor(abs(q) + 0.5), q)))
    return scale, codes


def decode_linear(tensor, parts, w, where):
    c = tensor["compression"]
    rows, columns = rows_columns(tensor["shape"])
    s_offset, s_raw = parts["scales"]
    scales = decode_float32(s_raw)
    v_offset, v_raw = parts["values"]
    codes = struct.unpack(f"<{len(v_raw)}b", v_raw)
    for k, s in enumerate(scales):
        P.check(math.isfinite(s) and s > 0, f"{where} byte {s_offset + 4 * k}",
                f"scale {s!r} not positive and finite")
    if -128 in codes:
        P.fail(f"{where} byte {v_offset + codes.index(-128)}", "int8 value -128")
    FEATURES.add(f"linear-int8-{c['granularity']}")
    decoded = []
    for r in range(rows):
        scale = scales[0] if c["granularity"] == "per_tensor" else scales[r]
        decoded += [f32(code * scale) for code in codes[r * columns:(r + 1) * columns]]
    if w is None:
        return decoded
    if c["granularity"] == "per_tensor":
        groups = [(0, rows)]
    else:
        groups = [(r, r + 1) for r in range(rows)]
    for k, (first, last) in enumerate(groups):
        w_rows = [w[r * columns:(r + 1) * columns] for r in range(first, last)]
        scale, expected = int8_reference(w_rows)
        P.check(scales[k] == scale, f"{where} byte {s_offset + 4 * k}",
                f"scale {scales[k]!r}, max|w|/127 in float32 is {scale!r}")
        got = codes[first * columns:last * columns]
        if got != tuple(expected):
            e = next(i for i in range(len(got)) if got[i] != expected[i])
            P.fail(f"{where} byte {v_offset + first * columns + e}",
                   f"int8 code {got[e]}, w / scale rounded half away from zero is "
                   f"{expected[e]} (w = {w[first * columns + e]!r})")
    return decoded


FLOAT16_MAX = 65504.0


def clamped(values, where):
    """--allow-clamp: values beyond float16's range become +-65,504 on the way to float16."""
    out = [min(FLOAT16_MAX, max(-FLOAT16_MAX, v)) for v in values]
    if out != list(values):
        FEATURES.add("clamped")
        CLAMPED.add(where)
    return out


CLAMPED = set()     # tensors with clamped values, which the warnings must name


def check_kept(tensor, parts, source, precision, where, allow_clamp):
    """A kept tensor is the source converted to the compute precision, bit for bit."""
    offset, raw = parts["values"]
    values = DECODERS[precision](raw)
    bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
    P.check(not bad, f"{where} byte {offset + (bad[0] if bad else 0) * ELEMENT_BYTES[precision]}",
            "kept value not finite")
    if source is None:
        return
    FEATURES.add(f"keep-{precision}-from-{source['dtype']}")
    if any(v == 0 and math.copysign(1, v) < 0 for v in source["values"]):
        FEATURES.add("keep-negative-zero")
    values_in = source["values"]
    if allow_clamp and precision == "float16":
        values_in = clamped(values_in, tensor["name"])
    try:
        expected = ENCODERS[precision](values_in)
    except OverflowError:
        P.fail(where, f"the source holds values beyond {precision}'s range, which the export "
               "should have refused")
        return
    if raw != expected:
        size = ELEMENT_BYTES[precision]
        e = next(i for i in range(0, len(raw), size) if raw[i:i + size] != expected[i:i + size])
        P.fail(f"{where} byte {offset + e}",
               f"kept element {e // size} is {values[e // size]!r}, the source "
               f"{source['values'][e // size]!r} in {precision} is "
               f"{DECODERS[precision](expected[e:e + size])[0]!r}")


def sqnr_db(w, decoded):
    """MANIFEST.md: 10 log10(sum w^2 / sum (w - w^)^2) in double; None when exact."""
    signal = math.fsum(v * v for v in w)
    noise = math.fsum((a - b) * (a - b) for a, b in zip(w, decoded))
    if noise == 0:
        return None
    if signal == 0:
        return -math.inf
    return 10 * math.log10(signal / noise)


# ---------------------------------------------------------------------------------------
# The portable weights.bin.

def read_parts(data, tensor, cursor, where, file_name):
    """Checks a tensor's parts are where the layout puts them (each at the next multiple
    of 64, zero gaps) with the planned kinds, dtypes and sizes. Returns (parts, cursor)."""
    parts = {}
    listed = tensor["parts"]
    for k, part in enumerate(listed):
        at = f"{where} part {k} ({part.get('kind')})"
        P.check(part["file"] == "weights.bin", at, f"file {part['file']!r}")
        offset = align(cursor, 64)
        if not P.check(part["offset"] == offset, at,
                       f"offset {part['offset']}, the layout gives {offset}"):
            offset = part["offset"]
        gap = data[cursor:offset]
        P.check(gap.count(0) == len(gap), f"{file_name} byte {cursor}",
                f"gap before {where} {part['kind']} is not zero")
        end = offset + part["bytes"]
        if not P.check(end <= len(data), at, f"ends at {end}, past the file ({len(data)})"):
            raise Refusal(f"{where}: parts past the end of {file_name}")
        parts[part["kind"]] = (offset, data[offset:end])
        cursor = end
    return parts, cursor


def check_planned_parts(tensor, precision, where):
    planned = planned_parts(tensor, precision)
    listed = [(p["kind"], p["dtype"], p["bytes"]) for p in tensor["parts"]]
    P.check(listed == planned, where, f"parts {listed}, the format gives {planned}")
    P.check(tensor["stored_bytes"] == sum(p["bytes"] for p in tensor["parts"]), where,
            f"stored_bytes {tensor['stored_bytes']} is not the sum of its parts")


def decode_tensor(tensor, parts, source, precision, calibrated, where, allow_clamp=False):
    """Decodes one tensor. With its source, checks every value the docs determine and
    returns (decoded values, SQNR); without, (decoded values, None)."""
    mode = tensor["compression"]["mode"]
    if mode == "keep":
        check_kept(tensor, parts, source, precision, where, allow_clamp)
        return list(DECODERS[precision](parts["values"][1])), None
    w = None
    if source is not None:
        try:
            # Every compressed tensor starts from the float16 conversion of the source.
            values = source["values"]
            if allow_clamp:
                values = clamped(values, tensor["name"])
            w = decode_float16(encode_float16(values))
            if any(v == 0 and math.copysign(1, v) < 0 for v in w):
                FEATURES.add(f"negative-zero-{mode}")
        except OverflowError:
            P.fail(where, "the source holds values beyond float16's range, which the export "
                   "should have refused without --allow-clamp")
    if mode == "linear":
        decoded = decode_linear(tensor, parts, w, where)
    else:
        decoded = decode_palettized(tensor, parts, w, calibrated, where)
    bad = [i for i, v in enumerate(decoded) if not math.isfinite(v)]
    P.check(not bad, where, f"decoded element {bad[0] if bad else 0} is not finite")
    return decoded, (sqnr_db(w, decoded) if w is not None else None)


def read_bundle_weights(folder, manifest, checkpoint, calibrated, allow_clamp, stats):
    data = (folder / "weights.bin").read_bytes()
    name = "weights.bin"
    magic, version, alignment, count, total = struct.unpack_from("<8sIIQQ", data, 0)
    if magic != b"EXWEIGHT":
        raise Refusal(f"{name} byte 0: magic {magic!r}, not b'EXWEIGHT'")
    P.check(version == 1, f"{name} byte 8", f"format version {version}, not 1")
    P.check(alignment == 64, f"{name} byte 12", f"alignment {alignment}, not 64")
    P.check(count == len(manifest["tensors"]), f"{name} byte 16",
            f"{count} tensors, the manifest lists {len(manifest['tensors'])}")
    P.check(total == len(data), f"{name} byte 24", f"total size {total}, the file has {len(data)}")
    P.check(data[32:64] == bytes(32), f"{name} byte 32", "reserved header bytes not zero")
    precision = manifest["compute_precision"]
    cursor = 64
    decoded = {}
    for tensor in manifest["tensors"]:
        where = f"{name} tensor {tensor['name']}"
        check_scheme_keys(tensor, where)
        check_planned_parts(tensor, precision, where)
        parts, cursor = read_parts(data, tensor, cursor, where, name)
        source = checkpoint.get(tensor["name"]) if checkpoint else None
        values, measured = decode_tensor(tensor, parts, source, precision, calibrated, where,
                                         allow_clamp)
        decoded[tensor["name"]] = values
        if source is not None:
            compare_sqnr(tensor, measured, where, stats)
    end = align(cursor, 64)
    P.check(len(data) == end, name, f"file is {len(data)} bytes, the layout ends at {end}")
    P.check(data[cursor:].count(0) == len(data) - cursor, f"{name} byte {cursor}",
            "tail padding is not zero")
    stats["tensors"] += len(manifest["tensors"])
    return decoded, data


def compare_sqnr(tensor, measured, where, stats):
    claimed = tensor["sqnr_db"]
    if tensor["compression"]["mode"] != "keep" and measured is None:
        FEATURES.add("compressed-tensor-exact")
    if tensor["compression"]["mode"] == "keep" or measured is None:
        P.check(claimed is None, where, f"sqnr_db {claimed}, but the tensor is "
                f"{'kept' if tensor['compression']['mode'] == 'keep' else 'exact'}: null")
        return
    if not P.check(claimed is not None, where, f"sqnr_db null, measured {measured:.6f} dB"):
        return
    stats["sqnr_compared"] += 1
    stats["sqnr_max_diff"] = max(stats["sqnr_max_diff"], abs(measured - claimed))
    rounded = round2(measured)
    # A measurement within 1e-9 of a rounding tie may round either way: summation order.
    near_tie = abs(abs(measured * 100) % 1 - 0.5) < 1e-7
    P.check(rounded == claimed or (near_tie and abs(measured - claimed) <= 0.005 + 1e-9), where,
            f"sqnr_db {claimed}, measured {measured!r} dB (two decimals: {rounded})")


# ---------------------------------------------------------------------------------------
# The model the manifest and graph describe, from the checkpoint's config.json.

REMAPPED_TYPES = {"qwen2_5": "qwen2", "gemma3": "gemma3_text"}
BIAS_ALWAYS = {"qwen2"}                 # q/k/v always biased, whatever attention_bias says
BIAS_NEVER = {"mistral", "mixtral", "phi3"}  # never biased, whatever attention_bias says
QK_NORM = {"qwen3", "gemma3_text"}
# FORMAT.md, graph.json `attention.*`: the defaults of an absent key, per family.
KV_HEADS_DEFAULT = {"qwen2": 32, "qwen3": 32, "mistral": 8, "mixtral": 8, "qwen3_moe": 4}
HEAD_DIM_DEFAULT = {"qwen3": 128}
PREFILL_CHUNK = 128  # tokens of a prefill call in the working-memory figures, at most
SWITCHED_WINDOW = {"qwen2", "qwen3", "qwen3_moe"}  # slide only with use_sliding_window (false when absent)
SWITCHED_EVERY_LAYER = {"qwen3_moe"}    # ... then every layer (max_window_layers not read)
# sliding_window on every layer, and the window when the key is absent.
EVERY_LAYER_WINDOW = {"mistral": 4096, "mixtral": None, "phi3": None}
# rope.theta (when the config gives neither rope_theta nor rope_parameters) and rms_norm_eps
# when absent; 10,000 and 1e-6 for the other families.
THETA_DEFAULT = {"mixtral": 1e6}
EPS_DEFAULT = {"mixtral": 1e-5, "phi3": 1e-5}


def scaling_type(scaling):
    """The rotary scaling a config's rope_scaling names; `default` is none (FORMAT.md)."""
    kind = (scaling.get("rope_type") or scaling.get("type")) if scaling else None
    return None if kind == "default" else kind


def model_from_config(config):
    family = REMAPPED_TYPES.get(config["model_type"], config["model_type"])
    heads = config["num_attention_heads"]
    scaling = config.get("rope_scaling")
    return {
        "family": family,
        "layers": config["num_hidden_layers"],
        "hidden": config["hidden_size"],
        "intermediate": config["intermediate_size"],
        "vocab": config["vocab_size"],
        "heads": heads,
        "kv_heads": (config.get("num_key_value_heads")
                     or ("num_key_value_heads" not in config and KV_HEADS_DEFAULT.get(family)) or heads),
        "head_dim": config.get("head_dim") or HEAD_DIM_DEFAULT.get(family) or config["hidden_size"] // heads,
        "bias": family in BIAS_ALWAYS or (family not in BIAS_NEVER and config.get("attention_bias", False)),
        "qk_norm": family in QK_NORM,
        "tie": config.get("tie_word_embeddings"),
        "theta": (config["rope_theta"] if config.get("rope_theta") is not None
                  else None if "rope_parameters" in config else THETA_DEFAULT.get(family, 10000.0)),
        "scaling_type": scaling_type(scaling),
        "scaling_factor": scaling.get("factor") if scaling_type(scaling) else None,
        "eps": (config["rms_norm_eps"] if config.get("rms_norm_eps") is not None
                else EPS_DEFAULT.get(family, 1e-6)),
        "sliding_window": expected_sliding_window(config, family),
        "max_positions": config["max_position_embeddings"],
    }


def expected_sliding_window(config, family):
    """FORMAT.md, graph.json `attention.sliding_window` (configs sliding some layers only are
    refused, so never read here)."""
    layers = config["num_hidden_layers"]
    if family in EVERY_LAYER_WINDOW:
        return config.get("sliding_window", EVERY_LAYER_WINDOW[family])
    if family in SWITCHED_WINDOW:
        if not config.get("use_sliding_window", False):
            return None
        window = config.get("sliding_window", 4096)
        if window is None or family in SWITCHED_EVERY_LAYER:
            return window
        if "layer_types" in config:
            sliding = sum(t == "sliding_attention" for t in config["layer_types"])
            return window if sliding == layers else None
        return window if config.get("max_window_layers", 28) == 0 else None
    window = config.get("sliding_window")
    if window is None:
        return None
    if "layer_types" in config:
        sliding = sum(t == "sliding_attention" for t in config["layer_types"])
        return window if sliding == layers else None
    if config.get("use_sliding_window", True) and config.get("max_window_layers", 0) == 0:
        return window
    return None


def expected_tensors(model):
    """[(name, shape, role, layer)] in the registry's order (FORMAT.md, "weights.bin")."""
    hidden, hd = model["hidden"], model["head_dim"]
    q_rows, kv_rows = model["heads"] * hd, model["kv_heads"] * hd
    out = [("model.embed_tokens.weight", [model["vocab"], hidden], "embedding", None)]
    for i in range(model["layers"]):
        p = f"model.layers.{i}."
        out.append((p + "input_layernorm.weight", [hidden], "norm", i))
        for proj, rows in (("q", q_rows), ("k", kv_rows), ("v", kv_rows)):
            out.append((p + f"self_attn.{proj}_proj.weight", [rows, hidden], "attention", i))
            if model["bias"]:
                out.append((p + f"self_attn.{proj}_proj.bias", [rows], "attention", i))
        out.append((p + "self_attn.o_proj.weight", [hidden, q_rows], "attention", i))
        if model["qk_norm"]:
            out.append((p + "self_attn.q_norm.weight", [hd], "norm", i))
            out.append((p + "self_attn.k_norm.weight", [hd], "norm", i))
        out.append((p + "post_attention_layernorm.weight", [hidden], "norm", i))
        out.append((p + "mlp.gate_proj.weight", [model["intermediate"], hidden], "mlp", i))
        out.append((p + "mlp.up_proj.weight", [model["intermediate"], hidden], "mlp", i))
        out.append((p + "mlp.down_proj.weight", [hidden, model["intermediate"]], "mlp", i))
    out.append(("model.norm.weight", [hidden], "norm", None))
    if not model["tie"]:
        out.append(("lm_head.weight", [model["vocab"], hidden], "head", None))
    return out


def check_graph(graph, manifest, model):
    check_schema(graph, GRAPH_SCHEMA, "graph.json")
    where = "graph.json"
    context = manifest["context_length"]
    expected = {
        "architecture": model["family"], "layers": model["layers"],
        "hidden_size": model["hidden"], "intermediate_size": model["intermediate"],
        "vocab_size": model["vocab"], "context_length": context,
        "compute_precision": manifest["compute_precision"],
        "attention.heads": model["heads"], "attention.kv_heads": model["kv_heads"],
        "attention.head_dim": model["head_dim"], "attention.qkv_bias": model["bias"],
        "attention.qk_norm": model["qk_norm"], "attention.sliding_window": model["sliding_window"],
        "rope.scaling_type": model["scaling_type"], "rope.scaling_factor": model["scaling_factor"],
        "shapes.input_ids": [1, context], "shapes.logits": [1, model["vocab"]],
        "shapes.kv_cache_per_layer": [model["kv_heads"], context, model["head_dim"]],
        "shapes.causal_mask": [context, context],
    }
    factor = graph["rope"]["scaling_factor"]
    if graph["rope"]["scaling_type"] == "linear":
        # p' = p / scaling_factor: a null, zero or negative factor gives linear scaling no meaning.
        P.check(isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 0, where,
                f"rope.scaling_type is 'linear' but rope.scaling_factor is {factor!r}")
    for optional in ("theta", "eps", "tie"):
        if model[optional] is not None:
            key = {"theta": "rope.theta", "eps": "rms_norm_eps", "tie": "tie_word_embeddings"}
            expected[key[optional]] = model[optional]
    for path, value in expected.items():
        found = lookup(graph, path)
        P.check(same(found, value), where,
                f"{path} is {found!r}, config.json and the manifest give {value!r}")
    has_head = any(t["name"] == "lm_head.weight" for t in manifest["tensors"])
    P.check(graph.get("tie_word_embeddings") == (not has_head), where,
            "tie_word_embeddings disagrees with the presence of lm_head.weight")


def same(a, b):
    """JSON equality that does not take true for 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def lookup(value, dotted):
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return "<missing>"
        value = value[key]
    return value


# ---------------------------------------------------------------------------------------
# Which scheme each tensor gets (FORMAT.md, "Compression configs").

def glob_regex(pattern):
    """`*` any run (dots included), `?` one character, `{a,b}` alternatives."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "{":
            end = pattern.index("}", i)
            out.append("(?:" + "|".join(re.escape(a) for a in pattern[i + 1:end].split(",")) + ")")
            i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def rule_matches(rule, name):
    if "match" in rule:
        return re.fullmatch(glob_regex(rule["match"]), name) is not None
    return re.fullmatch(rule["regex"], name) is not None


def scheme_of(rule, palette_search):
    mode = rule["mode"]
    out = {"mode": mode, "uneven_groups": rule.get("uneven_groups", "smaller_last_group")}
    if mode == "linear":
        out.update(bits=8, granularity=rule["granularity"])
    if mode == "palettize":
        out.update(bits=rule["bits"], granularity=rule["granularity"])
        for key in ("group_size", "block_size", "outlier_fraction"):
            if key in rule:
                out[key] = rule[key]
        search = palette_search or rule.get("search", "standard")
        if search != "standard":
            out["search"] = search
    return out


def expected_scheme(name, shape, config, manifest, palette_search):
    """(compression, rule label) that the config gives this tensor."""
    if name == "model.embed_tokens.weight" and manifest["platform"] == "iOS":
        if manifest["compression"]["ios_embedding_int8"]:
            return ({"mode": "linear", "bits": 8, "granularity": "per_tensor",
                     "uneven_groups": "smaller_last_group"}, "ios-embedding")
        return {"mode": "keep", "uneven_groups": "smaller_last_group"}, "ios-embedding-kept"
    if config is None:         # --compression none
        return {"mode": "keep", "uneven_groups": "smaller_last_group"}, "default"
    for n, rule in enumerate(config.get("rules", []), start=1):
        if rule_matches(rule, name):
            label = f"rule {n} ({rule.get('match', rule.get('regex'))})"
            break
    else:
        rule, label = config["default"], "default"
    scheme = scheme_of(rule, palette_search)
    if len(shape) == 1:
        scheme = {"mode": "keep", "uneven_groups": scheme["uneven_groups"]}
    return scheme, label


def load_compression_config(name, explicit):
    if explicit:
        return json.loads(Path(explicit).read_text())
    if name == "none":
        return None
    path = REPO / "Presets" / "compression" / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    return "unknown"


# ---------------------------------------------------------------------------------------
# The manifest of a bundle.

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "generation_config.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "added_tokens.json", "chat_template.jinja"]


def crc32_hex(data):
    return f"{zlib.crc32(data):08x}"


def check_files(folder, manifest, expected_paths):
    """Every listed file's size and CRC-32, sorted paths, nothing unlisted on disk."""
    listed = [f["path"] for f in manifest["files"]]
    P.check(listed == sorted(listed, key=lambda p: p.encode()), "manifest.json files",
            "not sorted by path")
    P.check(sorted(listed) == sorted(expected_paths), "manifest.json files",
            f"lists {sorted(listed)}, the format gives {sorted(expected_paths)}")
    for entry in manifest["files"]:
        path = folder / entry["path"]
        where = f"{entry['path']}"
        if ".." in Path(entry["path"]).parts or Path(entry["path"]).is_absolute():
            P.fail(where, "path outside the artifact")
            continue
        if not P.check(path.is_file(), where, "listed but missing"):
            continue
        data = path.read_bytes()
        P.check(re.fullmatch(r"[0-9a-f]{8}", entry["crc32"]) is not None, where,
                f"crc32 {entry['crc32']!r} is not 8 lowercase hex digits")
        P.check(len(data) == entry["bytes"], where,
                f"{len(data)} bytes, the manifest says {entry['bytes']}")
        P.check(crc32_hex(data) == entry["crc32"], where,
                f"CRC-32 is {crc32_hex(data)}, the manifest says {entry['crc32']}")
    on_disk = []
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        if any(part.startswith(".partial-") for part in relative.parts):
            continue
        if path.is_file() or path.is_symlink():
            on_disk.append(relative.as_posix())
    for extra in sorted(set(on_disk) - set(listed) - {"manifest.json"}):
        P.fail(extra, "file in the artifact that the manifest does not list")
    return sum(f["bytes"] for f in manifest["files"])


def check_tokenizer(folder, manifest, checkpoint_dir, synthetic):
    tokenizer = manifest["tokenizer"]
    if synthetic:
        FEATURES.add("synthetic")
        P.check(tokenizer is None, "manifest.json tokenizer", "not null for --synthetic weights")
        return []
    if not P.check(tokenizer is not None, "manifest.json tokenizer",
                   "null for an export from a checkpoint"):
        return []
    present = [f for f in TOKENIZER_FILES if (checkpoint_dir / f).is_file()] \
        if checkpoint_dir else [p.split("/", 1)[1] for p in tokenizer["files"]]
    P.check(tokenizer["files"] == [f"tokenizer/{f}" for f in present], "manifest.json tokenizer",
            f"files {tokenizer['files']}, the checkpoint holds {present} (in the docs' order)")
    if present:
        FEATURES.add("tokenizer-files")
    for name in present:
        copied = folder / "tokenizer" / name
        if checkpoint_dir and copied.is_file():
            P.check(copied.read_bytes() == (checkpoint_dir / name).read_bytes(),
                    f"tokenizer/{name}", "not the checkpoint's file byte for byte")
    marker = reasoning_marker(folder / "tokenizer", present)
    if marker:
        FEATURES.add(f"reasoning-marker-{marker}")
    P.check(tokenizer["reasoning_marker"] == marker, "manifest.json tokenizer",
            f"reasoning_marker {tokenizer['reasoning_marker']!r}, the tokenizer files give "
            f"{marker!r}")
    P.check(tokenizer["default_response_tokens"] ==
            (2048 if tokenizer["reasoning_marker"] else 512), "manifest.json tokenizer",
            "default_response_tokens is not 2048 with a reasoning marker, 512 without")
    return [f"tokenizer/{f}" for f in present]


REASONING_MARKERS = ["<think>", "<|reasoning_start|>"]
VOCABULARY_FILES = ["tokenizer.json", "tokenizer_config.json", "added_tokens.json", "vocab.json"]


def json_strings(value):
    """Every string of a JSON document, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from json_strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from json_strings(item)


def reasoning_marker(folder, present):
    """MANIFEST.md: the first marker, in the first of the vocabulary files (in the tokenizer
    list's order), that the file holds as a whole JSON string."""
    for name in [n for n in present if n in VOCABULARY_FILES]:
        try:
            strings = set(json_strings(json.loads((folder / name).read_text())))
        except (ValueError, OSError):
            continue
        for marker in REASONING_MARKERS:
            if marker in strings:
                return marker
    return None


def check_manifest_model(manifest, model, config, checkpoint_files, args):
    m = manifest["model"]
    where = "manifest.json model"
    P.check(m["model_type"] == config["model_type"], where, f"model_type {m['model_type']!r}")
    P.check(m["registry_type"] == model["family"], where, f"registry_type {m['registry_type']!r}")
    P.check(m["architectures"] == config.get("architectures", []), where, "architectures")
    P.check(m["experimental"] == (m["preset"] is None), where,
            "experimental is not the absence of a preset")
    P.check(manifest["tool"]["name"] == "exporter", where, "tool.name")
    if args.synthetic:
        P.check(m["weights"] == "synthetic" and m["source"]["files"] == [], where,
                "synthetic weights not marked synthetic, or with source files")
        return
    P.check(m["weights"] == "checkpoint", where, f"weights {m['weights']!r}")
    P.check(m["source"]["kind"] == "directory", where, f"source.kind {m['source']['kind']!r}")
    names = sorted(p.name for p in checkpoint_files)
    listed = sorted(f["name"] for f in m["source"]["files"])
    P.check(listed == names, where, f"source.files {listed}, the checkpoint has {names}")
    for entry in m["source"]["files"]:
        path = Path(args.against) / entry["name"]
        if path.is_file():
            P.check(entry["bytes"] == path.stat().st_size, where,
                    f"source file {entry['name']} is {path.stat().st_size} bytes, not "
                    f"{entry['bytes']}")
        fingerprint = entry.get("fingerprint", "")
        P.check(re.fullmatch(rf"{entry['bytes']}:[0-9a-f]{{8}}", fingerprint) is not None,
                where, f"fingerprint {fingerprint!r} is not '<size>:<crc32>'")


def check_manifest_sums(manifest, model, weights_size):
    """Every derived figure MANIFEST.md defines and that the artifact lets us recompute."""
    where = "manifest.json"
    tensors = manifest["tensors"]
    parameters = sum(math.prod(t["shape"]) for t in tensors)
    P.check(manifest["parameters"] == parameters, where,
            f"parameters {manifest['parameters']}, the tensors hold {parameters}")
    precision = manifest["compute_precision"]
    context = manifest["context_length"]
    P.check(context <= model["max_positions"], where, "context_length past max_position_embeddings")
    kv_bytes = (2 * model["layers"] * model["kv_heads"] * model["head_dim"] * context
                * ELEMENT_BYTES[precision])
    expected_kv = {"bytes": kv_bytes, "layers": model["layers"], "kv_heads": model["kv_heads"],
                   "head_dim": model["head_dim"], "context_length": context, "dtype": precision}
    P.check(manifest["kv_cache"] == expected_kv, where,
            f"kv_cache {manifest['kv_cache']}, expected {expected_kv}")
    chunk = min(PREFILL_CHUNK, context)  # MANIFEST.md: a call takes at most the context
    working = (4 * chunk * model["hidden"] * 4 + 2 * chunk * model["intermediate"] * 4
               + model["heads"] * chunk * context * 4 + model["vocab"] * 4)
    expected_memory = {"weights_bytes": weights_size, "kv_cache_bytes": kv_bytes,
                       "working_bytes": working, "total_bytes": weights_size + kv_bytes + working,
                       "prefill_chunk": chunk}
    P.check(manifest["memory"] == expected_memory, where,
            f"memory {manifest['memory']}, expected {expected_memory}")
    sizes = manifest["sizes"]
    P.check(sizes["estimated_bundle_bytes"] == weights_size, where,
            f"sizes.estimated_bundle_bytes {sizes['estimated_bundle_bytes']}, weights.bin is "
            f"{weights_size}")
    bits = round2(8 * weights_size / parameters)
    P.check(sizes["bits_per_weight"] == bits, where,
            f"sizes.bits_per_weight {sizes['bits_per_weight']}, 8 x {weights_size} / "
            f"{parameters} is {bits}")
    roles = {}
    for t in tensors:
        entry = roles.setdefault(t["role"], {"parameters": 0, "bytes": 0})
        entry["parameters"] += math.prod(t["shape"])
        entry["bytes"] += t["stored_bytes"]
    for entry in roles.values():
        entry["bits_per_weight"] = round2(8 * entry["bytes"] / entry["parameters"])
    P.check(sizes["by_role"] == roles, where, f"sizes.by_role {sizes['by_role']}, expected {roles}")


def check_tensor_list(manifest, model, checkpoint, config, args):
    """Names, order, shapes, roles and layers against the registry's layout and the
    checkpoint; each scheme and rule label against the compression config."""
    expected = expected_tensors(model)
    names = [t["name"] for t in manifest["tensors"]]
    P.check(names == [e[0] for e in expected], "manifest.json tensors",
            "names or order differ from the registry's layout: "
            f"{[n for n in names if n not in {e[0] for e in expected}]} unexpected, "
            f"{[e[0] for e in expected if e[0] not in names]} missing")
    if checkpoint is not None:
        unused = sorted(set(checkpoint) - set(names) - {"lm_head.weight"})
        P.check(not unused, "manifest.json tensors", f"checkpoint tensors not exported: {unused}")
    for tensor, (name, shape, role, layer) in zip(manifest["tensors"], expected):
        where = f"manifest.json tensor {tensor['name']}"
        if tensor["name"] != name:
            continue
        P.check(tensor["shape"] == shape, where, f"shape {tensor['shape']}, expected {shape}")
        P.check(tensor["role"] == role, where, f"role {tensor['role']}, expected {role}")
        P.check(tensor["layer"] == layer, where, f"layer {tensor['layer']}, expected {layer}")
        if checkpoint is not None and name in checkpoint:
            P.check(checkpoint[name]["shape"] == shape, where,
                    f"the checkpoint's shape is {checkpoint[name]['shape']}")
        if config != "unknown":
            scheme, label = expected_scheme(name, shape, config, manifest, args.palette_search)
            P.check(tensor["compression"] == scheme, where,
                    f"compression {tensor['compression']}, the config gives {scheme}")
            P.check(tensor["rule"] == label, where, f"rule {tensor['rule']!r}, expected {label!r}")


def check_warnings(manifest, config):
    """MANIFEST.md `warnings`: uneven last groups, rules that matched nothing (but
    optional ones). We check each is named, not the wording."""
    text = "\n".join(manifest["warnings"])
    for t in manifest["tensors"]:
        if t["last_group_rows"] is not None:
            P.check(f"'{t['name']}'" in text, "manifest.json warnings",
                    f"no warning names {t['name']}, whose last group is smaller")
    if config in (None, "unknown"):
        return
    names = [t["name"] for t in manifest["tensors"]]
    for rule in config.get("rules", []):
        if rule.get("optional") or any(rule_matches(rule, n) for n in names):
            continue
        pattern = rule.get("match", rule.get("regex"))
        P.check(pattern in text, "manifest.json warnings",
                f"no warning for rule {pattern!r}, which matches no tensor")
        FEATURES.add("rule-matching-nothing")


def check_calibration(manifest, args):
    calibration = manifest["compression"].get("calibration")
    if not args.calibration:
        P.check(calibration is None, "manifest.json compression", "calibration without --calibration")
        return
    if not P.check(calibration is not None, "manifest.json compression",
                   "no calibration section, the export had --calibration"):
        return
    ids = [int(v) for v in re.split(r"[\s,]+", Path(args.calibration).read_text().strip()) if v]
    joined = ",".join(str(i) for i in ids).encode()
    P.check(calibration["tokens"] == len(ids), "manifest.json compression.calibration",
            f"tokens {calibration['tokens']}, the file holds {len(ids)}")
    P.check(calibration["tokens_crc32"] == crc32_hex(joined), "manifest.json compression.calibration",
            f"tokens_crc32 {calibration['tokens_crc32']}, CRC-32 of the ids written "
            f"comma-separated is {crc32_hex(joined)}")


def read_manifest(folder):
    path = folder / "manifest.json"
    raw = path.read_bytes()
    head = load_json_bytes(raw, "manifest.json")
    # MANIFEST.md: decode `schema` first and refuse one we do not know, naming both.
    if head.get("schema") != "exporter.manifest/1":
        raise Refusal(f"manifest.json: schema {head.get('schema')!r}, this reader knows "
                      "'exporter.manifest/1'")
    manifest = read_our_json(path)
    check_schema(manifest, MANIFEST_SCHEMA, "manifest.json")
    return manifest, raw


def check_bundle(folder, args, stats):
    """Everything of a portable bundle; returns (manifest, decoded tensors, raw manifest)."""
    manifest, manifest_raw = read_manifest(folder)
    P.check(manifest["kind"] == "bundle", "manifest.json", f"kind {manifest['kind']!r}, not bundle")
    P.check(folder.name == manifest["model"]["name"] + ".aimodel", "manifest.json model.name",
            f"{manifest['model']['name']!r}, but the bundle is named {folder.name!r}")
    P.check(manifest["compiled"] is None and manifest["verdicts"] == []
            and manifest["conversion"] is None, "manifest.json",
            "a bundle has compiled null, verdicts empty and conversion null")
    key = manifest["build_key"]
    P.check(isinstance(key, str) and re.fullmatch(r"[0-9a-f]{64}", key) is not None,
            "manifest.json build_key", f"{key!r} is not 64 hex digits")
    checkpoint_dir = Path(args.against) if args.against else None
    config = json.loads((checkpoint_dir / "config.json").read_text()) if checkpoint_dir else None
    checkpoint, checkpoint_files = (read_checkpoint(checkpoint_dir) if checkpoint_dir
                                    else (None, []))
    graph = read_our_json(folder / "graph.json")
    model = model_from_config(config) if config else model_from_graph(graph)
    check_graph(graph, manifest, model)
    if args.context:
        P.check(manifest["context_length"] == args.context, "manifest.json",
                f"context_length {manifest['context_length']}, the export asked {args.context}")
    if config:
        check_manifest_model(manifest, model, config, checkpoint_files, args)
    compression = load_compression_config(manifest["compression"]["config"],
                                          args.compression_config)
    if compression not in ("unknown", None):
        P.check(manifest["compression"]["config"] == compression.get("name"), "manifest.json",
                f"compression.config {manifest['compression']['config']!r}, the config is named "
                f"{compression.get('name')!r}")
    check_tensor_list(manifest, model, checkpoint, compression, args)
    check_calibration(manifest, args)
    tokenizer_paths = check_tokenizer(folder, manifest, checkpoint_dir, args.synthetic)
    if checkpoint_dir:
        P.check((folder / "config.json").is_file() and (folder / "config.json").read_bytes()
                == (checkpoint_dir / "config.json").read_bytes(), "config.json",
                "not the checkpoint's, byte for byte")
    total = check_files(folder, manifest, ["config.json", "graph.json", "weights.bin"]
                        + tokenizer_paths)
    P.check(manifest["sizes"]["bundle_bytes"] == total, "manifest.json",
            f"sizes.bundle_bytes {manifest['sizes']['bundle_bytes']}, the files hold {total}")
    calibrated = "calibration" in manifest["compression"]
    FEATURES.update({f"platform-{manifest['platform']}", f"precision-{manifest['compute_precision']}"})
    if calibrated:
        FEATURES.add("calibration")
    if checkpoint:
        FEATURES.update(f"source-{t['dtype']}" for t in checkpoint.values())
    if graph["attention"]["sliding_window"] is not None:
        FEATURES.add("sliding-window")
    if graph["rope"]["scaling_type"] == "linear":
        FEATURES.add("rope-linear-scaling")
    FEATURES.add("tied-embeddings" if graph["tie_word_embeddings"] else "untied-head")
    check_warnings(manifest, compression)
    decoded, data = read_bundle_weights(folder, manifest, checkpoint, calibrated,
                                        args.allow_clamp, stats)
    text = "\n".join(manifest["warnings"])
    for name in sorted(CLAMPED):
        P.check(f"'{name}'" in text and "clamp" in text, "manifest.json warnings",
                f"no warning says values of {name} were clamped")
    check_manifest_sums(manifest, model, len(data))
    return manifest, decoded, manifest_raw, graph


def model_from_graph(graph):
    """Without config.json, the graph is the description (fewer cross-checks)."""
    a = graph["attention"]
    return {"family": graph["architecture"], "layers": graph["layers"],
            "hidden": graph["hidden_size"], "intermediate": graph["intermediate_size"],
            "vocab": graph["vocab_size"], "heads": a["heads"], "kv_heads": a["kv_heads"],
            "head_dim": a["head_dim"], "bias": a["qkv_bias"], "qk_norm": a["qk_norm"],
            "tie": graph["tie_word_embeddings"], "theta": graph["rope"]["theta"],
            "scaling_type": graph["rope"]["scaling_type"],
            "scaling_factor": graph["rope"]["scaling_factor"], "eps": graph["rms_norm_eps"],
            "sliding_window": a["sliding_window"], "max_positions": graph["context_length"]}


# ---------------------------------------------------------------------------------------
# The compiled artifact (FORMAT.md, "The compiled artifact").

def device_entry(compiled, extra_tables):
    """The device table entry compiled for: Presets/devices.json, extended by --devices."""
    entries = {}
    for path in [REPO / "Presets" / "devices.json"] + [Path(p) for p in extra_tables]:
        for device in json.loads(Path(path).read_text())["devices"]:
            plain = {k: (v["value"] if isinstance(v, dict) and "value" in v else v)
                     for k, v in device.items()}
            entries[(plain["id"].lower(), plain["platform"])] = plain
    return entries.get((compiled["architecture"].lower(), compiled["platform"]))


def part_extent(parts):
    """Bytes from a page boundary to the end of these parts laid out at 64-byte steps."""
    cursor = 0
    for size in parts:
        cursor = align(cursor, 64) + size
    return cursor


def region_groups(manifest, tie):
    """The tensors of the embedding region, of each layer, and of the head region."""
    tensors = manifest["tensors"]
    first = next(i for i, t in enumerate(tensors) if t["layer"] is not None)
    last = max(i for i, t in enumerate(tensors) if t["layer"] is not None)
    layers = {}
    for t in tensors[first:last + 1]:
        layers.setdefault(t["layer"], []).append(t)
    head = list(tensors[last + 1:])
    if tie:
        head.append(tensors[0])          # the head's copy of the token embedding
    return tensors[:first], layers, head


def planned_regions(manifest, graph, page, budget, slot):
    """FORMAT.md "Regions": embedding, greedy packs of layers, head; with their figures."""
    hidden, inter = graph["hidden_size"], graph["intermediate_size"]
    heads, context, vocab = graph["attention"]["heads"], graph["context_length"], graph["vocab_size"]
    c = min(PREFILL_CHUNK, context)
    layer_working = 4 * c * hidden * 4 + 2 * c * inter * 4 + heads * c * context * 4
    leading, layers, head = region_groups(manifest, graph["tie_word_embeddings"])

    def padded(tensors):
        return align(part_extent([p["bytes"] for t in tensors for p in t["parts"]]), page)

    def layer_footprint(numbers):
        tensors = [t for n in numbers for t in layers[n]]
        return padded(tensors) + 2 * slot * len(numbers) + layer_working

    regions = [{"kind": "embedding", "tensors": leading, "layers": [],
                "working": c * hidden * 4}]
    current = []
    for n in sorted(layers):
        if current and layer_footprint(current + [n]) > budget:
            regions.append({"kind": "layers", "tensors": [], "layers": current})
            current = []
        current.append(n)
    regions.append({"kind": "layers", "tensors": [], "layers": current})
    regions.append({"kind": "head", "tensors": head, "layers": [],
                    "working": c * hidden * 4 + vocab * 4})
    for region in regions:
        if region["kind"] == "layers":
            region["tensors"] = [t for n in region["layers"] for t in layers[n]]
            region["working"] = layer_working
        region["bytes"] = padded(region["tensors"])
        region["kv"] = 2 * slot * len(region["layers"])
    return regions


def check_static(folder, graph, manifest, compiled):
    static = read_our_json(folder / "static.json")
    check_schema(static, STATIC_SCHEMA, "static.json")
    context, hd = graph["context_length"], graph["attention"]["head_dim"]
    kv_heads, layers = graph["attention"]["kv_heads"], graph["layers"]
    precision = manifest["compute_precision"]
    page = compiled["page_size"]
    buffer = kv_heads * context * hd * ELEMENT_BYTES[precision]
    slot = align(buffer, page)
    expected = {
        "schema": "exporter.static/1", "context_length": context,
        "causal_mask": {"shape": [context, context], "rule": "0 where key <= query, -inf elsewhere",
                        "dtype": precision},
        "rope": {"theta": graph["rope"]["theta"], "scaling_type": graph["rope"]["scaling_type"],
                 "scaling_factor": graph["rope"]["scaling_factor"], "shape": [context, hd // 2],
                 "dtype": "float32", "cos": "tables/rope_cos.f32", "sin": "tables/rope_sin.f32"},
        "kv_cache": {"dtype": precision, "buffer_shape": [kv_heads, context, hd],
                     "buffer_bytes": buffer, "slot_bytes": slot, "alignment": page,
                     "total_bytes": 2 * layers * slot,
                     "layers": [{"layer": n, "k_offset": 2 * n * slot,
                                 "v_offset": (2 * n + 1) * slot} for n in range(layers)]},
    }
    for key in expected:
        P.check(static.get(key) == expected[key], "static.json",
                f"{key} is {static.get(key)}, expected {expected[key]}")
    return static, slot


def check_rope_tables(folder, graph, stats):
    """cos/sin(p' f_i), f_i = 1 / theta^(2i / head_dim), p' = p or p / factor (linear), in
    double, rounded to float32. Tolerance: 1 float32 ulp (a libm's cos and pow may differ in
    the last bit of a double, which can move the float32 rounding); we count exact ones."""
    context, hd = graph["context_length"], graph["attention"]["head_dim"]
    rope = graph["rope"]
    factor = rope["scaling_factor"] if rope["scaling_type"] == "linear" else None
    half = hd // 2
    frequencies = [1.0 / math.pow(rope["theta"], (2 * i) / hd) for i in range(half)]
    for name, function in (("rope_cos.f32", math.cos), ("rope_sin.f32", math.sin)):
        raw = (folder / "tables" / name).read_bytes()
        if not P.check(len(raw) == context * half * 4, f"tables/{name}",
                       f"{len(raw)} bytes, [context, head_dim/2] float32 is {context * half * 4}"):
            continue
        stored = struct.unpack(f"<{context * half}I", raw)
        for p in range(context):
            position = p / factor if factor else float(p)
            expected = struct.unpack(f"<{half}I", struct.pack(
                f"<{half}f", *(function(position * f) for f in frequencies)))
            for i in range(half):
                got = stored[p * half + i]
                stats["rope_values"] += 1
                if got == expected[i]:
                    continue
                ulps = abs(float_order(got) - float_order(expected[i]))
                stats["rope_ulp_1"] += ulps == 1
                if ulps > 1:
                    P.fail(f"tables/{name} byte {4 * (p * half + i)}",
                           f"row {p} column {i}: {struct.unpack('<f', struct.pack('<I', got))[0]!r}"
                           f", recomputed {struct.unpack('<f', struct.pack('<I', expected[i]))[0]!r}"
                           f" ({ulps} ulps)")
                    return


def float_order(bits):
    """float32 bits as integers whose order is the floats' (for ulp distances)."""
    return bits if bits < 0x80000000 else 0x80000000 - bits


def check_compiled_weights(folder, manifest, bundle_manifest, bundle_decoded, regions, page):
    data = (folder / "weights.bin").read_bytes()
    name = "weights.bin"
    magic, version, page_size, part_align, count, total = struct.unpack_from("<8sIIIIQ", data, 0)
    if magic != b"EXREGION":
        raise Refusal(f"compiled {name} byte 0: magic {magic!r}, not b'EXREGION'")
    P.check(version == 1, f"{name} byte 8", f"format version {version}, not 1")
    P.check(page_size == page, f"{name} byte 12", f"page size {page_size}, the device's is {page}")
    P.check(part_align == 64, f"{name} byte 16", f"part alignment {part_align}, not 64")
    P.check(count == len(regions), f"{name} byte 20", f"{count} regions, the plan has {len(regions)}")
    P.check(total == len(data), f"{name} byte 24", f"total size {total}, the file has {len(data)}")
    P.check(data[32:64] == bytes(32), f"{name} byte 32", "reserved header bytes not zero")
    header = align(64 + 16 * count, page)
    P.check(data[64 + 16 * count:header].count(0) == header - 64 - 16 * count,
            f"{name} byte {64 + 16 * count}", "header padding not zero")
    bundle_parts = {t["name"]: t["parts"] for t in bundle_manifest["tensors"]}
    by_name = {t["name"]: t for t in bundle_manifest["tensors"]}
    compiled_regions = manifest["compiled"]["regions"]
    first_placement = {}
    cursor = header
    for k, region in enumerate(regions):
        offset, size = struct.unpack_from("<QQ", data, 64 + 16 * k)
        where = f"{name} region {k}"
        P.check((offset, size) == (cursor, region["bytes"]), f"{name} byte {64 + 16 * k}",
                f"region {k} table entry ({offset}, {size}), the layout gives "
                f"({cursor}, {region['bytes']})")
        listed = compiled_regions[k]["tensors"] if k < len(compiled_regions) else []
        P.check([t["name"] for t in listed] == [t["name"] for t in region["tensors"]], where,
                f"tensors {[t['name'] for t in listed]}, expected "
                f"{[t['name'] for t in region['tensors']]}")
        position = cursor
        for t, entry in zip(region["tensors"], listed):
            tname = t["name"]
            tensor_where = f"{name} region {k} tensor {tname}"
            parts = {}
            for source_part, part in zip(bundle_parts[tname], entry["parts"]):
                at = align(position, 64)
                same_shape = {k2: part[k2] for k2 in ("kind", "dtype", "bytes", "file")}
                P.check(same_shape == {**{k2: source_part[k2] for k2 in ("kind", "dtype", "bytes")},
                                       "file": "weights.bin"}, tensor_where,
                        f"part {part} is not the bundle's {source_part}")
                P.check(part["offset"] == at, tensor_where,
                        f"{part['kind']} at {part['offset']}, the layout gives {at}")
                P.check(data[position:at].count(0) == at - position, f"{name} byte {position}",
                        f"gap before {tname} {part['kind']} is not zero")
                parts[part["kind"]] = (at, data[at:at + part["bytes"]])
                position = at + part["bytes"]
            P.check(len(entry["parts"]) == len(bundle_parts[tname]), tensor_where,
                    "not the bundle's number of parts")
            first_placement.setdefault(tname, entry["parts"])
            values, _ = decode_tensor(by_name[tname], parts, None, manifest["compute_precision"],
                                      True, tensor_where)
            if values != bundle_decoded[tname]:
                e = next(i for i, (a, b) in enumerate(zip(values, bundle_decoded[tname])) if a != b)
                P.fail(tensor_where, f"element {e} decodes to {values[e]!r}, the bundle's to "
                       f"{bundle_decoded[tname][e]!r}")
        end = cursor + region["bytes"]
        P.check(data[position:end].count(0) == end - position, f"{name} byte {position}",
                f"padding of region {k} is not zero")
        region["stored"] = sum(p["bytes"] for t in region["tensors"] for p in t["parts"])
        cursor = end
    P.check(len(data) == cursor and len(data) % page == 0, name,
            f"file is {len(data)} bytes, the regions end at {cursor} (pages of {page})")
    for t in manifest["tensors"]:
        P.check(t["parts"] == first_placement.get(t["name"]), f"manifest.json tensor {t['name']}",
                "parts are not its first placement in the compiled weights.bin")
    return len(data)


def check_compiled_regions(manifest, regions, budget):
    for k, (plan, listed) in enumerate(zip(regions, manifest["compiled"]["regions"])):
        layers = plan["layers"]
        expected = {
            "index": k, "kind": plan["kind"],
            "first_layer": layers[0] if layers else None,
            "last_layer": layers[-1] if layers else None,
            "bytes": plan["bytes"], "stored_bytes": plan.get("stored"),
            "kv_cache_bytes": plan["kv"], "working_bytes": plan["working"],
            "footprint_bytes": plan["bytes"] + plan["kv"] + plan["working"],
            "budget_bytes": budget,
            "within_budget": plan["bytes"] + plan["kv"] + plan["working"] <= budget,
        }
        found = {key: listed.get(key) for key in expected}
        P.check(found == expected, f"manifest.json compiled.regions[{k}]",
                f"{ {k2: v for k2, v in found.items() if expected[k2] != v} }, expected "
                f"{ {k2: v for k2, v in expected.items() if found[k2] != v} }")
    P.check(len(manifest["compiled"]["regions"]) == len(regions), "manifest.json compiled.regions",
            f"{len(manifest['compiled']['regions'])} regions, the greedy packing gives "
            f"{len(regions)}")
    offsets = [r["offset"] for r in manifest["compiled"]["regions"]]
    return offsets


def check_compiled_manifest(manifest, bundle_manifest, bundle_raw, regions,
                            weights_size, tables_size, kv_total, device, files_total):
    compiled = manifest["compiled"]
    where = "manifest.json compiled"
    P.check(manifest["kind"] == "compiled", "manifest.json", f"kind {manifest['kind']!r}")
    P.check(manifest["verdicts"] == [], "manifest.json", "verdicts not empty")
    key = manifest["build_key"]
    P.check(isinstance(key, str) and re.fullmatch(r"[0-9a-f]{64}", key) is not None,
            "manifest.json build_key", f"{key!r} is not 64 hex digits")
    # Every other key is the bundle's, unchanged.
    own = {"kind", "tensors", "files", "sizes", "build_key", "compiled", "warnings", "verdicts"}
    for k in sorted(set(manifest) | set(bundle_manifest)):
        if k not in own:
            P.check(manifest.get(k) == bundle_manifest.get(k), f"manifest.json {k}",
                    "differs from the bundle's")
    sizes = dict(manifest["sizes"])
    P.check(sizes.pop("bundle_bytes") == files_total, "manifest.json sizes.bundle_bytes",
            f"{manifest['sizes']['bundle_bytes']}, its listed files hold {files_total}")
    bundle_sizes = dict(bundle_manifest["sizes"])
    bundle_sizes.pop("bundle_bytes")
    P.check(sizes == bundle_sizes, "manifest.json sizes", "other keys differ from the bundle's")
    strip = [{k: v for k, v in t.items() if k != "parts"} for t in manifest["tensors"]]
    P.check(strip == [{k: v for k, v in t.items() if k != "parts"}
                      for t in bundle_manifest["tensors"]], "manifest.json tensors",
            "differ from the bundle's (parts aside)")
    warnings = manifest["warnings"]
    P.check(warnings[:len(bundle_manifest["warnings"])] == bundle_manifest["warnings"],
            "manifest.json warnings", "do not start with the bundle's")
    portable = {"name": bundle_manifest["model"]["name"] + ".aimodel", "bytes": bundle_manifest["sizes"]["bundle_bytes"],
                "manifest_crc32": crc32_hex(bundle_raw), "tool_version": bundle_manifest["tool"]["version"]}
    P.check(compiled["portable"] == portable, where, f"portable {compiled['portable']}, "
            f"expected {portable}")
    P.check(compiled["size_delta_bytes"] == files_total - portable["bytes"], where,
            "size_delta_bytes is not bundle_bytes minus portable.bytes")
    working = [r["working"] for r in regions]
    memory = {"weights_bytes": weights_size, "kv_cache_bytes": kv_total,
              "working_bytes": max(working), "tables_bytes": tables_size,
              "total_bytes": weights_size + kv_total + max(working) + tables_size,
              "peak_region": working.index(max(working))}
    P.check(compiled["memory"] == memory, where, f"memory {compiled['memory']}, expected {memory}")
    version = compiled["min_deployment_version"]
    P.check(re.fullmatch(r"\d+(\.\d+)*", version) is not None
            and tuple(int(v) for v in version.split(".")) >= (27, 0), where,
            f"min_deployment_version {version!r} below 27.0")
    over = [r["index"] for r in compiled["regions"] if not r["within_budget"]]
    if device is None:
        P.fail(where, f"no device {compiled['architecture']} ({compiled['platform']}) in the "
               "device tables given")
        return
    P.check(device["ahead_of_time"] is True, where, "compiled for a device without AOT")
    for key in ("chip", "products", "page_size"):
        P.check(compiled[key] == device[key], where, f"{key} {compiled[key]!r}, the device "
                f"table says {device[key]!r}")
    total = memory["total_bytes"]
    limit, raised = device["app_memory_limit_bytes"], device["increased_memory_limit_bytes"]
    verdict = "fits" if total <= limit else (
        "needs-entitlement" if raised is not None and total <= raised else "does-not-fit")
    expected = {
        "architecture": compiled["architecture"], "platform": compiled["platform"],
        "chip": device["chip"], "memory": verdict, "total_bytes": total,
        "app_memory_limit_bytes": limit, "increased_memory_limit_bytes": raised,
        "entitlements": device["entitlements"] if verdict == "needs-entitlement" else [],
        "neural_engine": "regions-over-budget" if over else "all-regions-within-budget",
        "region_budget_bytes": device["ane_region_budget_bytes"],
        "regions": len(compiled["regions"]), "regions_over_budget": over,
        "ahead_of_time": True,
    }
    P.check(compiled["verdict"] == expected, f"{where}.verdict",
            f"{ {k: v for k, v in compiled['verdict'].items() if expected.get(k) != v} }, "
            f"expected { {k: v for k, v in expected.items() if compiled['verdict'].get(k) != v} }")


def check_compiled(folder, args, stats):
    if not args.bundle:
        raise Refusal("a compiled artifact is checked against its bundle: give --bundle")
    bundle_folder = Path(args.bundle)
    saved = P.context
    P.context = f"{saved}(its bundle) "
    bundle_manifest, bundle_decoded, bundle_raw, graph = check_bundle(bundle_folder, args, stats)
    P.context = saved
    manifest, _ = read_manifest(folder)
    compiled = manifest["compiled"]
    if not P.check(compiled is not None, "manifest.json", "compiled is null"):
        raise Refusal("not a compiled artifact")
    expected_name = f"{manifest['model']['name']}.{compiled['architecture']}.aimodelc"
    P.check(folder.name == expected_name, "manifest.json", f"the folder is {folder.name!r}, "
            f"<Name>.<arch>.aimodelc gives {expected_name!r}")
    for path in ["graph.json", "config.json"]:
        P.check((folder / path).is_file() and
                (folder / path).read_bytes() == (bundle_folder / path).read_bytes(), path,
                "not the bundle's, byte for byte")
    tokenizer = [p for p in (f["path"] for f in bundle_manifest["files"])
                 if p.startswith("tokenizer/")]
    for path in tokenizer:
        P.check((folder / path).is_file() and
                (folder / path).read_bytes() == (bundle_folder / path).read_bytes(), path,
                "not the bundle's, byte for byte")
    files_total = check_files(folder, manifest, ["config.json", "graph.json", "static.json",
                                                 "weights.bin",
                                                 "tables/rope_cos.f32", "tables/rope_sin.f32"]
                              + tokenizer)
    page = compiled["page_size"]
    static, slot = check_static(folder, graph, manifest, compiled)
    device = device_entry(compiled, args.devices)
    budget = device["ane_region_budget_bytes"] if device else compiled["regions"][0]["budget_bytes"]
    regions = planned_regions(bundle_manifest, graph, page, budget, slot)
    weights_size = check_compiled_weights(folder, manifest, bundle_manifest, bundle_decoded,
                                          regions, page)
    offsets = check_compiled_regions(manifest, regions, budget)
    cursor = align(64 + 16 * len(regions), page)
    for k, region in enumerate(regions):
        if k < len(offsets):
            P.check(offsets[k] == cursor, f"manifest.json compiled.regions[{k}]",
                    f"offset {offsets[k]}, the layout gives {cursor}")
        cursor += region["bytes"]
    check_rope_tables(folder, graph, stats)
    tables = sum((folder / "tables" / n).stat().st_size for n in ("rope_cos.f32", "rope_sin.f32"))
    check_compiled_manifest(manifest, bundle_manifest, bundle_raw, regions,
                            weights_size, tables, static["kv_cache"]["total_bytes"], device,
                            files_total)
    FEATURES.update({f"compiled-{compiled['platform']}", f"page-{page}",
                     f"verdict-{compiled['verdict']['memory']}"})
    if graph["tie_word_embeddings"]:
        FEATURES.add("compiled-tied-head-copy")
    layer_regions = [r for r in regions if r["kind"] == "layers"]
    if any(len(r["layers"]) > 1 for r in layer_regions):
        FEATURES.add("region-of-several-layers")
    if len(layer_regions) > 1:
        FEATURES.add("layers-split-into-regions")
    if any(not r["within_budget"] for r in compiled["regions"]):
        FEATURES.add("region-over-budget")
    stats["regions"] = len(regions)
    return manifest


# ---------------------------------------------------------------------------------------

def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("artifact", help="a <Name>.aimodel bundle or a <Name>.<arch>.aimodelc")
    parser.add_argument("--against", metavar="CHECKPOINT",
                        help="the checkpoint folder it was exported from (config.json, "
                             "safetensors, tokenizer files)")
    parser.add_argument("--bundle", help="for a compiled artifact: the bundle it was compiled from")
    parser.add_argument("--compression-config", metavar="FILE",
                        help="the config file the export was given (named configs are read "
                             "from Presets/compression)")
    parser.add_argument("--palette-search", help="the export's --palette-search, if any")
    parser.add_argument("--calibration", metavar="FILE", help="the export's calibration tokens")
    parser.add_argument("--context", type=int, help="the export's context length")
    parser.add_argument("--devices", action="append", default=[], metavar="FILE",
                        help="device tables that extend Presets/devices.json")
    parser.add_argument("--allow-clamp", action="store_true",
                        help="the export had --allow-clamp")
    parser.add_argument("--synthetic", action="store_true",
                        help="the export had --synthetic (the checkpoint is `exporter synth`'s)")
    return parser.parse_args(argv)


def main(argv):
    args = parse_arguments(argv)
    folder = Path(args.artifact)
    stats = {"tensors": 0, "sqnr_compared": 0, "sqnr_max_diff": 0.0, "rope_values": 0,
             "rope_ulp_1": 0, "regions": 0}
    try:
        if not (folder / "manifest.json").is_file():
            raise Refusal(f"{folder}: no manifest.json")
        if folder.name.endswith(".aimodelc"):
            check_compiled(folder, args, stats)
            kind = "compiled"
        else:
            check_bundle(folder, args, stats)
            kind = "bundle"
    except Refusal as refusal:
        P.errors.append(str(refusal))
    except (KeyError, TypeError, IndexError, ValueError, struct.error) as error:
        if not P.errors:
            raise
        # Reading on from a malformed part: the errors above say what.
        P.errors.append(f"cannot read on ({type(error).__name__}: {error})")
    if P.errors:
        for line in P.errors[:MAX_PRINTED_ERRORS]:
            print(f"error: {folder.name}: {line}", file=sys.stderr)
        if len(P.errors) > MAX_PRINTED_ERRORS:
            print(f"error: … and {len(P.errors) - MAX_PRINTED_ERRORS} more", file=sys.stderr)
        return 1
    summary = f"ok {folder.name}: {kind}, {stats['tensors']} tensors decoded"
    if stats["sqnr_compared"]:
        summary += (f", {stats['sqnr_compared']} SQNRs as claimed (largest |measured - claimed| "
                    f"{stats['sqnr_max_diff']:.4f} dB before rounding)")
    if kind == "compiled":
        summary += (f", {stats['regions']} regions, {stats['rope_values']} RoPE values "
                    f"({stats['rope_ulp_1']} 1 ulp off)")
    print(summary)
    print("features: " + " ".join(sorted(FEATURES)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
