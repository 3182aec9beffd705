#!/usr/bin/env python3
"""Checks exporter's Core ML packages with coremltools and NumPy (run by .ci/run).

For a small synthetic model of each iOS architecture (qwen2, qwen3, mistral), with
compression configs that cover every palette width, per-tensor, grouped and per-block LUTs, an
uneven last group, sparse exact outliers, int8 per tensor and per channel, tied and untied heads:

1. exports `<model> --format mlpackage` with the built `exporter` binary;
2. `coremltools.models.MLModel(path, skip_model_load=True)` opens the package;
3. `coremltools.converters.mil.frontend.milproto.load` rebuilds the program, type-checking
   every op and comparing every output type with the one we wrote;
4. every weight coremltools reads from our `weight.bin` equals the bundle's, bit for bit
   (LUT entries, unpacked indices, int8 values, float16 values, outlier masks and values), and
   each weight made of several ops (a palette with outliers) computed in NumPy from the op
   inputs coremltools read equals the bundle's dequantised weight, bit for bit;
5. a NumPy interpreter of the ops we emit runs the program (a prefill, then single-token
   steps through the KV-cache states) and its logits are compared with a NumPy
   transcription of the model computed from the bundle's weights (docs/FORMAT.md).

Exit status 0 when every check holds, 1 otherwise; one line per check.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ARCHITECTURES = {
    "qwen2": {
        "config": {
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512,
            "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        },
        "compression": None,  # the iOS default: 4-bit LUT per 32 channels, int8 embedding
    },
    "qwen3": {
        "config": {
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
            "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 320,
            "max_position_embeddings": 512, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        },
        "compression": {
            "schema": "exporter.compression/1", "name": "check_mixed", "description": "check",
            "rules": [
                {"match": "*norm.weight", "mode": "keep"},
                {"match": "model.layers.1.*_proj.weight", "mode": "palettize", "bits": 8, "granularity": "per_tensor"},
                {"match": "*.v_proj.weight", "mode": "palettize", "bits": 6, "granularity": "per_grouped_channel", "group_size": 16},
            ],
            # 24 does not divide 128, 64 or 96 rows: a smaller last group.
            "default": {"mode": "palettize", "bits": 4, "granularity": "per_grouped_channel", "group_size": 24},
        },
    },
    "mistral": {
        "config": {
            "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 64,
            "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 1, "vocab_size": 288, "max_position_embeddings": 512,
            "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        },
        "compression": {
            "schema": "exporter.compression/1", "name": "check_untied", "description": "check",
            "rules": [
                {"match": "*norm.weight", "mode": "keep"},
                {"match": "lm_head.weight", "mode": "linear", "bits": 8, "granularity": "per_channel"},
                {"match": "*.o_proj.weight", "mode": "palettize", "bits": 3, "granularity": "per_grouped_channel", "group_size": 8},
                {"match": "*.down_proj.weight", "mode": "palettize", "bits": 2, "granularity": "per_grouped_channel", "group_size": 16},
            ],
            "default": {"mode": "palettize", "bits": 6, "granularity": "per_tensor"},
        },
    },
    # Like the 4bit_quality preset: per-block LUTs (tiles of rows x input columns) and sparse
    # exact outliers, untied int8 head.
    "qwen2_quality": {
        "config": {
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512,
            "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        },
        "compression": {
            "schema": "exporter.compression/1", "name": "check_quality", "description": "check",
            "rules": [
                {"match": "*norm.weight", "mode": "keep"},
                {"match": "*.bias", "mode": "keep"},
                {"match": "model.embed_tokens.weight", "mode": "linear", "granularity": "per_tensor"},
                {"match": "lm_head.weight", "mode": "linear", "granularity": "per_channel"},
                {"match": "*.v_proj.weight", "mode": "palettize", "bits": 3, "granularity": "per_block",
                 "group_size": 8, "block_size": 16},
            ],
            "default": {"mode": "palettize", "bits": 4, "granularity": "per_block", "group_size": 4,
                        "block_size": 32, "outlier_fraction": 0.01},
        },
    },
}
CONTEXT = 32
PREFILL = 5
STEPS = 4

failures = []
passes = []


def check(label, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {label}{': ' + detail if detail else ''}", flush=True)
    (passes if ok else failures).append(label)


# ---------------------------------------------------------------- the bundle (docs/FORMAT.md)

def unpack_indices(data, bits, count):
    stream = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")[: count * bits]
    weights = (1 << np.arange(bits)).astype(np.uint16)
    return (stream.reshape(count, bits).astype(np.uint16) @ weights).astype(np.uint8)


class Bundle:
    def __init__(self, path):
        self.manifest = json.load(open(os.path.join(path, "manifest.json")))
        self.graph = json.load(open(os.path.join(path, "graph.json")))
        self.weights = open(os.path.join(path, "weights.bin"), "rb").read()
        self.tensors = {t["name"]: t for t in self.manifest["tensors"]}

    def part(self, tensor, kind):
        part = next(p for p in tensor["parts"] if p["kind"] == kind)
        return self.weights[part["offset"]: part["offset"] + part["bytes"]]

    def raw(self, name):
        """The stored parts, decoded but not dequantised."""
        t = self.tensors[name]
        shape = t["shape"]
        rows = shape[0] if len(shape) >= 2 else 1
        count = int(np.prod(shape))
        c = t["compression"]
        if c["mode"] == "keep":
            return {"values": np.frombuffer(self.part(t, "values"), np.float16).reshape(shape)}
        if c["mode"] == "palettize":
            bits = c["bits"]
            columns = count // rows
            tiled = c["granularity"] in ("per_grouped_channel", "per_block")
            group = c.get("group_size", rows) if tiled else rows
            block = c.get("block_size", columns) if c["granularity"] == "per_block" else columns
            blocks = -(-columns // block)
            # LUTs as [groups, blocks, entries]: tile g x blocks + b (docs/FORMAT.md).
            lut = np.frombuffer(self.part(t, "lut"), np.float16).reshape(-1, blocks, 1 << bits)
            indices = unpack_indices(self.part(t, "indices"), bits, count).reshape(shape)
            raw = {"lut": lut, "indices": indices, "group": group, "block": block}
            if any(p["kind"] == "outlier_indices" for p in t["parts"]):
                raw["outlier_indices"] = np.frombuffer(self.part(t, "outlier_indices"), "<u4")
                raw["outlier_values"] = np.frombuffer(self.part(t, "outlier_values"), np.float16)
            return raw
        scales = np.frombuffer(self.part(t, "scales"), np.float32)
        values = np.frombuffer(self.part(t, "values"), np.int8).reshape(shape)
        return {"scales": scales, "values": values, "per_channel": c["granularity"] == "per_channel"}

    def dequantize(self, name):
        t = self.tensors[name]
        raw = self.raw(name)
        mode = t["compression"]["mode"]
        if mode == "keep":
            return raw["values"].astype(np.float32)
        if mode == "palettize":
            rows, columns = raw["indices"].shape
            group_of_row = np.arange(rows) // raw["group"]
            block_of_column = np.arange(columns) // raw["block"]
            w = raw["lut"][group_of_row[:, None], block_of_column[None, :], raw["indices"]]
            if "outlier_indices" in raw:  # outliers replace what their indices decode to
                w = w.reshape(-1).copy()
                w[raw["outlier_indices"]] = raw["outlier_values"]
                w = w.reshape(rows, columns)
            return w.astype(np.float32)
        scales = raw["scales"][:, None] if raw["per_channel"] else raw["scales"][0]
        return raw["values"].astype(np.float32) * scales


# ------------------------------------------------ the model, transcribed from the bundle (float32)

def transcription(bundle, tokens):
    g = bundle.graph
    att = g["attention"]
    heads, kv_heads, head_dim = att["heads"], att["kv_heads"], att["head_dim"]
    eps = g["rms_norm_eps"]
    w = bundle.dequantize

    def rms(x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight

    n = len(tokens)
    inv = 1.0 / (g["rope"]["theta"] ** (np.arange(0, head_dim, 2) / head_dim))
    angles = np.outer(np.arange(n), inv)
    cos = np.cos(np.concatenate([angles, angles], -1)).astype(np.float32)
    sin = np.sin(np.concatenate([angles, angles], -1)).astype(np.float32)

    def rotate(x):
        half = head_dim // 2
        return x * cos + np.concatenate([-x[..., half:], x[..., :half]], -1) * sin

    x = w("model.embed_tokens.weight")[tokens]
    causal = np.triu(np.full((n, n), -np.inf, np.float32), 1)
    for layer in range(g["layers"]):
        p = f"model.layers.{layer}."
        h = rms(x, w(p + "input_layernorm.weight"))

        def proj(name):
            y = h @ w(p + f"self_attn.{name}.weight").T
            if att["qkv_bias"]:
                y = y + w(p + f"self_attn.{name}.bias")
            return y

        q = proj("q_proj").reshape(n, heads, head_dim)
        k = proj("k_proj").reshape(n, kv_heads, head_dim)
        v = proj("v_proj").reshape(n, kv_heads, head_dim)
        if att["qk_norm"]:
            q = rms(q, w(p + "self_attn.q_norm.weight"))
            k = rms(k, w(p + "self_attn.k_norm.weight"))
        q, k, v = (a.transpose(1, 0, 2) for a in (q, k, v))
        q, k = rotate(q), rotate(k)
        k = np.repeat(k, heads // kv_heads, axis=0)
        v = np.repeat(v, heads // kv_heads, axis=0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(head_dim) + causal
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        o = (scores / scores.sum(-1, keepdims=True)) @ v
        x = x + o.transpose(1, 0, 2).reshape(n, heads * head_dim) @ w(p + "self_attn.o_proj.weight").T
        h = rms(x, w(p + "post_attention_layernorm.weight"))
        gate = h @ w(p + "mlp.gate_proj.weight").T
        up = h @ w(p + "mlp.up_proj.weight").T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w(p + "mlp.down_proj.weight").T
    x = rms(x, w("model.norm.weight"))
    head = "model.embed_tokens.weight" if g["tie_word_embeddings"] else "lm_head.weight"
    return x @ w(head).T


# ------------------------------------------- a NumPy interpreter of the MIL ops the exporter emits

def lut_to_dense(indices, lut):
    """constexpr_lut_to_dense, LUT [rows / G, columns / B, entries, 1]."""
    rows, columns = indices.shape
    group_of_row = np.arange(rows) // (rows // lut.shape[0])
    block_of_column = np.arange(columns) // (columns // lut.shape[1])
    return lut[group_of_row[:, None], block_of_column[None, :], indices, 0]


def sparse_to_dense(nonzero_data, mask):
    """constexpr_sparse_to_dense (iOS 18): the values at the mask's set bits, row-major."""
    out = np.zeros(mask.shape, nonzero_data.dtype)
    out[np.asarray(mask) != 0] = nonzero_data
    return out


class Interpreter:
    def __init__(self, program, fp16):
        self.function = program.functions["main"]
        self.fp16 = fp16
        self.constants = {}
        self.states = {}

    def value(self, env, var):
        if isinstance(var, (list, tuple)):
            return [self.value(env, v) for v in var]
        if var.name in env:
            return env[var.name]
        if var.name in self.states:
            return self.states[var.name]
        if var.name in self.constants:
            return self.constants[var.name]
        if var.val is not None:
            return np.asarray(var.val)
        raise KeyError(var.name)

    def run(self, inputs, states):
        from coremltools.converters.mil.mil import types

        env = dict(inputs)
        self.states = states
        for op in self.function.operations:
            a = {k: self.value(env, v) for k, v in op.inputs.items()} if op.op_type not in ("const",) else {}
            t = op.op_type
            if t == "const":
                out = np.asarray(op.outputs[0].val)
            elif t == "constexpr_lut_to_dense":
                out = lut_to_dense(a["indices"], a["lut"])
            elif t == "constexpr_sparse_to_dense":
                out = sparse_to_dense(a["nonzero_data"], a["mask"])
            elif t == "select":
                out = np.where(a["cond"], a["a"], a["b"])
            elif t == "constexpr_blockwise_shift_scale":
                data, scale = a["data"].astype(np.float32), a["scale"].astype(np.float32)
                for axis in range(data.ndim):
                    scale = np.repeat(scale, data.shape[axis] // scale.shape[axis], axis)
                out = (data * scale).astype(np.float16)
            elif t == "shape":
                out = np.array(a["x"].shape, np.int32)
            elif t == "slice_by_index":
                out = a["x"][tuple(slice(int(b), int(e)) for b, e in zip(a["begin"], a["end"]))]
            elif t in ("add", "mul"):
                out = a["x"] + a["y"] if t == "add" else a["x"] * a["y"]
            elif t == "concat":
                out = np.concatenate(a["values"], axis=int(a["axis"]))
            elif t == "cast":
                out = a["x"].astype({"fp32": np.float32, "fp16": np.float16, "bool": np.bool_}[str(a["dtype"])])
            elif t == "reduce_mean":
                out = np.mean(a["x"], axis=tuple(int(i) for i in a["axes"]), keepdims=bool(a["keep_dims"]))
            elif t == "rsqrt":
                out = 1 / np.sqrt(a["x"] + a["epsilon"])
            elif t == "linear":
                out = a["x"].astype(np.float32) @ a["weight"].astype(np.float32).T + a["bias"].astype(np.float32)
            elif t == "reshape":
                out = a["x"].reshape([int(s) for s in a["shape"]])
            elif t == "transpose":
                out = a["x"].transpose([int(s) for s in a["perm"]])
            elif t == "split":
                out = np.split(a["x"], int(a["num_splits"]), axis=int(a["axis"]))
            elif t == "silu":
                x = a["x"].astype(np.float32)
                out = x / (1 + np.exp(-x))
            elif t == "tile":
                out = np.tile(a["x"], [int(r) for r in a["reps"]])
            elif t == "gather":
                out = np.take(a["x"], a["indices"], axis=int(a["axis"]))
            elif t == "scaled_dot_product_attention":
                q, k, v = (a[n].astype(np.float32) for n in ("query", "key", "value"))
                s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]) + a["attn_mask"].astype(np.float32)
                s = np.exp(s - s.max(-1, keepdims=True))
                out = (s / s.sum(-1, keepdims=True)) @ v
            elif t == "read_state":
                out = states[op.inputs["input"].name].copy()
            elif t == "slice_update":
                out = a["x"].copy()
                out[tuple(slice(int(b), int(e)) for b, e in zip(a["begin"], a["end"]))] = a["update"]
            elif t == "coreml_update_state":
                states[op.inputs["state"].name] = a["value"].astype(np.float16)
                out = a["value"]
            else:
                raise NotImplementedError(f"op {t}")
            outs = out if isinstance(out, list) else [out]
            for var, value in zip(op.outputs, outs):
                value = np.asarray(value)
                if var.dtype == types.fp16:
                    value = value.astype(np.float16 if self.fp16 else np.float32)
                elif var.dtype == types.fp32:
                    value = value.astype(np.float32)
                if t in ("const",) or t.startswith("constexpr_"):
                    self.constants[var.name] = value
                else:
                    env[var.name] = value
        return env[self.function.outputs[0].name]


def run_program(program, graph, tokens, fp16):
    interpreter = Interpreter(program, fp16)
    context = graph["context_length"]
    shape = [graph["layers"], graph["attention"]["kv_heads"], context, graph["attention"]["head_dim"]]
    states = {"key_cache": np.zeros(shape, np.float16), "value_cache": np.zeros(shape, np.float16)}
    chunks = [tokens[:PREFILL]] + [[t] for t in tokens[PREFILL:]]
    position, logits = 0, []
    for chunk in chunks:
        n = len(chunk)
        mask = np.full((1, 1, n, context), -np.inf, np.float16)
        for i in range(n):
            mask[0, 0, i, : position + i + 1] = 0
        out = interpreter.run(
            {"input_ids": np.array([chunk], np.int32), "causal_mask": mask,
             "current_position": np.array([position], np.int32)}, states)
        logits.append(np.asarray(out, np.float32)[0])
        position += n
    return np.concatenate(logits, 0)


# ------------------------------------------------------------------------------- the checks

def check_architecture(exporter, work, arch, spec):
    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto import load as milproto

    checkpoint = os.path.join(work, arch)
    os.makedirs(checkpoint)
    json.dump(spec["config"], open(os.path.join(checkpoint, "config.json"), "w"))
    subprocess.run([exporter, "synth", checkpoint, "--out", checkpoint, "--seed", "5"], check=True, stdout=subprocess.DEVNULL)
    command = [exporter, checkpoint, "--experimental", "--compute-precision", "float16", "--context", str(CONTEXT),
               "--format", "mlpackage", "--output-dir", os.path.join(work, "out")]
    if spec["compression"]:
        config = os.path.join(work, arch + "-compression.json")
        json.dump(spec["compression"], open(config, "w"))
        command += ["--compression-config", config]
    result = subprocess.run(command, capture_output=True, text=True)
    check(f"{arch}: exporter --format mlpackage", result.returncode == 0, result.stderr.strip()[-400:])
    if result.returncode:
        return
    folder = os.path.join(work, "out", arch)
    package = os.path.join(folder, arch + ".mlpackage")
    bundle = Bundle(os.path.join(folder, arch + ".aimodel"))

    model = ct.models.MLModel(package, skip_model_load=True)
    spec_ = model.get_spec()
    check(f"{arch}: MLModel(skip_model_load=True) opens the package",
          spec_.specificationVersion == 9 and spec_.WhichOneof("Type") == "mlProgram",
          f"specification {spec_.specificationVersion}, states {[s.name for s in spec_.description.state]}")

    weights_dir = os.path.join(package, "Data", "com.apple.CoreML", "weights")
    program = milproto.load(spec_, specification_version=9, file_weights_dir=weights_dir)
    ops = list(program.functions["main"].operations)
    ours = json.load(open(os.path.join(package, "Data", "com.github.exporter", "manifest.json")))
    counts = {}
    for op in ops:
        counts[op.op_type] = counts.get(op.op_type, 0) + 1
    check(f"{arch}: milproto.load rebuilds the program, every op type-checked", len(ops) > 0,
          f"{len(ops)} ops; {', '.join(f'{k} {v}' for k, v in sorted(counts.items()) if not k.startswith('const'))}")

    # Weights, bit for bit.
    by_name = {op.outputs[0].name: op for op in ops}
    compared, mismatched, outlier_weights, replaced = 0, [], 0, 0

    def same_palette(op, raw):
        lut, indices = op.lut.val, op.indices.val
        rows = indices.shape[0]
        expected_lut = raw["lut"][(np.arange(lut.shape[0]) * (rows // lut.shape[0])) // raw["group"]]
        return (lut.shape[1] == raw["lut"].shape[1]
                and np.array_equal(indices.astype(np.uint8), raw["indices"])
                and np.array_equal(lut[..., 0].view(np.uint16), expected_lut.view(np.uint16)))

    for record in ours["tensors"]:
        name = record["name"]
        op = by_name.get(name.replace(".", "_"))
        raw = bundle.raw(name)
        if op is None:
            mismatched.append(name + " (no op)")
            continue
        if op.op_type == "select":  # a palette with sparse outliers: each op's inputs, then the weight
            inputs = {v.name: v for v in (op.cond, op.a, op.b)}
            palette = by_name[op.b.name]
            outliers = by_name[op.a.name]
            flags = by_name[op.cond.op.x.name]
            dense = np.where(sparse_to_dense(flags.nonzero_data.val, flags.mask.val) != 0,
                             sparse_to_dense(outliers.nonzero_data.val, outliers.mask.val),
                             lut_to_dense(palette.indices.val, palette.lut.val))
            positions = np.flatnonzero(np.asarray(outliers.mask.val).reshape(-1))
            same = (len(inputs) == 3 and palette.op_type == "constexpr_lut_to_dense"
                    and outliers.op_type == flags.op_type == "constexpr_sparse_to_dense"
                    and op.cond.op.op_type == "cast"
                    and same_palette(palette, raw)
                    and np.array_equal(positions, raw["outlier_indices"].astype(np.int64))
                    and np.array_equal(np.asarray(flags.mask.val), np.asarray(outliers.mask.val))
                    and np.array_equal(outliers.nonzero_data.val.view(np.uint16), raw["outlier_values"].view(np.uint16))
                    and np.array_equal(dense.astype(np.float16).view(np.uint16),
                                       bundle.dequantize(name).astype(np.float16).view(np.uint16)))
            outlier_weights += 1
            palette_values = lut_to_dense(palette.indices.val, palette.lut.val).reshape(-1)[positions]
            replaced += int((palette_values.view(np.uint16) != raw["outlier_values"].view(np.uint16)).sum())
        elif op.op_type == "constexpr_lut_to_dense":
            same = same_palette(op, raw)
        elif op.op_type == "constexpr_blockwise_shift_scale":
            scales = raw["scales"].astype(np.float16).reshape(-1, 1)
            same = (np.array_equal(op.data.val, raw["values"])
                    and np.array_equal(op.scale.val.astype(np.float16).view(np.uint16), scales.view(np.uint16)))
        else:
            same = np.array_equal(np.asarray(op.outputs[0].val, np.float16).view(np.uint16), raw["values"].view(np.uint16))
        compared += 1
        if not same:
            mismatched.append(name)
    kinds = {}
    for record in ours["tensors"]:
        kinds[record["op"]] = kinds.get(record["op"], 0) + 1
    check(f"{arch}: weights read by coremltools equal the bundle's bit for bit",
          not mismatched and compared == len(bundle.tensors),
          f"{compared}/{len(bundle.tensors)} tensors ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})"
          + (f"; {outlier_weights} palettes with outliers recomputed from the op inputs, "
             f"{replaced} outliers differ from their palette entry" if outlier_weights else "")
          + (f"; differ: {mismatched[:5]}" if mismatched else ""))

    # Logits: program (interpreted) vs transcription, prefill then single-token steps.
    rng = np.random.default_rng(11)
    tokens = [int(t) for t in rng.integers(0, bundle.graph["vocab_size"], PREFILL + STEPS)]
    reference = transcription(bundle, tokens)
    scale = float(np.abs(reference).max())
    for fp16, tolerance in ((False, 5e-3), (True, 5e-2)):
        got = run_program(program, bundle.graph, tokens, fp16)
        difference = float(np.abs(got - reference).max())
        agree = int((got.argmax(-1) == reference.argmax(-1)).sum())
        label = "float16 activations" if fp16 else "float32 activations"
        check(f"{arch}: program logits vs transcription ({label})", difference / scale < tolerance,
              f"max |diff| {difference:.3g} over max |logit| {scale:.3g} (relative {difference / scale:.2e}, "
              f"bound {tolerance:g}); argmax agrees at {agree}/{len(tokens)} positions")

    # Logits: program vs exporter's own reference forward pass (Swift, float32, on the
    # dequantised bundle), at each position's top-5 tokens as `verify --run --json` reports them.
    result = subprocess.run(
        [exporter, "verify", os.path.join(folder, arch + ".aimodel"), "--against", checkpoint, "--run",
         "--tokens", ",".join(str(t) for t in tokens), "--json"], capture_output=True, text=True)
    try:
        forward = json.loads(result.stdout)["forward"]
    except (ValueError, KeyError):
        check(f"{arch}: program logits vs exporter's reference forward pass", False, result.stderr.strip()[-400:])
        return
    got = run_program(program, bundle.graph, tokens, False)
    worst, compared = 0.0, 0
    for position in forward["positions"]:
        for entry in position["artifact"]["top5"]:
            worst = max(worst, abs(float(got[position["index"], entry["token"]]) - entry["logit"]))
            compared += 1
    check(f"{arch}: program logits vs exporter's reference forward pass", compared > 0 and worst / scale < 5e-3,
          f"{compared} logits (top-5 of {len(forward['positions'])} positions): max |diff| {worst:.3g} "
          f"(relative {worst / scale:.2e}, bound 5e-3)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exporter", required=True, help="the built exporter binary")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="exporter-coreml-")
    try:
        for arch, spec in ARCHITECTURES.items():
            try:
                check_architecture(os.path.abspath(args.exporter), work, arch, spec)
            except Exception as error:  # report and go on with the next architecture
                check(f"{arch}: {type(error).__name__}", False, str(error)[:600])
    finally:
        if args.keep:
            print("work folder:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"coreml: {len(passes)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
