#!/usr/bin/env python3
"""An independent reference for zerosim's GPT: GPT-2 in plain PyTorch.

    torch_oracle.py inputs DIR [--layers L --hidden C --heads NH --seq T --vocab V]
        writes DIR/init.safetensors (random GPT-2 weights in Hugging Face's
        names, n_head in the metadata) and DIR/tokens.bin (llm.c's token
        format) for `zerosim train --init-from ... --data ...`.
    torch_oracle.py steps INIT ZDUMPS OUT --steps K --lr X --wd Y --clip Z --eps E [--perturb]
        reads the initial weights and, for each step 1..K, the tokens and
        targets of zerosim's dump ZDUMPS/step_00000k.safetensors; runs the
        forward and backward and torch.optim.AdamW, and writes OUT/step_...
        in the dump's names (loss, lr, grad_norm, loss_scale, grad.*, param.*)
        for `zerosim compare`. --perturb uses the exact (erf) GELU instead of
        the tanh one: a control that the comparison can fail.

The model: pre-LayerNorm blocks (eps 1e-5), causal attention, tanh GELU,
learned positions, the head tied to wte; the loss is the mean cross-entropy
over the global batch, AdamW's betas (0.9, 0.95) as zerosim's defaults, decoupled weight decay on every tensor, global-norm clipping, a
constant learning rate. The safetensors reader and writer are a few lines of
struct and json (the safetensors package is not needed).
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

DT = {"F32": (torch.float32, 4), "I32": (torch.int32, 4), "I64": (torch.int64, 8)}


def st_read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, t in header.items():
        dtype, size = DT[t["dtype"]]
        b, e = t["data_offsets"]
        buf = bytearray(data[base + b:base + e])
        x = torch.frombuffer(buf, dtype=dtype) if e > b else torch.zeros(0, dtype=dtype)
        out[name] = x.reshape(t["shape"]).clone()
    return out, meta


def st_write(path, tensors, meta):
    header, blobs, off = {}, [], 0
    names = {torch.float32: "F32", torch.int32: "I32", torch.int64: "I64"}
    for name, x in tensors.items():
        x = x.detach().contiguous().cpu()
        raw = x.numpy().tobytes()
        header[name] = {"dtype": names[x.dtype], "shape": list(x.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    os.replace(tmp, path)


def block_names(i):
    p = "h.%d." % i
    return [p + s for s in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                            "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                            "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight",
                            "mlp.c_proj.bias")]


def all_names(L):
    names = ["wte.weight", "wpe.weight"]
    for i in range(L):
        names += block_names(i)
    return names + ["ln_f.weight", "ln_f.bias"]


def make_inputs(a):
    g = torch.Generator().manual_seed(a.seed)
    C, V, T, L = a.hidden, a.vocab, a.seq, a.layers
    shapes = {"wte.weight": [V, C], "wpe.weight": [T, C], "ln_f.weight": [C], "ln_f.bias": [C]}
    for i in range(L):
        for n, s in zip(block_names(i), ([C], [C], [C, 3 * C], [3 * C], [C, C], [C], [C], [C],
                                         [C, 4 * C], [4 * C], [4 * C, C], [C])):
            shapes[n] = s
    w = {}
    for n in all_names(L):
        if n.endswith("ln_1.weight") or n.endswith("ln_2.weight") or n == "ln_f.weight":
            w[n] = 1.0 + 0.1 * torch.randn(shapes[n], generator=g)
        elif n.endswith("bias"):
            w[n] = 0.02 * torch.randn(shapes[n], generator=g)
        else:
            w[n] = 0.05 * torch.randn(shapes[n], generator=g)
    meta = {"format": "pt", "n_layer": str(L), "n_head": str(a.heads), "n_embd": str(C),
            "n_ctx": str(T), "vocab_size": str(V)}
    st_write(os.path.join(a.dir, "init.safetensors"), w, meta)
    n = a.tokens
    toks = torch.randint(0, V, (n,), generator=g).tolist()
    with open(os.path.join(a.dir, "tokens.bin"), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *toks))


def forward(w, L, NH, tokens, targets, exact_gelu):
    B, T = tokens.shape
    C = w["wte.weight"].shape[1]
    hs = C // NH
    x = w["wte.weight"][tokens.long()] + w["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(L):
        p = "h.%d." % i
        h = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], 1e-5)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: (in, out)
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], 1e-5)
        h = h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
        h = F.gelu(h) if exact_gelu else F.gelu(h, approximate="tanh")
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], 1e-5)
    logits = x @ w["wte.weight"].t()
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1).long())


def run_steps(a):
    init, meta = st_read(a.init)
    L, NH = int(meta["n_layer"]), int(meta["n_head"])
    names = all_names(L)
    w = {n: init[n].clone().requires_grad_(True) for n in names}
    params = [w[n] for n in names]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), eps=a.eps, weight_decay=a.wd)
    for step in range(1, a.steps + 1):
        z, _ = st_read(os.path.join(a.zdumps, "step_%06d.safetensors" % step))
        opt.zero_grad()
        loss = forward(w, L, NH, z["tokens"], z["targets"], a.perturb)
        loss.backward()
        grads = {n: w[n].grad.detach().clone() for n in names}
        norm = torch.nn.utils.clip_grad_norm_(params, a.clip) if a.clip > 0 else \
            torch.sqrt(sum((g.double() ** 2).sum() for g in grads.values())).float()
        opt.step()
        out = {"tokens": z["tokens"], "targets": z["targets"],
               "lr": torch.tensor(a.lr, dtype=torch.float32),
               "loss": loss.detach().float(), "grad_norm": norm.detach().float().reshape(()),
               "loss_scale": torch.tensor(1.0, dtype=torch.float32)}
        for n in names:
            out["grad." + n] = grads[n]
        for n in names:
            out["param." + n] = w[n].detach()
        st_write(os.path.join(a.out, "step_%06d.safetensors" % step), out,
                 {"producer": "torch %s" % torch.__version__, "step": str(step)})


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("inputs")
    i.add_argument("dir")
    for k, v in (("layers", 2), ("hidden", 32), ("heads", 4), ("seq", 16), ("vocab", 64),
                 ("tokens", 4096), ("seed", 1)):
        i.add_argument("--" + k, type=int, default=v)
    s = sub.add_parser("steps")
    s.add_argument("init")
    s.add_argument("zdumps")
    s.add_argument("out")
    s.add_argument("--steps", type=int, default=3)
    s.add_argument("--lr", type=float, default=1e-3)
    s.add_argument("--wd", type=float, default=0.0)
    s.add_argument("--eps", type=float, default=1e-8)
    s.add_argument("--clip", type=float, default=0.0)
    s.add_argument("--perturb", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if a.cmd == "inputs":
        make_inputs(a)
    else:
        run_steps(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
