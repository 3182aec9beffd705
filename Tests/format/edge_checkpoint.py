#!/usr/bin/env python3
"""Writes a tiny qwen2 checkpoint (config.json, model.safetensors in float32) whose weights
hold the edge cases the docs specify exactly, for run.sh, with edge.json, the compression
config that sends each crafted tensor to the rule it tests:

- int8: a row of zeros (scale 1), a tensor of zeros, quotients at exact halves (2.5 -> 3,
  -2.5 -> -3), a largest magnitude that is negative;
- palettes: fewer distinct values than entries (with -0 and +0 counted as one), a group of
  one repeated value, a cluster whose mean rounds to -0 (stored +0), outliers tied in
  magnitude (the lower element first), a tensor that decodes exactly (SQNR null);
- conversions: float32 values halfway between two float16 (and bfloat16) values (ties to
  even), float16 subnormals, -0 in kept tensors, and one value (1e10) beyond float16's
  range in a norm, which a bfloat16 or float32 export keeps and --allow-clamp clamps.

usage: edge_checkpoint.py FOLDER
"""

import json
import random
import struct
import sys
from pathlib import Path

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, VOCAB = 32, 48, 4, 2, 64
HEAD_DIM = HIDDEN // HEADS

CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
    "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "num_hidden_layers": 1,
    "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "vocab_size": VOCAB,
    "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False, "torch_dtype": "float32",
}

COMPRESSION = {
    "schema": "exporter.compression/1",
    "name": "format_edges",
    "description": "Sends each crafted tensor of edge_checkpoint.py to the rule it tests",
    "rules": [
        {"match": "*norm.weight", "mode": "keep"},
        {"match": "*.bias", "mode": "keep"},
        {"match": "*.q_proj.weight", "mode": "linear", "granularity": "per_channel"},
        {"match": "*.k_proj.weight", "mode": "palettize", "bits": 2, "granularity": "per_tensor"},
        {"match": "*.v_proj.weight", "mode": "palettize", "bits": 2,
         "granularity": "per_grouped_channel", "group_size": 4},
        {"match": "*.o_proj.weight", "mode": "palettize", "bits": 4, "granularity": "per_tensor",
         "outlier_fraction": 0.01},
        {"match": "*.gate_proj.weight", "mode": "linear", "granularity": "per_tensor"},
        {"match": "*.up_proj.weight", "mode": "palettize", "bits": 3, "granularity": "per_block",
         "group_size": 5, "block_size": 7},
        {"match": "*.down_proj.weight", "mode": "linear", "granularity": "per_tensor"},
        {"match": "lm_head.weight", "mode": "palettize", "bits": 8,
         "granularity": "per_grouped_channel", "group_size": 16},
    ],
    "default": {"mode": "palettize", "bits": 4, "granularity": "per_grouped_channel",
                "group_size": 8},
}

rng = random.Random(20261201)


def noise(count, scale=0.05):
    return [rng.gauss(0.0, scale) for _ in range(count)]


# float32 values exactly halfway between two float16 values (1 + 2^-11 between 1 and
# 1 + 2^-10: to even, 1), and between two bfloat16 values (1 + 2^-8), subnormals, -0.
TIES = [1 + 2 ** -11, 1 + 3 * 2 ** -11, -(1 + 2 ** -11), 1 + 2 ** -8, 1 + 3 * 2 ** -8,
        2 ** -20, -(2 ** -24), 3 * 2 ** -25, -0.0, 0.0, 65504.0, -65504.0]


def tensors():
    out = {}
    embedding = noise(VOCAB * HIDDEN)
    embedding[:HIDDEN] = [0.0] * HIDDEN                       # a token whose row is zero
    out["model.embed_tokens.weight"] = ([VOCAB, HIDDEN], embedding)
    p = "model.layers.0."
    out[p + "input_layernorm.weight"] = ([HIDDEN], TIES + [1.0 + v for v in noise(HIDDEN - len(TIES))])
    q = noise(HIDDEN * HIDDEN)
    q[:HIDDEN] = [0.0] * HIDDEN                                # int8 row of zeros: scale 1
    row = [0.0] * HIDDEN
    row[:6] = [127.0, 2.5, -2.5, 0.5, -1.5, 126.5]             # scale 1: exact halves
    q[HIDDEN:2 * HIDDEN] = row
    row = [0.0] * HIDDEN
    row[:4] = [-254.0, 5.0, -5.0, 3.0]                         # negative peak, scale 2
    q[2 * HIDDEN:3 * HIDDEN] = row
    out[p + "self_attn.q_proj.weight"] = ([HIDDEN, HIDDEN], q)
    out[p + "self_attn.q_proj.bias"] = ([HIDDEN], TIES + noise(HIDDEN - len(TIES)))
    kv = KV_HEADS * HEAD_DIM
    # Three values once -0 and +0 are one: LUT [-1, 0, 1, 1]; decodes exactly: SQNR null.
    out[p + "self_attn.k_proj.weight"] = ([kv, HIDDEN],
                                          [rng.choice([-1.0, -0.0, 0.0, 1.0]) for _ in range(kv * HIDDEN)])
    out[p + "self_attn.k_proj.bias"] = ([kv], noise(kv))
    v = noise(kv * HIDDEN)
    group = 4 * HIDDEN
    # Group 0: five values for four entries; the cheapest merge is -2^-24 with the zeros,
    # whose mean rounds to -0 and is stored +0. Group 1: one value repeated.
    v[:group] = [-1.0] * 20 + [-(2 ** -24)] + [0.0] * 60 + [1.0] * 20 + [2.0] * (group - 101)
    v[group:2 * group] = [0.375] * group
    out[p + "self_attn.v_proj.weight"] = ([kv, HIDDEN], v)
    out[p + "self_attn.v_proj.bias"] = ([kv], noise(kv))
    o = noise(HIDDEN * HIDDEN)
    for k, e in enumerate(range(3, HIDDEN * HIDDEN, 83)):      # 13 weights of |w| = 8 for
        o[e] = 8.0 if k % 2 else -8.0                          # 10 outliers: ties by element
    out[p + "self_attn.o_proj.weight"] = ([HIDDEN, HIDDEN], o)
    out[p + "post_attention_layernorm.weight"] = ([HIDDEN], [1e10] + [1.0 + v for v in noise(HIDDEN - 1)])
    gate = noise(INTERMEDIATE * HIDDEN)
    gate[7] = -3.0                                             # the peak is negative
    out[p + "mlp.gate_proj.weight"] = ([INTERMEDIATE, HIDDEN], gate)
    up = noise(INTERMEDIATE * HIDDEN)
    up[::5] = [-0.0] * len(up[::5])
    out[p + "mlp.up_proj.weight"] = ([INTERMEDIATE, HIDDEN], up)
    out[p + "mlp.down_proj.weight"] = ([HIDDEN, INTERMEDIATE], [0.0] * (HIDDEN * INTERMEDIATE))
    out["model.norm.weight"] = ([HIDDEN], [1.0 + v for v in noise(HIDDEN)])
    head = [rng.choice([-0.5, -0.25, 0.0, 0.25, 0.5]) for _ in range(VOCAB * HIDDEN)]
    head[16 * HIDDEN:] = noise((VOCAB - 16) * HIDDEN)          # one group of five values
    out["lm_head.weight"] = ([VOCAB, HIDDEN], head)
    return out


def write_safetensors(path, named):
    header, blobs, offset = {}, [], 0
    for name, (shape, values) in named.items():
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main(folder):
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    write_safetensors(folder / "model.safetensors", tensors())
    (folder.parent / "edge.json").write_text(json.dumps(COMPRESSION, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
