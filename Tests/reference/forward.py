#!/usr/bin/env python3
"""An independent NumPy transcription of the Qwen2, Qwen3 and Mistral decoders, written from
the Hugging Face `transformers` modeling files (modeling_qwen2.py, modeling_qwen3.py,
modeling_mistral.py), not from our Swift code.

It computes the logits of tiny models whose weights follow a formula both sides can
reproduce exactly, and writes them to `known_logits.json` beside this script. The Swift test
`ReferenceModelTests` compares `ReferenceModel` with those numbers to 1e-4, so the test needs
no Python; rerun this script (`python3 Tests/reference/forward.py`) only when the models or
the formula change. Needs numpy only.

Weight formula, for tensor `name` of shape `shape`, element `i` (row-major):
    k = sum((j + 1) * ord(c) for j, c in enumerate(name)) mod 2^32
    u = ((i + 1) * 2654435761 + (k + 1) * 2246822519) mod 2^32, scaled to [0, 1) by 2^-32
    norm weights (name ends in 'norm.weight'): 1 + 0.2 * (u - 0.5)
    biases (name ends in 'bias'):               0.2 * (u - 0.5)
    matrices:                                   (u - 0.5) * 2 * 1.7 / sqrt(columns)
computed in float64 and rounded once to float32.
"""
import json
import os

import numpy as np

MODELS = {
    "qwen2": dict(hidden=32, intermediate=48, layers=2, heads=4, kv_heads=2, head_dim=8, vocab=64, theta=10000.0,
                  eps=1e-6, qkv_bias=True, qk_norm=False, tied=False, window=None),
    "qwen3": dict(hidden=32, intermediate=40, layers=2, heads=4, kv_heads=1, head_dim=16, vocab=64, theta=1000000.0,
                  eps=1e-6, qkv_bias=False, qk_norm=True, tied=True, window=None),
    "mistral": dict(hidden=32, intermediate=64, layers=2, heads=4, kv_heads=2, head_dim=8, vocab=64, theta=10000.0,
                    eps=1e-5, qkv_bias=False, qk_norm=False, tied=False, window=4),
}
TOKENS = [3, 17, 42, 8, 63, 0, 25]


def weight(name, shape):
    k = sum((j + 1) * ord(c) for j, c in enumerate(name)) % 2**32
    count = int(np.prod(shape))
    i = np.arange(count, dtype=np.uint64)
    u = ((i + np.uint64(1)) * np.uint64(2654435761) + np.uint64((k + 1) * 2246822519 % 2**32)) % np.uint64(2**32)
    u = u.astype(np.float64) / 2.0**32
    if name.endswith("norm.weight"):
        values = 1.0 + 0.2 * (u - 0.5)
    elif name.endswith("bias"):
        values = 0.2 * (u - 0.5)
    else:
        values = (u - 0.5) * 2.0 * 1.7 / np.sqrt(shape[-1])
    return values.astype(np.float32).reshape(shape)


def rms_norm(x, w, eps):
    # Qwen2RMSNorm / MistralRMSNorm: x * rsqrt(mean(x^2) + eps) * w, in float32.
    variance = np.mean(x * x, axis=-1, keepdims=True)
    return (x / np.sqrt(variance + np.float32(eps))).astype(np.float32) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def forward(c, tokens):
    h, d = c["hidden"], c["head_dim"]
    n, kv = c["heads"], c["kv_heads"]
    t = len(tokens)
    embed = weight("model.embed_tokens.weight", [c["vocab"], h])
    x = embed[tokens]  # [t, h]
    # Rotary: inv_freq = theta^(-2i/d); emb = cat(freqs, freqs).
    inv_freq = 1.0 / (c["theta"] ** (np.arange(0, d, 2, dtype=np.float64) / d))
    freqs = np.outer(np.arange(t, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)  # [t, d]
    # Causal mask, with Mistral's sliding window: key s visible from query q when q - window < s <= q.
    q_idx = np.arange(t)[:, None]
    k_idx = np.arange(t)[None, :]
    visible = k_idx <= q_idx
    if c["window"] is not None:
        visible &= k_idx > q_idx - c["window"]
    for layer in range(c["layers"]):
        p = f"model.layers.{layer}."
        residual = x
        hs = rms_norm(x, weight(p + "input_layernorm.weight", [h]), c["eps"])

        def proj(name, out):
            y = hs @ weight(p + f"self_attn.{name}.weight", [out, h]).T
            if c["qkv_bias"]:
                y = y + weight(p + f"self_attn.{name}.bias", [out])
            return y

        q = proj("q_proj", n * d).reshape(t, n, d)
        k = proj("k_proj", kv * d).reshape(t, kv, d)
        v = proj("v_proj", kv * d).reshape(t, kv, d)
        if c["qk_norm"]:  # Qwen3: RMSNorm over head_dim, per head, before the rotation.
            q = rms_norm(q, weight(p + "self_attn.q_norm.weight", [d]), c["eps"])
            k = rms_norm(k, weight(p + "self_attn.k_norm.weight", [d]), c["eps"])
        q = q * cos[:, None, :] + rotate_half(q) * sin[:, None, :]
        k = k * cos[:, None, :] + rotate_half(k) * sin[:, None, :]
        # repeat_kv: query head j uses key/value head j // (n // kv).
        k = np.repeat(k, n // kv, axis=1)
        v = np.repeat(v, n // kv, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) * np.float32(d ** -0.5)
        scores = np.where(visible[None], scores, -np.inf)
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs = probs / probs.sum(axis=-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", probs, v).reshape(t, n * d)
        x = residual + attn @ weight(p + "self_attn.o_proj.weight", [h, n * d]).T
        residual = x
        hs = rms_norm(x, weight(p + "post_attention_layernorm.weight", [h]), c["eps"])
        gate = hs @ weight(p + "mlp.gate_proj.weight", [c["intermediate"], h]).T
        up = hs @ weight(p + "mlp.up_proj.weight", [c["intermediate"], h]).T
        silu = gate / (1.0 + np.exp(-gate))
        x = residual + (silu * up) @ weight(p + "mlp.down_proj.weight", [h, c["intermediate"]]).T
    x = rms_norm(x, weight("model.norm.weight", [h]), c["eps"])
    head = embed if c["tied"] else weight("lm_head.weight", [c["vocab"], h])
    return (x @ head.T).astype(np.float32)


def main():
    out = {"tokens": TOKENS, "models": {}}
    for family, config in MODELS.items():
        logits = forward(config, TOKENS)
        out["models"][family] = {"config": config, "logits": [[float(v) for v in row] for row in logits]}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "known_logits.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
