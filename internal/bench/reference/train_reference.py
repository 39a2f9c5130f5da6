#!/usr/bin/env python3
"""PyTorch (CPU, eager) reference of Parley's training step, the yardstick of
`parley bench train`: the same Llama-style architecture (RMSNorm, rotary
rotate-half, causal attention, SwiGLU, tied embeddings) at the same three
sizes, the same batch (16 sequences of 128 tokens, 16x127 predicted), the
same loss (next-token cross-entropy) and optimiser (AdamW lr 1e-3, betas
(0.9, 0.95), eps 1e-8, weight decay 0.01 on matrices only, global-norm clip
1.0: Parley's DefaultTrainConfig), the same FLOP count (3x
ModelConfig.FLOPsPerToken at every context length) and the same protocol
(interleaved rounds over the sizes, medians).

Run with Debian's python3-torch and libopenblas-dev installed (without it
PyTorch falls back to the reference BLAS): `make bench-reference`, or
  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 train_reference.py [--threads 2]
      [--rounds 3] [--steps 3] [--out FILE.json]
Prints one JSON object: {"sizes": [{"params", "tokens_per_s", "gflops"}...]}.
Adapted from ../shared/tools/anchors/bench_torch.py.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, MAX_SEQ, EPS, THETA = 2048, 512, 1e-5, 10000.0

# (dim, layers, heads, ffn) of bench.DefaultTrainConfig's sizes, default first.
SIZES = [(128, 4, 4, 384), (256, 6, 8, 768), (384, 8, 6, 1152)]


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Block(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.input_layernorm = RMSNorm(d)
        self.q_proj, self.k_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.v_proj, self.o_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.post_attention_layernorm = RMSNorm(d)
        self.gate_proj, self.up_proj = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, d = x.shape
        h = self.input_layernorm(x)
        q, k, v = (p(h).view(b, t, self.heads, self.hd).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(self.hd) + mask).softmax(-1)
        x = x + self.o_proj((att @ v).transpose(1, 2).reshape(b, t, d))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Model(nn.Module):
    def __init__(self, d, layers, heads, ffn):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        self.layers = nn.ModuleList([Block(d, heads, ffn) for _ in range(layers)])
        self.norm = RMSNorm(d)
        hd = d // heads
        inv = 1.0 / (THETA ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        ang = torch.outer(torch.arange(MAX_SEQ, dtype=torch.float64), inv)
        ang = torch.cat((ang, ang), -1)
        self.register_buffer('cos', ang.cos().float(), persistent=False)
        self.register_buffer('sin', ang.sin().float(), persistent=False)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.embed(tokens)
        mask = torch.full((t, t), float('-inf')).triu(1)
        for layer in self.layers:
            x = layer(x, self.cos[:t], self.sin[:t], mask)
        return F.linear(self.norm(x), self.embed.weight)  # tied head


def params(d, layers, ffn):  # Parley's ModelConfig.Params
    return VOCAB * d + layers * (4 * d * d + 3 * d * ffn + 2 * d) + d


def step_flops(d, layers, ffn, batch, seq):  # bench.trainStepFLOPs
    p = params(d, layers, ffn)
    return sum(3 * (2 * p + 4 * layers * d * c) * batch for c in range(1, seq))


class Trainer:
    def __init__(self, size, batch, seq, seed):
        torch.manual_seed(seed)
        self.size, self.batch, self.seq = size, batch, seq
        d, layers, heads, ffn = size
        self.model = Model(d, layers, heads, ffn)
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        rest = [p for p in self.model.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW([{'params': decay, 'weight_decay': 0.01}, {'params': rest, 'weight_decay': 0.0}],
                                     lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
        data = torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))
        self.x, self.y = data[:, :-1], data[:, 1:]
        self.model.train()

    def step(self):
        loss = F.cross_entropy(self.model(self.x).reshape(-1, VOCAB), self.y.reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--steps', type=int, default=3, help='timed steps per round and size')
    ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--seq', type=int, default=128)
    ap.add_argument('--out', default='')
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    trainers = [Trainer(s, a.batch, a.seq, 1) for s in SIZES]
    for t in trainers:
        t.step()  # warm up
    rates = [[] for _ in trainers]
    for _ in range(a.rounds):
        for i, t in enumerate(trainers):
            start = time.perf_counter()
            for _ in range(a.steps):
                t.step()
            rates[i].append(a.batch * (a.seq - 1) * a.steps / (time.perf_counter() - start))
    sizes = []
    for (d, layers, heads, ffn), r in zip(SIZES, rates):
        tps = statistics.median(r)
        sizes.append({'dim': d, 'layers': layers, 'heads': heads, 'ffn': ffn, 'params': params(d, layers, ffn),
                      'tokens_per_s': tps, 'gflops': tps * step_flops(d, layers, ffn, a.batch, a.seq) / (a.batch * (a.seq - 1)) / 1e9})
    rep = {'torch': torch.__version__, 'threads': a.threads, 'batch': a.batch, 'seq': a.seq,
           'rounds': a.rounds, 'steps': a.steps, 'sizes': sizes}
    print(json.dumps(rep, indent=2))
    if a.out:
        with open(a.out, 'w') as f:
            json.dump(rep, f, indent=2)


if __name__ == '__main__':
    main()
