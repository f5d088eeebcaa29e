#!/usr/bin/env python3
"""PyTorch's CPU AdamW on one thread, timed for bench/bench_adam.sh: N fp32
elements (parameters, gradients and the two moments), the median of REPS
steps after two warm-up steps, for each of PyTorch's implementations that
this version has (the per-tensor loop, and foreach).

usage: torch_adam.py N REPS
prints one line per implementation: "<name> elements_per_s R"
"""
import statistics
import sys
import time

import torch

torch.set_num_threads(1)
n, reps = int(sys.argv[1]), int(sys.argv[2])
for name, kw in (("torch_adamw_loop", {"foreach": False}), ("torch_adamw_foreach", {"foreach": True})):
    p = torch.nn.Parameter(torch.randn(n))
    p.grad = torch.randn(n) * 1e-2
    try:
        opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.1, **kw)
    except TypeError:  # an older PyTorch without the foreach switch
        continue
    times = []
    for i in range(reps + 2):
        t0 = time.perf_counter()
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    print(name, "elements_per_s", n / statistics.median(times))
