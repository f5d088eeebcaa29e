#!/usr/bin/env python3
# An independent float64 reference of 1-bit Adam as Tang et al. (arXiv
# 2102.02888, algorithm 1) and DeepSpeed's OnebitAdam define it, on one
# rank, checked against zerosim's --dump-dir files: for each step k the
# parameters after it (step_k) must be the reference step applied to the
# parameters before it (step_{k-1}) with the dumped gradient, within
# rtol/atol. m, v and the two error buffers are carried here in float64
# from zero. On one rank the compressed all-reduce is: x = m + worker
# error, s = ||x|| / sqrt(n), worker error = x - s sign(x); a = s sign(x) +
# server error, t = ||a|| / sqrt(n), server error = a - t sign(a); m =
# t sign(a); n is the parameter count rounded up to a multiple of 8 (the
# padding's momentum 0). m is set to 0 where v is 0 (an element whose every
# gradient was 0). No bias correction.
#
#   python3 onebit_ref.py DIR STEPS FREEZE BETA1 BETA2 EPS WD
#
# Prints one line per failing tensor and "onebit_ref: ..." at the end;
# exits 1 on any failure. No numpy: struct and lists.
import math
import sys

from lamb_ref import read_safetensors


def sign(x):
    return 1.0 if x >= 0.0 else -1.0


class OneBit:
    """The compressed all-reduce of one rank over n elements (y padded with 0),
    with its worker and server errors; the result is 0 where v is 0 (also
    used by onebitlamb_ref.py and zeroone_ref.py)."""
    def __init__(self, n):
        self.n = n
        self.werr, self.serr = [0.0] * n, [0.0] * n

    def reset(self):
        self.werr, self.serr = [0.0] * self.n, [0.0] * self.n

    def allreduce(self, y, v):
        n, P = self.n, len(y)
        x = [(y[i] if i < P else 0.0) + self.werr[i] for i in range(n)]
        s = math.sqrt(sum(e * e for e in x) / n)
        self.werr = [x[i] - s * sign(x[i]) for i in range(n)]
        a = [s * sign(x[i]) + self.serr[i] for i in range(n)]
        t = math.sqrt(sum(e * e for e in a) / n)
        self.serr = [a[i] - t * sign(a[i]) for i in range(n)]
        return [t * sign(a[i]) if v[i] != 0.0 else 0.0 for i in range(P)]


def main():
    d = sys.argv[1]
    steps, freeze = int(sys.argv[2]), int(sys.argv[3])
    b1, b2, eps, wd = (float(x) for x in sys.argv[4:8])
    dumps = [read_safetensors("%s/step_%06d.safetensors" % (d, k)) for k in range(steps + 1)]
    names = [n[len("param."):] for n in dumps[0] if n.startswith("param.")]
    if not names:
        print("onebit_ref: no parameters in %s/step_000000.safetensors" % d)
        return 1
    sizes = [len(dumps[0]["param." + n]) for n in names]
    P = sum(sizes)
    n = (P + 7) // 8 * 8
    m, v = [0.0] * P, [0.0] * P
    onebit = OneBit(n)
    fails, worst, compressed = 0, 0.0, 0
    for k in range(1, steps + 1):
        lr = dumps[k]["lr"][0]
        w = [x for nm in names for x in dumps[k - 1]["param." + nm]]
        g = [x for nm in names for x in dumps[k]["grad." + nm]]
        got = [x for nm in names for x in dumps[k]["param." + nm]]
        for i in range(P):
            m[i] = b1 * m[i] + (1.0 - b1) * g[i]
        if k <= freeze:
            for i in range(P):
                v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i]
        else:
            compressed += 1
            m = onebit.allreduce(m, v)
        lo = 0
        for nm, sz in zip(names, sizes):
            for i in range(lo, lo + sz):
                want = w[i] - lr * (m[i] / (math.sqrt(v[i]) + eps) + wd * w[i])
                err = abs(want - got[i])
                worst = max(worst, err)
                if err > 2e-6 + 1e-5 * abs(want):
                    print("FAIL: step %d %s[%d]: zerosim %.9g, reference %.9g" %
                          (k, nm, i - lo, got[i], want))
                    fails += 1
                    break
            lo += sz
    print("onebit_ref: %d tensors, %d steps (%d compressed), max error %.3g" %
          (len(names), steps, compressed, worst))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
