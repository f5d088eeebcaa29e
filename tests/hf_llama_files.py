#!/usr/bin/env python3
"""Hugging Face-style Llama checkpoints for tests/test_hf_weights.sh, written
the way transformers' save_pretrained lays them out, independently of
zerosim's writer (plain Python: struct and json, no safetensors package).

  write DIR ...   random float32 tensors under LlamaForCausalLM's names and
                  (out, in) shapes, state_dict order, metadata {"format":
                  "pt"} only (no head counts), as DIR/model.safetensors or,
                  with --shard-bytes, model-0000k-of-0000n.safetensors and a
                  model.safetensors.index.json whose weight_map is sorted by
                  name; and DIR/config.json. Options damage the result for
                  the refusal tests (--drop, --dup, --bad-shape, --extra).
  tokens FILE     a token file in llm.c's format (uint16 tokens).
  same DIR DUMP   every tensor of DIR's checkpoint equals the dump's
                  param.<name> bit for bit, and the dump has no other param.
  loss DIR DUMP   (torch) the loss of DIR's weights on the dump's tokens
                  (float64, transformers' Llama arithmetic written from
                  standard ops: tests/torch_llama_oracle.py's forward, RoPE
                  by rotate_half) equals the dump's loss within 1e-5
                  relative; --interleaved pairs RoPE's dimensions (2i, 2i+1),
                  the control that must fail. With --experts E the blocks
                  are Mixtral's (MixtralForCausalLM: block_sparse_moe.gate
                  and experts.{e}.w1/w2/w3, config num_local_experts,
                  num_experts_per_tok, router_aux_loss_coef), and loss's
                  objective is per --micro-batch rows, averaged, with the
                  load-balancing term the config weighs.
"""
import argparse
import json
import os
import random
import struct
import sys


def names_shapes(a):
    C, F, V = a.hidden, a.ffn, a.vocab
    D = C // a.heads
    out = [("model.embed_tokens.weight", [V, C])]
    for i in range(a.layers):
        p = "model.layers.%d." % i
        out.append((p + "self_attn.q_proj.weight", [a.heads * D, C]))
        if a.bias:
            out.append((p + "self_attn.q_proj.bias", [a.heads * D]))
        out.append((p + "self_attn.k_proj.weight", [a.kv_heads * D, C]))
        if a.bias:
            out.append((p + "self_attn.k_proj.bias", [a.kv_heads * D]))
        out.append((p + "self_attn.v_proj.weight", [a.kv_heads * D, C]))
        if a.bias:
            out.append((p + "self_attn.v_proj.bias", [a.kv_heads * D]))
        out.append((p + "self_attn.o_proj.weight", [C, a.heads * D]))
        if a.inv_freq:  # older transformers saved this buffer
            out.append((p + "self_attn.rotary_emb.inv_freq", [D // 2]))
        if a.experts:  # MixtralSparseMoeBlock: the router, then each expert's w1, w2, w3
            out.append((p + "block_sparse_moe.gate.weight", [a.experts, C]))
            for e in range(a.experts):
                q = p + "block_sparse_moe.experts.%d." % e
                out += [(q + "w1.weight", [F, C]), (q + "w2.weight", [C, F]),
                        (q + "w3.weight", [F, C])]
        else:
            out.append((p + "mlp.gate_proj.weight", [F, C]))
            out.append((p + "mlp.up_proj.weight", [F, C]))
            out.append((p + "mlp.down_proj.weight", [C, F]))
        out.append((p + "input_layernorm.weight", [C]))
        out.append((p + "post_attention_layernorm.weight", [C]))
    out.append(("model.norm.weight", [C]))
    if not a.tied:
        out.append(("lm_head.weight", [V, C]))
    return out


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def st_bytes(tensors):
    """tensors: [(name, shape, raw bytes)] -> a safetensors file's bytes."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, raw in tensors:
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(raw for _, _, raw in tensors)


def write(a):
    rng = random.Random(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    tensors = []
    for name, shape in names_shapes(a):
        if name == a.drop:
            continue
        if name == a.bad_shape:
            shape = [shape[0] + 1] + shape[1:]
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            vals = [1.0 + 0.1 * rng.gauss(0.0, 1.0) for _ in range(numel(shape))]
        else:  # q and k (and the router) large enough that attention, RoPE and routing show
            std = 0.5 if ("q_proj" in name or "k_proj" in name or "moe.gate" in name) else 0.02
            vals = [std * rng.gauss(0.0, 1.0) for _ in range(numel(shape))]
        tensors.append((name, shape, struct.pack("<%df" % len(vals), *vals)))
    if a.extra:
        tensors.append((a.extra, [2], struct.pack("<2f", 0.0, 1.0)))
    shards, cur, size = [], [], 0
    for t in tensors:
        if a.shard_bytes and cur and size + len(t[2]) > a.shard_bytes:
            shards.append(cur)
            cur, size = [], 0
        cur.append(t)
        size += len(t[2])
    shards.append(cur)
    if len(shards) == 1 and not a.shard_bytes:
        with open(os.path.join(a.dir, "model.safetensors"), "wb") as f:
            f.write(st_bytes(shards[0]))
    else:
        n, wmap = len(shards), {}
        for k, sh in enumerate(shards):
            fn = "model-%05d-of-%05d.safetensors" % (k + 1, n)
            body = list(sh)
            if a.dup and k == n - 1:  # a tensor of the first shard again
                body += [t for t in shards[0] if t[0] == a.dup]
            with open(os.path.join(a.dir, fn), "wb") as f:
                f.write(st_bytes(body))
            for t in sh:
                wmap[t[0]] = fn
        total = sum(len(t[2]) for t in tensors)
        with open(os.path.join(a.dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total},
                       "weight_map": dict(sorted(wmap.items()))}, f, indent=2)
    arch, mt = ("Qwen2ForCausalLM", "qwen2") if a.bias else ("LlamaForCausalLM", "llama")
    if a.experts:
        arch, mt = "MixtralForCausalLM", "mixtral"
    cfg = {"architectures": [arch], "model_type": mt,
           "hidden_size": a.hidden, "intermediate_size": a.ffn,
           "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
           "num_key_value_heads": a.kv_heads, "vocab_size": a.vocab,
           "max_position_embeddings": a.seq, "rms_norm_eps": a.eps, "rope_theta": a.theta,
           "tie_word_embeddings": bool(a.tied), "hidden_act": "silu",
           "torch_dtype": "float32"}
    if not a.bias and not a.experts:
        cfg["attention_bias"] = False
    if a.experts:
        cfg.update({"num_local_experts": a.experts, "num_experts_per_tok": a.top_k,
                    "router_aux_loss_coef": a.aux, "output_router_logits": False,
                    "sliding_window": None})
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def tokens(a):
    rng = random.Random(a.seed)
    toks = [rng.randrange(a.vocab) for _ in range(a.count)]
    with open(a.file, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, a.count, *([0] * 253)))
        f.write(struct.pack("<%dH" % a.count, *toks))


def st_raw(path):
    """name -> (dtype, shape, raw bytes) of one safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}


def checkpoint_raw(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(idx):
        return st_raw(os.path.join(d, "model.safetensors"))
    out = {}
    for fn in sorted(set(json.load(open(idx))["weight_map"].values())):
        out.update(st_raw(os.path.join(d, fn)))
    return out


def same(a):
    w = {k: v for k, v in checkpoint_raw(a.dir).items() if not k.endswith("rotary_emb.inv_freq")}
    z = {k[len("param."):]: v for k, v in st_raw(a.dump).items() if k.startswith("param.")}
    bad = sorted(set(w) ^ set(z))
    bad += [k for k in sorted(set(w) & set(z)) if w[k] != z[k]]
    for k in bad[:5]:
        print("differs or missing: %s" % k)
    print("%d tensors, %d differ" % (len(w), len(bad)))
    return 1 if bad else 0


def loss(a):
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_llama_oracle import forward, rope_table
    cfg = json.load(open(os.path.join(a.dir, "config.json")))
    w = {}
    for k, (dt, shape, raw) in checkpoint_raw(a.dir).items():
        x = torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(shape)
        w[k] = x.to(torch.float64)
    z = st_raw(a.dump)
    def ints(key):
        dt, shape, raw = z[key]
        return torch.frombuffer(bytearray(raw), dtype=torch.int32).reshape(shape)
    tok, tgt = ints("tokens"), ints("targets")
    NH, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    table = rope_table(tok.shape[1], cfg["hidden_size"] // NH, cfg["rope_theta"], torch.float64)
    # a Mixtral's objective (its load-balancing term) is per micro-batch of
    # a.micro_batch rows, averaged; a dense model's the mean over all rows
    mb = a.micro_batch or tok.shape[0]
    top_k, aux = cfg.get("num_experts_per_tok", 2), cfg.get("router_aux_loss_coef", 0.0)
    parts = [forward(w, cfg["num_hidden_layers"], NH, KV, cfg["rms_norm_eps"], table,
                     tok[j:j + mb], tgt[j:j + mb], a.interleaved, top_k, aux)
             for j in range(0, tok.shape[0], mb)]
    got = (sum(parts) / len(parts)).item()
    want = struct.unpack("<f", z["loss"][2])[0]
    rel = abs(got - want) / abs(want)
    print("loss: PyTorch (float64, %s) %.9g, zerosim %.9g, relative difference %.2g"
          % ("interleaved" if a.interleaved else "rotate_half", got, want, rel))
    return 0 if rel <= 1e-5 else 1


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir")
    for k, v in (("layers", 2), ("hidden", 32), ("heads", 4), ("kv-heads", 2), ("ffn", 48),
                 ("vocab", 64), ("seq", 16), ("seed", 1), ("shard-bytes", 0), ("experts", 0),
                 ("top-k", 2)):
        w.add_argument("--" + k, type=int, default=v)
    w.add_argument("--eps", type=float, default=1e-5)
    w.add_argument("--theta", type=float, default=10000.0)
    w.add_argument("--aux", type=float, default=0.02)
    for k in ("bias", "tied", "inv-freq"):
        w.add_argument("--" + k, action="store_true")
    for k in ("drop", "dup", "bad-shape", "extra"):
        w.add_argument("--" + k)
    t = sub.add_parser("tokens")
    t.add_argument("file")
    t.add_argument("--vocab", type=int, default=64)
    t.add_argument("--count", type=int, default=4096)
    t.add_argument("--seed", type=int, default=1)
    for name in ("same", "loss"):
        s = sub.add_parser(name)
        s.add_argument("dir")
        s.add_argument("dump")
        s.add_argument("--interleaved", action="store_true")
        s.add_argument("--micro-batch", type=int, default=0)
    a = ap.parse_args()
    return {"write": write, "tokens": tokens, "same": same, "loss": loss}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
