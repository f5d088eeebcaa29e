#!/usr/bin/env python3
# An independent float64 reference of LAMB as DeepSpeed's FusedLamb defines
# it (You et al., arXiv 1904.00962; deepspeed/ops/lamb), checked against
# zerosim's --dump-dir files: for each step k the parameters after it
# (step_k) must be the reference step applied to the parameters before it
# (step_{k-1}) with the dumped gradient, within rtol/atol; m and v are
# carried here in float64 from zero.
#
#   python3 lamb_ref.py DIR STEPS BETA1 BETA2 EPS WD MAX_COEFF MIN_COEFF BIAS_CORRECTION
#
# Prints one line per failing tensor and "lamb_ref: N tensors, max error E,
# clamped C" at the end; exits 1 on any failure. No numpy: struct and lists.
import json
import math
import struct
import sys


def read_safetensors(path):
    data = open(path, "rb").read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    body = data[8 + hlen:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            continue
        lo, hi = info["data_offsets"]
        n = (hi - lo) // 4
        out[name] = list(struct.unpack("<%df" % n, body[lo:hi]))
    return out


def main():
    d = sys.argv[1]
    steps = int(sys.argv[2])
    b1, b2, eps, wd, cmax, cmin = (float(x) for x in sys.argv[3:9])
    bias = sys.argv[9] == "1"
    dumps = [read_safetensors("%s/step_%06d.safetensors" % (d, k)) for k in range(steps + 1)]
    names = [n[len("param."):] for n in dumps[0] if n.startswith("param.")]
    if not names:
        print("lamb_ref: no parameters in %s/step_000000.safetensors" % d)
        return 1
    m = {n: [0.0] * len(dumps[0]["param." + n]) for n in names}
    v = {n: [0.0] * len(dumps[0]["param." + n]) for n in names}
    fails = 0
    worst = 0.0
    clamped = 0
    for k in range(1, steps + 1):
        lr = dumps[k]["lr"][0]
        step = lr
        if bias:
            step = lr * math.sqrt(1.0 - b2 ** k) / (1.0 - b1 ** k)
        for n in names:
            w = dumps[k - 1]["param." + n]
            g = dumps[k]["grad." + n]
            got = dumps[k]["param." + n]
            mm, vv = m[n], v[n]
            u = []
            for i in range(len(w)):
                mm[i] = b1 * mm[i] + (1.0 - b1) * g[i]
                vv[i] = b2 * vv[i] + (1.0 - b2) * g[i] * g[i]
                u.append(mm[i] / (math.sqrt(vv[i]) + eps) + wd * w[i])
            wn = math.sqrt(sum(x * x for x in w))
            un = math.sqrt(sum(x * x for x in u))
            ratio = 1.0
            if wn > 0 and un > 0:
                ratio = min(max(wn / un, cmin), cmax)
                clamped += ratio in (cmin, cmax)
            for i in range(len(w)):
                want = w[i] - step * ratio * u[i]
                err = abs(want - got[i])
                worst = max(worst, err)
                if err > 2e-6 + 1e-5 * abs(want):
                    print("FAIL: step %d %s[%d]: zerosim %.9g, reference %.9g" %
                          (k, n, i, got[i], want))
                    fails += 1
                    break
    print("lamb_ref: %d tensors, %d steps, max error %.3g, clamped %d" %
          (len(names), steps, worst, clamped))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
