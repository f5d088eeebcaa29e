"""The relative error of the gradients of dumps against a reference dump.

    python3 grad_err.py REF A [B ...]

Each argument is a --dump-dir step file (safetensors, fp32 tensors). For
each of A, B, ... prints ||g - g_ref|| / ||g_ref|| over every gradient
tensor (grad.*) together, one number a line, in order. A tensor missing
from a file, or not fp32, is a one-line error (exit 1)."""
import array
import json
import math
import struct
import sys


def grads(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if not name.startswith("grad."):
            continue
        if t["dtype"] != "F32":
            sys.exit("%s: %s is %s, not F32" % (path, name, t["dtype"]))
        a, b = t["data_offsets"]
        v = array.array("f")
        v.frombytes(data[a:b])
        if sys.byteorder != "little":
            v.byteswap()
        out[name] = v
    if not out:
        sys.exit("%s: no grad.* tensors" % path)
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    ref = grads(sys.argv[1])
    norm = math.sqrt(sum(x * x for v in ref.values() for x in v))
    for p in sys.argv[2:]:
        g = grads(p)
        if set(g) != set(ref):
            sys.exit("%s: not the reference's gradient tensors" % p)
        d = sum((x - y) ** 2 for k in ref for x, y in zip(g[k], ref[k]))
        print("%.6e" % (math.sqrt(d) / norm))


main()
