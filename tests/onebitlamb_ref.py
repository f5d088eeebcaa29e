#!/usr/bin/env python3
# An independent float64 reference of 1-bit LAMB as Li et al. (arXiv
# 2104.06069) and DeepSpeed's OnebitLamb (deepspeed/runtime/fp16/onebit/
# lamb.py) define it, on one rank, checked against zerosim's --dump-dir
# files: for each step k the parameters after it (step_k) must be the
# reference step applied to the parameters before it (step_{k-1}) with the
# dumped gradient, within rtol/atol. Carried here in float64 from zero: m,
# v, the fresh variance, both error buffers, each tensor's running average
# of the trust ratio, its last factor and its scaling coefficient.
#
# Exact steps (k <= FREEZE): LAMB without bias correction, u = m / (sqrt(v)
# + eps) + wd w, ratio ||w|| / ||u|| clamped to [MIN, MAX] (1 where a norm
# is 0), coeff = CB coeff + (1 - CB) ratio where the ratio is not 1, w -=
# lr ratio u; at k = FREEZE the fresh variance starts as v.
# Compressed steps: at the first, each tensor's scaling = (mean over the
# tensors of rms(m)) / rms(m) (1 where rms(m) is 0) and last factor = 1;
# then m_last = m, m = b1 m + (1 - b1) g, m times the scaling, the 1-bit
# compressed all-reduce of one rank (as tests/onebit_ref.py: worker and
# server errors, over n = the parameter count rounded up to 8), m divided by
# the scaling, m = 0 where v = 0; per tensor g' = (m - b1 m_last) / (1 -
# b1), v_fresh = b2 v_fresh + (1 - b2) g'^2, u as above with the frozen v,
# factor = max((sqrt(v) + eps) / (sqrt(v_fresh) + eps)), with weight decay
# moved toward 1 by min(1, ||m / (sqrt(v) + eps)|| / ||u||), clamped to
# [FMIN, FMAX] and to last (1 -/+ THR); w -= lr coeff factor u.
#
#   python3 onebitlamb_ref.py DIR STEPS FREEZE BETA1 BETA2 EPS WD MAX MIN CB FMAX FMIN THR
#
# Prints one line per failing tensor and "onebitlamb_ref: ..." at the end;
# exits 1 on any failure. No numpy: struct and lists.
import math
import sys

from lamb_ref import read_safetensors
from onebit_ref import OneBit


def norm(xs):
    return math.sqrt(sum(x * x for x in xs))


def clamp(x, lo, hi):
    return lo if x < lo else hi if x > hi else x


def main():
    d = sys.argv[1]
    steps, freeze = int(sys.argv[2]), int(sys.argv[3])
    b1, b2, eps, wd, cmax, cmin, cb, fmax, fmin, thr = (float(x) for x in sys.argv[4:14])
    dumps = [read_safetensors("%s/step_%06d.safetensors" % (d, k)) for k in range(steps + 1)]
    names = [n[len("param."):] for n in dumps[0] if n.startswith("param.")]
    if not names:
        print("onebitlamb_ref: no parameters in %s/step_000000.safetensors" % d)
        return 1
    sizes = [len(dumps[0]["param." + n]) for n in names]
    spans, lo = [], 0
    for sz in sizes:
        spans.append((lo, lo + sz))
        lo += sz
    P = lo
    n = (P + 7) // 8 * 8
    m, v, vf = [0.0] * P, [0.0] * P, [0.0] * P
    onebit = OneBit(n)
    coeff = [0.0] * len(names)
    last = [1.0] * len(names)
    scaling = [1.0] * len(names)
    fails, worst, compressed = 0, 0.0, 0
    for k in range(1, steps + 1):
        lr = dumps[k]["lr"][0]
        w = [x for nm in names for x in dumps[k - 1]["param." + nm]]
        g = [x for nm in names for x in dumps[k]["grad." + nm]]
        got = [x for nm in names for x in dumps[k]["param." + nm]]
        want = list(w)
        if k <= freeze:
            for i in range(P):
                m[i] = b1 * m[i] + (1.0 - b1) * g[i]
                v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i]
            for j, (a, b) in enumerate(spans):
                u = [m[i] / (math.sqrt(v[i]) + eps) + wd * w[i] for i in range(a, b)]
                wn, un = norm(w[a:b]), norm(u)
                r = 1.0 if wn == 0.0 or un == 0.0 else clamp(wn / un, cmin, cmax)
                if r != 1.0:
                    coeff[j] = cb * coeff[j] + (1.0 - cb) * r
                for i in range(a, b):
                    want[i] = w[i] - lr * r * u[i - a]
            if k == freeze:
                vf = list(v)
        else:
            compressed += 1
            if k == freeze + 1:
                rms = [norm(m[a:b]) / math.sqrt(b - a) for a, b in spans]
                united = sum(rms) / len(rms)
                scaling = [united / r if r > 0.0 else 1.0 for r in rms]
                last = [1.0] * len(names)
            m_last = list(m)
            for i in range(P):
                m[i] = b1 * m[i] + (1.0 - b1) * g[i]
            for j, (a, b) in enumerate(spans):
                for i in range(a, b):
                    m[i] *= scaling[j]
            m = onebit.allreduce(m, v)
            for j, (a, b) in enumerate(spans):
                for i in range(a, b):
                    m[i] /= scaling[j]
            for j, (a, b) in enumerate(spans):
                factor = None
                pre, u = [], []
                for i in range(a, b):
                    gr = (m[i] - b1 * m_last[i]) / (1.0 - b1)
                    vf[i] = b2 * vf[i] + (1.0 - b2) * gr * gr
                    den = math.sqrt(v[i]) + eps
                    pre.append(m[i] / den)
                    u.append(m[i] / den + wd * w[i])
                    r = den / (math.sqrt(vf[i]) + eps)
                    factor = r if factor is None or r > factor else factor
                if wd > 0.0:
                    un = norm(u)
                    ur = min(1.0, norm(pre) / un) if un > 0.0 else 1.0
                    factor = factor * ur + (1.0 - ur)
                factor = clamp(factor, fmin, fmax)
                factor = clamp(factor, last[j] * (1.0 - thr), last[j] * (1.0 + thr))
                last[j] = factor
                for i in range(a, b):
                    want[i] = w[i] - lr * coeff[j] * factor * u[i - a]
        for nm, (a, b) in zip(names, spans):
            for i in range(a, b):
                err = abs(want[i] - got[i])
                worst = max(worst, err)
                if err > 2e-6 + 1e-5 * abs(want[i]):
                    print("FAIL: step %d %s[%d]: zerosim %.9g, reference %.9g" %
                          (k, nm, i - a, got[i], want[i]))
                    fails += 1
                    break
    print("onebitlamb_ref: %d tensors, %d steps (%d compressed), max error %.3g" %
          (len(names), steps, compressed, worst))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
