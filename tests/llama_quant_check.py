#!/usr/bin/env python3
"""Quantized Llama files checked from outside zerosim (tests/test_llama_quant.sh),
in plain Python (struct and json; float32 arithmetic by rounding each step
through struct), independently of zerosim's quantizer.

  int8 WEIGHTS QFILE   QFILE (zerosim quantize --format int8, per tensor) holds
                       exactly the seven linear weights of each block (q, k, v,
                       o, gate, up, down projections) as int8 with one scale,
                       each q = roundf(x * (127 / a)) and scale a = max |x|
                       computed here from WEIGHTS' float32 tensor, and every
                       other tensor of WEIGHTS unchanged, bit for bit.
  dequant QFILE OUT    writes OUT, a Llama weights file (Hugging Face's names,
                       zerosim's metadata from QFILE's model), each int8 weight
                       dequantized as q * a / 127 in float32, for zerosim eval.
"""
import json
import math
import struct
import sys

LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def roundf(x):  # C's roundf: halves away from zero
    return math.copysign(math.floor(abs(x) + 0.5), x)


def st_read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for k, v in header.items():
        raw = data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
        out[k] = (v["dtype"], v["shape"], raw)
    return out, meta


def floats(raw):
    return list(struct.unpack("<%df" % (len(raw) // 4), raw))


def is_linear(name):
    parts = name.split(".")
    return name.startswith("model.layers.") and len(parts) == 6 and parts[4] in LINEAR and \
        parts[5] == "weight"


def check_int8(wpath, qpath):
    w, _ = st_read(wpath)
    q, meta = st_read(qpath)
    bad = []
    if meta.get("quant") != "int8" or meta.get("block") != "0" or meta.get("per_channel") != "0":
        bad.append("not int8 per tensor: %s" % meta)
    nlin = 0
    for name, (dt, shape, raw) in w.items():
        if not is_linear(name):
            if name not in q or q[name][2] != raw:
                bad.append("%s: not kept as it is" % name)
            continue
        nlin += 1
        x = floats(raw)
        a = max(abs(v) for v in x)
        r = f32(127.0 / a)
        want = bytes(struct.pack("<%db" % len(x),
                                 *[int(max(-127.0, min(127.0, roundf(f32(v * r))))) for v in x]))
        got_q, got_s = q.get(name + ".q"), q.get(name + ".scale")
        if not got_q or got_q[0] != "I8" or got_q[1] != shape or got_q[2] != want:
            bad.append("%s: int8 values differ" % name)
        if not got_s or floats(got_s[2]) != [a]:
            bad.append("%s: scale %s, max |x| %r" % (name, got_s and floats(got_s[2]), a))
    extra = [k for k in q if not (k in w or (k.endswith((".q", ".scale")) and
                                            is_linear(k.rsplit(".", 1)[0])))]
    bad += ["%s: not in the weights" % k for k in extra]
    for b in bad[:5]:
        print(b)
    print("%d linear weights of %d tensors checked, %d problems" % (nlin, len(w), len(bad)))
    return 1 if bad or nlin == 0 else 0


def dequant(qpath, out):
    q, meta = st_read(qpath)
    m = json.loads(meta["model"])
    tensors = []
    for name, (dt, shape, raw) in q.items():
        if name.endswith(".scale"):
            continue
        if name.endswith(".q"):
            (a,) = floats(q[name[:-2] + ".scale"][2])
            vals = struct.unpack("<%db" % len(raw), raw)
            raw = struct.pack("<%df" % len(vals), *[f32(f32(v * a) / 127.0) for v in vals])
            name = name[:-2]
        if name in ("model.embed_tokens.weight", "lm_head.weight"):  # flat in QFILE
            shape = [m["vocab"], m["n_embd"]]
        tensors.append((name, shape, raw))
    md = {"format": "pt", "model": "llama", "n_layer": m["n_layer"], "n_head": m["n_head"],
          "n_kv_head": m["n_kv_head"], "n_embd": m["n_embd"],
          "intermediate_size": m["intermediate_size"], "n_ctx": m["seq_len"],
          "vocab_size": m["vocab"], "rope_theta": repr(m["rope_theta"]),
          "rms_norm_eps": repr(m["rms_norm_eps"])}
    header, off = {"__metadata__": {k: str(v) for k, v in md.items()}}, 0
    for name, shape, raw in tensors:
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(t[2] for t in tensors))
    return 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "int8":
        return check_int8(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 4 and sys.argv[1] == "dequant":
        return dequant(sys.argv[2], sys.argv[3])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
