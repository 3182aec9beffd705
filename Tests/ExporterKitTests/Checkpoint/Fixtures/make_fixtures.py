"""Writes the safetensors fixtures of CheckpointFixtureTests with the reference library.

Run once (needs `pip install safetensors numpy`); the outputs are committed, so the tests
never need Python:

    python3 make_fixtures.py            # from this folder

The values are chosen exactly representable in their dtype; the Swift tests restate them.
"""

import json
import os

import numpy as np
from safetensors import serialize_file
from safetensors.numpy import save_file

try:
    from safetensors import TensorSpec
except ImportError:  # older releases take plain dicts
    TensorSpec = None

HERE = os.path.dirname(os.path.abspath(__file__))


def bf16_bits(values):
    """float32 → bfloat16 bit patterns; the values are exact in bfloat16, so truncation is exact."""
    as_f32 = np.asarray(values, dtype="<f4")
    bits = as_f32.view("<u4") >> 16
    assert np.array_equal((bits << 16).view("<f4"), as_f32), "value not exact in bfloat16"
    return bits.astype("<u2")


def spec(dtype, array):
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    if TensorSpec is not None:
        return TensorSpec(dtype=dtype, shape=list(array.shape), data_ptr=array.ctypes.data, data_len=array.nbytes)
    return {"dtype": dtype, "shape": list(array.shape), "data": array.tobytes()}


def write_bf16_file(path, tensors, metadata=None):
    """tensors: name -> (shape, float values exact in bfloat16)."""
    keep = {name: bf16_bits(values).reshape(shape) for name, (shape, values) in tensors.items()}
    serialize_file({name: spec("bfloat16", array) for name, array in keep.items()}, path, metadata=metadata)


def main():
    # 1. One file, every readable dtype plus an unsupported one, an empty tensor and a scalar.
    mixed = os.path.join(HERE, "mixed.safetensors")
    bf16_values = [1.0, -2.5, 0.15625, 3.140625, 65280.0, -0.0, 2.0**-20, -448.0]
    bf16 = bf16_bits(bf16_values).reshape(2, 4)
    f16 = np.array([0.5, -1.25, 2.0**-24, 65504.0, 0.0999755859375], dtype="<f2")
    f32 = np.array([[1.5, -3.25, 1e-8], [0.1, 70000.0, -65519.0]], dtype="<f4")
    i32 = np.array([1, -2, 3], dtype="<i4")
    empty = np.zeros((0, 4), dtype="<f4")
    scalar = np.array(42.0, dtype="<f4")
    keep = [bf16, f16, f32, i32, empty, scalar]
    serialize_file(
        {
            "model.bf16": spec("bfloat16", bf16),
            "model.f16": spec("float16", f16),
            "model.f32": spec("float32", f32),
            "model.i32": spec("int32", i32),
            "model.empty": spec("float32", empty),
            "model.scalar": spec("float32", scalar),
        },
        mixed,
        metadata={"format": "pt", "source": "make_fixtures.py"},
    )
    del keep

    # 2. The same three bf16 tensors as one file and as two shards with an index.
    tensors = {
        "model.embed_tokens.weight": ((4, 3), [0.5 * i - 2 for i in range(12)]),
        "model.layers.0.mlp.down_proj.weight": ((3, 2), [1.0, -1.0, 0.25, -0.25, 8.0, -8.0]),
        "model.norm.weight": ((3,), [1.0, 1.0078125, 0.9921875]),
    }
    single = os.path.join(HERE, "single")
    sharded = os.path.join(HERE, "sharded")
    os.makedirs(single, exist_ok=True)
    os.makedirs(sharded, exist_ok=True)
    write_bf16_file(os.path.join(single, "model.safetensors"), tensors, {"format": "pt"})
    shards = {
        "model-00001-of-00002.safetensors": ["model.embed_tokens.weight"],
        "model-00002-of-00002.safetensors": ["model.layers.0.mlp.down_proj.weight", "model.norm.weight"],
    }
    weight_map = {}
    for shard, names in shards.items():
        write_bf16_file(os.path.join(sharded, shard), {n: tensors[n] for n in names}, {"format": "pt"})
        weight_map.update({n: shard for n in names})
    total = sum(2 * int(np.prod(shape)) for shape, _ in tensors.values())
    with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as index:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, index, indent=2, sort_keys=True)
        index.write("\n")


if __name__ == "__main__":
    main()
