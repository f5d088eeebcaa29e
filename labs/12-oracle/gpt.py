#!/usr/bin/env python3
"""Lab 12's second implementation: a small GPT-2 in plain PyTorch.

    python3 gpt.py INIT ZDUMPS OUT [--steps K] [--lr X] [--wd Y] [--clip Z]
                   [--eps E] [--variants none,ln-eps,no-scale]

It starts from the weights zerosim exported (INIT, a safetensors file under
Hugging Face's GPT-2 names), trains K steps on the very batches zerosim
trained on (the tokens and targets in zerosim's dump of each step,
ZDUMPS/step_00000k.safetensors), and writes what it computed in the dump's
own names (tokens, targets, lr, loss, grad_norm, loss_scale, grad.<name>,
param.<name>) to OUT/VARIANT/step_00000k.safetensors, for `zerosim compare`.

Each variant is the model as written (none) or with one bug planted, to
see what the comparison says (one process runs them all: importing torch
is the slow part):
    none      GPT-2 as it is
    ln-eps    every LayerNorm with eps 1e-3 instead of GPT-2's 1e-5
    no-scale  attention scores not divided by sqrt(head size)

Written for reading: every layer from torch's basic operations (nothing
from torch.nn but the parameters' container and the gradient clipping),
the optimizer torch.optim.AdamW. The safetensors files are
read and written with struct and json (no safetensors package needed).
"""
import argparse
import json
import math
import os
import struct
import sys

import torch

# ---------------------------------------------------------------- files

DTYPES = {"F32": (torch.float32, 4), "I32": (torch.int32, 4)}


def read_safetensors(path):
    """{name: tensor} and the metadata of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        dtype, _ = DTYPES[t["dtype"]]
        begin, end = t["data_offsets"]
        raw = bytearray(data[8 + n + begin:8 + n + end])
        x = torch.frombuffer(raw, dtype=dtype) if end > begin else torch.zeros(0, dtype=dtype)
        tensors[name] = x.reshape(t["shape"]).clone()
    return tensors, meta


def write_safetensors(path, tensors, meta):
    """Write {name: tensor} (float32 or int32) as safetensors, atomically."""
    header, blobs, offset = {}, [], 0
    for name, x in tensors.items():
        raw = x.detach().contiguous().cpu().numpy().tobytes()
        kind = "F32" if x.dtype == torch.float32 else "I32"
        header[name] = {"dtype": kind, "shape": list(x.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    os.replace(path + ".tmp", path)


# ---------------------------------------------------------------- the model

class GPT(torch.nn.Module):
    """GPT-2: token and position embeddings, L pre-LayerNorm blocks
    (causal self-attention, then an MLP with the tanh GELU), a last
    LayerNorm, and the output head tied to the token embedding."""

    def __init__(self, weights, layers, heads, ln_eps=1e-5, scale=True):
        super().__init__()
        self.layers, self.heads, self.ln_eps, self.scale = layers, heads, ln_eps, scale
        # Hugging Face's names contain dots, which a Module's do not allow
        self.w = torch.nn.ParameterDict(
            {name.replace(".", "/"): torch.nn.Parameter(t.clone()) for name, t in weights.items()})

    def p(self, name):
        return self.w[name.replace(".", "/")]

    def layer_norm(self, x, prefix):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)   # biased, as GPT-2's
        return (x - mean) / torch.sqrt(var + self.ln_eps) * self.p(prefix + ".weight") + self.p(prefix + ".bias")

    def attention(self, x, prefix):
        B, T, C = x.shape
        hs = C // self.heads
        # GPT-2's Conv1D: the weight is (in, out), x @ W + b
        qkv = x @ self.p(prefix + ".c_attn.weight") + self.p(prefix + ".c_attn.bias")
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, hs).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1)
        if self.scale:
            scores = scores / math.sqrt(hs)
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
        scores = scores.masked_fill(~causal, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        return y @ self.p(prefix + ".c_proj.weight") + self.p(prefix + ".c_proj.bias")

    def mlp(self, x, prefix):
        h = x @ self.p(prefix + ".c_fc.weight") + self.p(prefix + ".c_fc.bias")
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))
        return h @ self.p(prefix + ".c_proj.weight") + self.p(prefix + ".c_proj.bias")

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.p("wte.weight")[tokens.long()] + self.p("wpe.weight")[:T]
        for i in range(self.layers):
            b = "h.%d." % i
            x = x + self.attention(self.layer_norm(x, b + "ln_1"), b + "attn")
            x = x + self.mlp(self.layer_norm(x, b + "ln_2"), b + "mlp")
        x = self.layer_norm(x, "ln_f")
        logits = x @ self.p("wte.weight").t()
        # the mean cross-entropy over every position of the global batch
        logp = torch.log_softmax(logits, dim=-1)
        return -logp.gather(-1, targets.long().unsqueeze(-1)).mean()


# ---------------------------------------------------------------- training

VARIANTS = ("none", "ln-eps", "no-scale")


def train(a, weights, meta, variant):
    """Train a.steps steps on zerosim's batches; write a.out/variant/step_*."""
    layers, heads = int(meta["n_layer"]), int(meta["n_head"])
    model = GPT(weights, layers, heads, ln_eps=1e-3 if variant == "ln-eps" else 1e-5,
                scale=variant != "no-scale")
    names = list(weights)
    params = [model.p(n) for n in names]
    # zerosim's AdamW: betas (0.9, 0.95), decoupled weight decay on every tensor
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), eps=a.eps, weight_decay=a.wd)
    out_dir = os.path.join(a.out, variant)
    os.makedirs(out_dir, exist_ok=True)
    for step in range(1, a.steps + 1):
        batch, _ = read_safetensors(os.path.join(a.zdumps, "step_%06d.safetensors" % step))
        opt.zero_grad()
        loss = model(batch["tokens"], batch["targets"])
        loss.backward()
        grads = {n: model.p(n).grad.detach().clone() for n in names}   # before clipping
        norm = torch.nn.utils.clip_grad_norm_(params, a.clip)
        opt.step()
        # the batch trained on, echoed: the comparison shows it is zerosim's
        out = {"tokens": batch["tokens"], "targets": batch["targets"],
               "lr": torch.tensor(a.lr, dtype=torch.float32),
               "loss": loss.detach().reshape(()), "grad_norm": norm.detach().float().reshape(()),
               "loss_scale": torch.tensor(1.0, dtype=torch.float32)}
        out.update({"grad." + n: grads[n] for n in names})
        out.update({"param." + n: model.p(n).detach() for n in names})
        write_safetensors(os.path.join(out_dir, "step_%06d.safetensors" % step), out,
                          {"producer": "labs/12-oracle/gpt.py, torch " + torch.__version__,
                           "step": str(step), "variant": variant})
        print("%s step %d: loss %.6f, grad norm %.6f" % (variant, step, loss.item(), norm.item()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("init")
    ap.add_argument("zdumps")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=0.1)
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--variants", default="none")
    a = ap.parse_args()
    variants = a.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            ap.error("--variants: unknown variant '%s' (known: %s)" % (v, ", ".join(VARIANTS)))
    torch.set_num_threads(1)
    weights, meta = read_safetensors(a.init)
    for v in variants:
        train(a, weights, meta, v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
