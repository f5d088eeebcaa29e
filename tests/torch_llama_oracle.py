#!/usr/bin/env python3
"""An independent reference for zerosim's Llama family, in plain PyTorch.

    torch_llama_oracle.py tokens DIR --vocab V [--tokens N --seed S]
        writes DIR/tokens.bin (llm.c's token format) for `zerosim train --data`.
    torch_llama_oracle.py steps ZDUMPS OUT --heads NH --kv-heads KV --steps K
            --lr X --wd Y --clip Z --adam-eps E [--norm-eps E] [--theta X]
            [--dtype float64|float32] [--perturb] [--micro-batch B --top-k K --aux A]
        reads the initial parameters from zerosim's dump of step 0
        (ZDUMPS/step_000000.safetensors, param.<Hugging Face name>) and, for
        each step 1..K, the tokens and targets of ZDUMPS/step_00000k; runs
        the forward, the backward and torch.optim.AdamW in DTYPE and writes
        OUT/step_... in the dump's names (float32) for `zerosim compare`.
        --perturb rotates RoPE's interleaved pairs (2i, 2i + 1) instead of
        rotate_half's (i, i + D/2): a control that the comparison can fail.
        A dump with block_sparse_moe tensors is a Mixtral model (below):
        its objective is per micro-batch of B rows of the step's tokens
        (zerosim's micro-batch j holds samples jB .. jB + B - 1), averaged.
    torch_llama_oracle.py judge ZDUMPS T64 T32 --steps K [--factor F]
        for each step and each of loss, grad_norm, the gradients and the
        parameters: zerosim's largest |zerosim - float64| relative to each
        tensor's largest value must be at most F times float32 PyTorch's
        largest (its own float32 error), or 2 float32 ulps; prints both.

The model (Hugging Face's LlamaForCausalLM, written from standard ops):
RMSNorm (x * rsqrt(mean(x^2) + eps) * w), q/k/v projections (with their
biases when the dump has them: Qwen2), rotate_half RoPE with the table of
cos and sin built in float64 (as docs/numerics.md says an oracle should),
grouped-query attention by repeating each key/value head over its
NH / KV query heads, causal softmax, o_proj, SwiGLU (silu(gate) * up,
down), the final norm and lm_head (the embedding when the dump has no
lm_head.weight: tied). A Mixtral block (Hugging Face's MixtralSparseMoeBlock):
the router's softmax over all E experts, the top K, their weights divided
by their sum, each token through its K experts (experts.{e}.w1 gate, w3
up, w2 down: SwiGLU) and weighted, nothing dropped; the objective adds A
times DeepSpeed's load-balancing loss of each block, E * sum_e mean(gates
of e) * mean(first choice is e) (zerosim's, docs/moe.md). The loss is the mean cross-entropy over the global
batch; AdamW with betas (0.9, 0.95) (zerosim's defaults), decoupled weight
decay on every tensor, global-norm clipping, a constant learning rate.
"""
import argparse
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_oracle import st_read, st_write  # noqa: E402


def write_tokens(a):
    g = torch.Generator().manual_seed(a.seed)
    n = a.tokens
    toks = torch.randint(0, a.vocab, (n,), generator=g).tolist()
    with open(os.path.join(a.dir, "tokens.bin"), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *toks))


def rope_table(T, D, theta, dtype):
    i = torch.arange(D // 2, dtype=torch.float64)
    inv_freq = theta ** (-(2.0 * i) / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def rope(x, cos, sin, interleaved):
    """x (B, H, T, D); cos, sin (T, D/2)."""
    D = x.shape[-1]
    if interleaved:  # the control: pairs (2i, 2i + 1)
        a, b = x[..., 0::2], x[..., 1::2]
        ra, rb = a * cos - b * sin, b * cos + a * sin
        return torch.stack((ra, rb), dim=-1).flatten(-2)
    a, b = x[..., : D // 2], x[..., D // 2:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def moe(w, p, h, k):
    """A Mixtral block's MLP over h (B, T, C); returns it and l_aux."""
    B, T, C = h.shape
    x = h.reshape(B * T, C)
    gate = w[p + "block_sparse_moe.gate.weight"]
    E = gate.shape[0]
    gates = (x @ gate.t()).softmax(dim=-1)
    top, idx = gates.topk(k, dim=-1)
    weight = top / top.sum(dim=-1, keepdim=True)
    y = torch.zeros_like(x)
    for e in range(E):
        rows, slot = (idx == e).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        xe = x[rows]
        q = p + "block_sparse_moe.experts.%d." % e
        out = (F.silu(xe @ w[q + "w1.weight"].t()) * (xe @ w[q + "w3.weight"].t())) @ \
            w[q + "w2.weight"].t()
        y = y.index_add(0, rows, out * weight[rows, slot][:, None])
    first = F.one_hot(idx[:, 0], E).to(gates.dtype)
    l_aux = E * (gates.mean(dim=0) * first.mean(dim=0)).sum()
    return y.view(B, T, C), l_aux


def forward(w, L, NH, KV, eps, table, tokens, targets, perturb, top_k=2, aux=0.0):
    B, T = tokens.shape
    C = w["model.embed_tokens.weight"].shape[1]
    D = C // NH
    cos, sin = table[0][:T], table[1][:T]
    x = w["model.embed_tokens.weight"][tokens.long()]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    aux_sum = 0.0
    for i in range(L):
        p = "model.layers.%d." % i
        h = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
        qkv = []
        for n, heads in (("q", NH), ("k", KV), ("v", KV)):
            y = h @ w[p + "self_attn.%s_proj.weight" % n].t()
            if p + "self_attn.%s_proj.bias" % n in w:
                y = y + w[p + "self_attn.%s_proj.bias" % n]
            qkv.append(y.view(B, T, heads, D).transpose(1, 2))
        q, k, v = qkv
        q, k = rope(q, cos, sin, perturb), rope(k, cos, sin, perturb)
        k = k.repeat_interleave(NH // KV, dim=1)
        v = v.repeat_interleave(NH // KV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, NH * D)
        x = x + y @ w[p + "self_attn.o_proj.weight"].t()
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        if p + "block_sparse_moe.gate.weight" in w:
            y, l_aux = moe(w, p, h, top_k)
            x = x + y
            aux_sum = aux_sum + aux * l_aux
            continue
        g = h @ w[p + "mlp.gate_proj.weight"].t()
        u = h @ w[p + "mlp.up_proj.weight"].t()
        x = x + (F.silu(g) * u) @ w[p + "mlp.down_proj.weight"].t()
    x = rmsnorm(x, w["model.norm.weight"], eps)
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    logits = x @ head.t()
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1).long()) + aux_sum


def run_steps(a):
    dt = torch.float64 if a.dtype == "float64" else torch.float32
    init, _ = st_read(os.path.join(a.zdumps, "step_000000.safetensors"))
    names = [n[len("param."):] for n in init if n.startswith("param.")]
    L = 1 + max(int(n.split(".")[2]) for n in names if n.startswith("model.layers."))
    w = {n: init["param." + n].to(dt).clone().requires_grad_(True) for n in names}
    params = [w[n] for n in names]
    C = w["model.embed_tokens.weight"].shape[1]
    z1, _ = st_read(os.path.join(a.zdumps, "step_000001.safetensors"))
    table = rope_table(z1["tokens"].shape[1], C // a.heads, a.theta, dt)
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), eps=a.adam_eps,
                            weight_decay=a.wd)
    for step in range(1, a.steps + 1):
        z, _ = st_read(os.path.join(a.zdumps, "step_%06d.safetensors" % step))
        opt.zero_grad()
        tok, tgt = z["tokens"], z["targets"]
        mb = a.micro_batch or tok.shape[0]
        parts = [forward(w, L, a.heads, a.kv_heads, a.norm_eps, table, tok[j:j + mb],
                         tgt[j:j + mb], a.perturb, a.top_k, a.aux)
                 for j in range(0, tok.shape[0], mb)]
        loss = sum(parts) / len(parts)
        loss.backward()
        grads = {n: w[n].grad.detach().clone() for n in names}
        norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads.values()))
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.clip)
        opt.step()
        f32 = torch.float32
        out = {"tokens": z["tokens"], "targets": z["targets"],
               "lr": torch.tensor(a.lr, dtype=f32),
               "loss": loss.detach().to(f32), "grad_norm": norm.to(f32).reshape(()),
               "loss_scale": torch.tensor(1.0, dtype=f32)}
        for n in names:
            out["grad." + n] = grads[n].to(f32)
        for n in names:
            out["param." + n] = w[n].detach().to(f32)
        st_write(os.path.join(a.out, "step_%06d.safetensors" % step), out,
                 {"producer": "torch %s %s" % (torch.__version__, a.dtype), "step": str(step)})


def judge(a):
    """zerosim's distance to float64 PyTorch against float32 PyTorch's: per
    tensor the largest absolute difference over the tensor's largest
    reference value (relative to its scale); per group of tensors the
    largest of those."""
    bad = 0
    floor = 2.0 * 2.0 ** -23  # 2 float32 ulps of the tensor's scale
    for step in range(1, a.steps + 1):
        f = "step_%06d.safetensors" % step
        z, _ = st_read(os.path.join(a.zdumps, f))
        r, _ = st_read(os.path.join(a.t64, f))
        s, _ = st_read(os.path.join(a.t32, f))
        groups = {"loss": ["loss"], "grad_norm": ["grad_norm"],
                  "grad.": [n for n in r if n.startswith("grad.")],
                  "param.": [n for n in r if n.startswith("param.")]}
        for g, names in groups.items():
            ez = e32 = 0.0
            worst = ""
            for n in names:
                ref = r[n].double()
                scale = max(ref.abs().max().item(), 1e-30)
                dz = (z[n].double() - ref).abs().max().item() / scale
                d32 = (s[n].double() - ref).abs().max().item() / scale
                if dz > ez:
                    ez, worst = dz, n
                e32 = max(e32, d32)
            ok = ez <= max(a.factor * e32, floor)
            print("  step %d %-10s max |zerosim - float64| %.2e (%s)   max |float32 - float64| %.2e%s"
                  % (step, g, ez, worst, e32, "" if ok else "   FAIL"))
            bad += not ok
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokens")
    t.add_argument("dir")
    t.add_argument("--vocab", type=int, required=True)
    t.add_argument("--tokens", type=int, default=4096)
    t.add_argument("--seed", type=int, default=1)
    s = sub.add_parser("steps")
    s.add_argument("zdumps")
    s.add_argument("out")
    s.add_argument("--heads", type=int, required=True)
    s.add_argument("--kv-heads", type=int, required=True)
    s.add_argument("--steps", type=int, default=3)
    s.add_argument("--lr", type=float, default=1e-3)
    s.add_argument("--wd", type=float, default=0.0)
    s.add_argument("--adam-eps", type=float, default=1e-8)
    s.add_argument("--clip", type=float, default=0.0)
    s.add_argument("--norm-eps", type=float, default=1e-5)
    s.add_argument("--theta", type=float, default=10000.0)
    s.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    s.add_argument("--perturb", action="store_true")
    s.add_argument("--micro-batch", type=int, default=0)
    s.add_argument("--top-k", type=int, default=2)
    s.add_argument("--aux", type=float, default=0.0)
    j = sub.add_parser("judge")
    j.add_argument("zdumps")
    j.add_argument("t64")
    j.add_argument("t32")
    j.add_argument("--steps", type=int, default=3)
    j.add_argument("--factor", type=float, default=4.0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if a.cmd == "tokens":
        write_tokens(a)
        return 0
    if a.cmd == "steps":
        run_steps(a)
        return 0
    return judge(a)


if __name__ == "__main__":
    sys.exit(main())
