#!/usr/bin/env python3
"""The GPT of zerosim in PyTorch, timed the way bench/bench_speed.sh times
zerosim: one thread, fp32, AdamW, gradient clipping at 1.0, the same layout
(token and position embeddings, pre-LayerNorm blocks with a fused qkv
projection and a 4x MLP with tanh GELU, a final LayerNorm, the head tied to
the token embedding) and the same parameter count.

usage: torch_gpt.py LAYERS HIDDEN HEADS SEQ VOCAB MICRO_BATCH STEPS
prints: "params N" and "step_seconds S1 S2 ..." (every step, the first
included; the caller takes the median of the steady ones).
With DDP=1 in the environment, under torchrun-style variables (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), it trains data-parallel over gloo
(ZERO1=1: with ZeroRedundancyOptimizer).
"""
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, nh, t):
        super().__init__()
        self.nh = nh
        self.ln1 = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c)
        self.fc = nn.Linear(c, 4 * c)
        self.fcp = nn.Linear(4 * c, c)
        self.mask = torch.tril(torch.ones(t, t, dtype=torch.bool))  # not a buffer: gloo cannot broadcast bool

    def forward(self, x):
        b, t, c = x.shape
        hs = c // self.nh
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, self.nh, hs).transpose(1, 2)
        k = k.view(b, t, self.nh, hs).transpose(1, 2)
        v = v.view(b, t, self.nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.fcp(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, c, nh, t, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(t, c)
        self.blocks = nn.ModuleList(Block(c, nh, t) for _ in range(layers))
        self.lnf = nn.LayerNorm(c)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for blk in self.blocks:
            x = blk(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    layers, c, nh, t, vocab, mb, steps = map(int, sys.argv[1:8])
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    model = GPT(layers, c, nh, t, vocab)
    ddp = os.environ.get("DDP") == "1"
    if ddp:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        dist.init_process_group("gloo")
        model = DistributedDataParallel(model)
    params = model.parameters()
    if ddp and os.environ.get("ZERO1") == "1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=3e-3,
                                      betas=(0.9, 0.95), weight_decay=0.0)
    else:
        opt = torch.optim.AdamW(params, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
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
    if not ddp or int(os.environ.get("RANK", "0")) == 0:
        print("params", n)
        print("step_seconds", " ".join("%.6f" % s for s in times))


if __name__ == "__main__":
    main()
