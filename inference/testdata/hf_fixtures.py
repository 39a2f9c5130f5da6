#!/usr/bin/env python3
"""Write scaled-down random Hugging Face checkpoints and their reference logits.

Usage: hf_fixtures.py OUTDIR

For each case below, OUTDIR/<case>/ gets config.json and safetensors weights
in exactly the layout transformers writes for that architecture (tensor
names, [out, in] shapes, dtype, sharding with model.safetensors.index.json,
lm_head.weight left out when tied), plus reference.json: token ids and the
logits at every position computed by the plain-torch forward below, in
float64 from the weights as stored. The forward is written from the
architectures' definitions (transformers' modeling_llama / modeling_qwen2)
independently of Parley's Go code; inference/hfweights_test.go compares.

Needs only torch (Debian's python3-torch); neither transformers nor the
safetensors package: the safetensors format is an 8-byte header length, a
JSON header and the raw little-endian data.
"""

import json
import math
import os
import struct
import sys

import torch

CASES = {
    # Llama 3 shape: grouped-query attention, head_dim unlike hidden/heads,
    # llama3 rope scaling, untied lm_head; float32.
    "llama3_gqa_f32": dict(
        arch="LlamaForCausalLM", model_type="llama", dtype="float32",
        hidden=48, inter=96, layers=2, heads=4, kv_heads=2, head_dim=16,
        vocab=97, theta=500000.0, eps=1e-5, tie=False, bias=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        shards=1),
    # Qwen2.5 shape: q/k/v biases, grouped-query attention, tied
    # embeddings; bfloat16, sharded in two with an index.
    "qwen2_bias_bf16_sharded": dict(
        arch="Qwen2ForCausalLM", model_type="qwen2", dtype="bfloat16",
        hidden=48, inter=80, layers=2, heads=6, kv_heads=2, head_dim=None,
        vocab=101, theta=1000000.0, eps=1e-6, tie=True, bias=True,
        rope_scaling=None, shards=2),
    # SmolLM2 shape (Llama layout): grouped-query attention, tied
    # embeddings; float16.
    "smollm2_f16": dict(
        arch="LlamaForCausalLM", model_type="llama", dtype="float16",
        hidden=48, inter=64, layers=2, heads=3, kv_heads=1, head_dim=None,
        vocab=89, theta=100000.0, eps=1e-5, tie=True, bias=False,
        rope_scaling=None, shards=1),
}

TORCH_DTYPE = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
ST_DTYPE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
INT_VIEW = {"float32": torch.int32, "float16": torch.int16, "bfloat16": torch.int16}


def config_json(c):
    hd = c["head_dim"] or c["hidden"] // c["heads"]
    cfg = {
        "architectures": [c["arch"]],
        "model_type": c["model_type"],
        "hidden_size": c["hidden"],
        "intermediate_size": c["inter"],
        "num_hidden_layers": c["layers"],
        "num_attention_heads": c["heads"],
        "num_key_value_heads": c["kv_heads"],
        "vocab_size": c["vocab"],
        "max_position_embeddings": 256,
        "rms_norm_eps": c["eps"],
        "rope_theta": c["theta"],
        "rope_scaling": c["rope_scaling"],
        "tie_word_embeddings": c["tie"],
        "hidden_act": "silu",
        "torch_dtype": c["dtype"],
        "bos_token_id": 1,
        "eos_token_id": 2,
        "initializer_range": 0.02,
        "use_cache": True,
        "transformers_version": "4.46.0",
    }
    if c["model_type"] == "llama":
        cfg.update(attention_bias=False, mlp_bias=False, pretraining_tp=1, head_dim=hd)
    else:
        cfg.update(use_sliding_window=False, sliding_window=32768, max_window_layers=21)
    return cfg


def random_weights(c, gen):
    """Returns the state dict in the order transformers saves it."""
    D, F, V = c["hidden"], c["inter"], c["vocab"]
    hd = c["head_dim"] or D // c["heads"]
    q, kv = c["heads"] * hd, c["kv_heads"] * hd

    def mat(*shape, std=0.15):
        return torch.randn(*shape, generator=gen) * std

    def norm(n):
        return 1 + 0.1 * torch.randn(n, generator=gen)

    w = {"model.embed_tokens.weight": mat(V, D, std=0.5)}
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = mat(q, D)
        w[p + "self_attn.k_proj.weight"] = mat(kv, D)
        w[p + "self_attn.v_proj.weight"] = mat(kv, D)
        if c["bias"]:
            w[p + "self_attn.q_proj.bias"] = mat(q, std=0.3)
            w[p + "self_attn.k_proj.bias"] = mat(kv, std=0.3)
            w[p + "self_attn.v_proj.bias"] = mat(kv, std=0.3)
        w[p + "self_attn.o_proj.weight"] = mat(D, q)
        w[p + "mlp.gate_proj.weight"] = mat(F, D)
        w[p + "mlp.up_proj.weight"] = mat(F, D)
        w[p + "mlp.down_proj.weight"] = mat(D, F)
        w[p + "input_layernorm.weight"] = norm(D)
        w[p + "post_attention_layernorm.weight"] = norm(D)
    w["model.norm.weight"] = norm(D)
    if not c["tie"]:
        w["lm_head.weight"] = mat(V, D, std=0.5)
    dt = TORCH_DTYPE[c["dtype"]]
    return {k: v.to(dt).contiguous() for k, v in w.items()}


def write_safetensors(path, tensors, dtype):
    header, off = {"__metadata__": {"format": "pt"}}, 0
    blobs = []
    for name, t in tensors.items():
        b = t.view(INT_VIEW[dtype]).numpy().tobytes()
        header[name] = {"dtype": ST_DTYPE[dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_weights(out, c, w):
    if c["shards"] == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), w, c["dtype"])
        return
    names = list(w)
    n = c["shards"]
    per = math.ceil(len(names) / n)
    weight_map, total = {}, 0
    for s in range(n):
        file = f"model-{s + 1:05d}-of-{n:05d}.safetensors"
        part = {k: w[k] for k in names[s * per:(s + 1) * per]}
        write_safetensors(os.path.join(out, file), part, c["dtype"])
        for k, t in part.items():
            weight_map[k] = file
            total += t.numel() * t.element_size()
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def inv_frequencies(c, hd):
    inv = 1.0 / (c["theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    rs = c["rope_scaling"]
    if rs is None:
        return inv
    # Llama 3.1's scaling: keep high frequencies, divide low ones by the
    # factor, interpolate smoothly in between.
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    out = []
    for f in inv.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(f)
        elif wavelen > old / low:
            out.append(f / factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out, dtype=torch.float64)


def forward(c, w, tokens):
    """Logits [T, V] of a causal decoder over tokens, in float64."""
    w = {k: v.to(torch.float64) for k, v in w.items()}
    D, H, KV = c["hidden"], c["heads"], c["kv_heads"]
    hd = c["head_dim"] or D // H
    T = len(tokens)

    def rms(x, g):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + c["eps"]) * g

    def rotate(x, cos, sin):  # x [heads, T, hd]; rotate_half pairs i with i+hd/2
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv_frequencies(c, hd))
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos(), ang.sin()
    causal = torch.ones(T, T).tril().bool()
    x = w["model.embed_tokens.weight"][torch.tensor(tokens)]
    for i in range(c["layers"]):
        p = f"model.layers.{i}."

        def proj(name, h):
            y = h @ w[p + name + ".weight"].T
            b = w.get(p + name + ".bias")
            return y if b is None else y + b

        h = rms(x, w[p + "input_layernorm.weight"])
        q = proj("self_attn.q_proj", h).view(T, H, hd).transpose(0, 1)
        k = proj("self_attn.k_proj", h).view(T, KV, hd).transpose(0, 1)
        v = proj("self_attn.v_proj", h).view(T, KV, hd).transpose(0, 1)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        # Query head j reads key/value head j // (H / KV).
        k, v = k.repeat_interleave(H // KV, 0), v.repeat_interleave(H // KV, 0)
        s = (q @ k.transpose(1, 2)) / math.sqrt(hd)
        s = s.masked_fill(~causal, float("-inf"))
        a = (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(T, H * hd)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        g = h @ w[p + "mlp.gate_proj.weight"].T
        u = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (g * torch.sigmoid(g) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"])
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


def main():
    out = sys.argv[1]
    for seed, (name, c) in enumerate(sorted(CASES.items())):
        gen = torch.Generator().manual_seed(1000 + seed)
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config_json(c), f, indent=2)
        w = random_weights(c, gen)
        write_weights(d, c, w)
        tokens = torch.randint(0, c["vocab"], (12,), generator=gen).tolist()
        logits = forward(c, w, tokens)
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump({"tokens": tokens, "logits": logits.tolist()}, f)


if __name__ == "__main__":
    main()
