#!/usr/bin/env python3
"""zerosim's Llama in PyTorch from standard ops, timed the way
bench/bench_speed.sh times zerosim: one thread, fp32, AdamW, gradient
clipping at 1.0, the same layout and parameter count (an embedding, blocks
of RMSNorm, q/k/v/o projections without biases, rotate_half RoPE,
grouped-query attention by repeating each key/value head over its query
heads, RMSNorm, a SwiGLU MLP (silu(gate) * up, down), a final RMSNorm and an
untied lm_head).

usage: torch_llama.py LAYERS HIDDEN HEADS KV_HEADS FFN SEQ VOCAB MICRO_BATCH STEPS
prints: "params N" and "step_seconds S1 S2 ..." (every step, the first
included; the caller takes the median of the steady ones).
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, c, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(c))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    d = x.shape[-1] // 2
    return torch.cat((-x[..., d:], x[..., :d]), dim=-1)


class Block(nn.Module):
    def __init__(self, c, nh, kv, f, t):
        super().__init__()
        self.nh, self.kv, self.d = nh, kv, c // nh
        self.norm1 = RMSNorm(c)
        self.q = nn.Linear(c, nh * self.d, bias=False)
        self.k = nn.Linear(c, kv * self.d, bias=False)
        self.v = nn.Linear(c, kv * self.d, bias=False)
        self.o = nn.Linear(nh * self.d, c, bias=False)
        self.norm2 = RMSNorm(c)
        self.gate = nn.Linear(c, f, bias=False)
        self.up = nn.Linear(c, f, bias=False)
        self.down = nn.Linear(f, c, bias=False)
        self.mask = torch.tril(torch.ones(t, t, dtype=torch.bool))

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, t, self.nh, self.d).transpose(1, 2)
        k = self.k(h).view(b, t, self.kv, self.d).transpose(1, 2)
        v = self.v(h).view(b, t, self.kv, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.nh // self.kv, dim=1)
        v = v.repeat_interleave(self.nh // self.kv, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.d))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.o(y)
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, layers, c, nh, kv, f, t, vocab, theta=10000.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, c)
        self.blocks = nn.ModuleList(Block(c, nh, kv, f, t) for _ in range(layers))
        self.norm = RMSNorm(c)
        self.head = nn.Linear(c, vocab, bias=False)
        d = c // nh
        inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        ang = torch.arange(t, dtype=torch.float64)[:, None] * inv[None, :]
        ang = torch.cat((ang, ang), dim=-1)
        self.cos, self.sin = torch.cos(ang).float(), torch.sin(ang).float()

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.embed(idx)
        cos, sin = self.cos[:t], self.sin[:t]
        for blk in self.blocks:
            x = blk(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    layers, c, nh, kv, f, t, vocab, mb, steps = map(int, sys.argv[1:10])
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    model = Llama(layers, c, nh, kv, f, t, vocab)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    n = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(1)
    times = []
    for _ in range(steps):
        idx = torch.randint(vocab, (mb, t), generator=g)
        tgt = torch.randint(vocab, (mb, t), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    print("params", n)
    print("step_seconds", " ".join("%.6f" % s for s in times))


if __name__ == "__main__":
    main()
