#!/usr/bin/env python3
# An independent float64 reference of 0/1 Adam as Lu et al. (arXiv
# 2202.06009, algorithm 1) and DeepSpeed's ZeroOneAdam
# (deepspeed/runtime/fp16/onebit/zoadam.py) define it, on one rank, checked
# against zerosim's --dump-dir files: the parameters after each step k
# (step_k) must be the reference step applied to the parameters before it
# (step_{k-1}) with the dumped gradient, within rtol/atol. m, v, the two
# error buffers, the learning rates summed since the last sync and the
# schedule's counters are carried here in float64 from zero; the sync point
# is zerosim's weights after the freeze and after each sync (each checked).
#
# The schedule, with t = k + 1 (DeepSpeed's first step() call changes no
# weight): before the freeze (t - 1 <= max(var_freeze_step, 1)) step t
# updates v with the exact gradient when t % var_interval == 0 (after
# var_update_scaler such steps the interval doubles), else the gradient
# goes through the compressed all-reduce and only m moves; after the step
# with t > var_freeze_step both errors restart from 0. After the freeze
# every step is local (m from the gradient, lrs += lr); when t %
# local_interval == 0 the update since the sync point, times sqrt(v) +
# eps, goes through the compressed all-reduce, the weights become the sync
# point plus it over sqrt(v) + eps, and m = -it / lrs. Every step after the
# freeze counts; after local_step_scaler of them local_interval doubles, at
# most local_step_clipper. On one rank the compressed all-reduce of x is:
# x += worker error, s = ||x|| / sqrt(n), worker error = x - s sign(x);
# a = s sign(x) + server error, t = ||a|| / sqrt(n), server error = a - t
# sign(a); result t sign(a), set to 0 where v is 0; n is the parameter count
# rounded up to a multiple of 8. No bias correction.
#
#   python3 zeroone_ref.py DIR STEPS VAR_FREEZE VAR_SCALER LOCAL_SCALER CLIPPER \
#       BETA1 BETA2 EPS WD
#
# Prints the kinds of the steps, one line per failing tensor and
# "zeroone_ref: ..." at the end; exits 1 on any failure.
import math
import sys

from lamb_ref import read_safetensors
from onebit_ref import OneBit


def main():
    d = sys.argv[1]
    steps, vfs, vscaler, lscaler, clipper = (int(x) for x in sys.argv[2:7])
    b1, b2, eps, wd = (float(x) for x in sys.argv[7:11])
    def dump(k):
        return read_safetensors("%s/step_%06d.safetensors" % (d, k))

    last = dump(0)  # one step's dump at a time: a real model's runs are large
    names = [n[len("param."):] for n in last if n.startswith("param.")]
    if not names:
        print("zeroone_ref: no parameters in %s/step_000000.safetensors" % d)
        return 1
    sizes = [len(last["param." + n]) for n in names]
    P = sum(sizes)
    ob = OneBit((P + 7) // 8 * 8)
    m, v = [0.0] * P, [0.0] * P
    var_interval, var_counter, local_interval, local_counter = 1, 0, 1, 0
    lrs, w_sync, kinds = 0.0, None, []
    fails, worst = 0, 0.0
    big = (0.0, 0, "", 0.0)  # the reference's largest |step| of an element: size, k, kind, sqrt(v)
    for k in range(1, steps + 1):
        t = k + 1
        cur = dump(k)
        lr = cur["lr"][0]
        w = [x for nm in names for x in last["param." + nm]]
        g = [x for nm in names for x in cur["grad." + nm]]
        got = [x for nm in names for x in cur["param." + nm]]
        last = cur
        frozen = t - 1 > max(vfs, 1)
        if not frozen:
            if t % var_interval == 0:
                kinds.append("E")
                for i in range(P):
                    v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i]
                    m[i] = b1 * m[i] + (1.0 - b1) * g[i]
                var_counter += 1
                if var_counter == vscaler:
                    var_counter, var_interval = 0, var_interval * 2
            else:
                kinds.append("g")
                x = ob.allreduce(g, v)
                for i in range(P):
                    m[i] = b1 * m[i] + (1.0 - b1) * x[i]
            want = [w[i] - lr * (m[i] / (math.sqrt(v[i]) + eps) + wd * w[i]) for i in range(P)]
            if t > vfs:
                ob.reset()
                w_sync = got
        else:
            lrs += lr
            for i in range(P):
                m[i] = b1 * m[i] + (1.0 - b1) * g[i]
            want = [w[i] - lr * (m[i] / (math.sqrt(v[i]) + eps) + wd * w[i]) for i in range(P)]
            if t % local_interval == 0:
                kinds.append("S")
                den = [math.sqrt(v[i]) + eps for i in range(P)]
                x = ob.allreduce([(want[i] - w_sync[i]) * den[i] for i in range(P)], v)
                want = [w_sync[i] + x[i] / den[i] for i in range(P)]
                m = [-x[i] / lrs for i in range(P)]
                lrs, w_sync = 0.0, got
            else:
                kinds.append("l")
            local_counter += 1
            if local_counter == lscaler:
                local_counter, local_interval = 0, min(clipper, local_interval * 2)
        # a sync divides w - w_sync, taken in float32 from weights that can
        # grow large (elements whose v is tiny), by sqrt(v) + eps: there the
        # relative tolerance is 1e-4, elsewhere 1e-5
        rtol = 1e-4 if kinds[-1] == "S" else 1e-5
        for i in range(P):
            if abs(want[i] - w[i]) > big[0]:
                big = (abs(want[i] - w[i]), k, kinds[-1], math.sqrt(v[i]))
        lo = 0
        for nm, sz in zip(names, sizes):
            for i in range(lo, lo + sz):
                err = abs(want[i] - got[i])
                worst = max(worst, err)
                if err > 2e-6 + rtol * abs(want[i]):
                    print("FAIL: step %d (%s) %s[%d]: zerosim %.9g, reference %.9g" %
                          (k, kinds[-1], nm, i - lo, got[i], want[i]))
                    fails += 1
                    break
            lo += sz
    print("largest step of an element: %.3g at step %d (%s), where sqrt(v) = %.3g; largest "
          "|w| %.3g" % (big[0], big[1], big[2], big[3], max(abs(x) for x in got)))
    print("zeroone_ref: %d tensors, %d steps (%s: E exact, g 1-bit gradient, l local, "
          "S sync), max error %.3g" % (len(names), steps, "".join(kinds), worst))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
