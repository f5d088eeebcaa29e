#!/bin/sh
# Real tokens (--data, --val-data, llm.c's token format), per-step dumps
# (--dump-dir, --dump-steps) and zerosim compare: every N and stage sees the
# same global batch (deterministic dumps equal to the last bit across N and
# stages), a dump's tokens are windows of the file, the held-out loss is in
# the log and the report, malformed token files are refused with one line
# naming the file and the offset, and compare fails on what differs.
. "$(dirname "$0")/testlib.sh"
PY=$(command -v python3 || true)
[ -n "$PY" ] || { echo "SKIP: python3 is needed to write the token files"; exit 77; }

"$PY" - "$T" <<'EOF'
import random, struct, sys
t = sys.argv[1]
def write(name, toks, magic=20240520, version=1, count=None, extra=b""):
    h = [magic, version, len(toks) if count is None else count] + [0] * 253
    open(t + "/" + name, "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(toks), *toks) + extra)
r = random.Random(5)
write("train.bin", [r.randrange(40) for _ in range(3000)])
write("val.bin", [r.randrange(40) for _ in range(800)])
write("big.bin", [1] * 50 + [40] + [2] * 50)          # token 40 at index 50: offset 1124
write("trunc.bin", [1] * 100, count=200)
write("magic.bin", [1] * 100, magic=20240326)
write("version.bin", [1] * 100, version=2)
write("tail.bin", [1] * 100, extra=b"xyz")
write("few.bin", [1] * 10)
EOF

M="--layers 2 --hidden 16 --heads 2 --seq 12 --vocab 40 --steps 3 --lr 1e-2 --quiet"
run() { sh "$HERE/mpirun.sh" "$@" </dev/null; }

# deterministic: the same bytes for N = 1, 2, 4 and stages 0, 3, 1
run 1 "$ZS" train $M --data "$T/train.bin" --deterministic --micro-batch 2 --grad-accum 4 \
    --dump-dir "$T/d1" --dump-steps 1,3 --report "$T/r1.json" >"$T/log" 2>&1 || { bad "N=1 failed"; cat "$T/log"; }
run 2 "$ZS" train $M --data "$T/train.bin" --deterministic --micro-batch 2 --grad-accum 2 --stage 3 \
    --dump-dir "$T/d2" --dump-steps 1,3 --report "$T/r2.json" >"$T/log" 2>&1 || { bad "N=2 failed"; cat "$T/log"; }
run 4 "$ZS" train $M --data "$T/train.bin" --deterministic --micro-batch 2 --stage 1 --precision fp32 \
    --dump-dir "$T/d4" --dump-steps 0-3 >"$T/log" 2>&1 || { bad "N=4 failed"; cat "$T/log"; }
for d in d2 d4; do for s in 1 3; do
    "$ZS" compare "$T/d1/step_00000$s.safetensors" "$T/$d/step_00000$s.safetensors" --rtol 0 --atol 0 \
        >"$T/cmp" 2>&1 && ok || { bad "$d step $s differs from N=1"; grep -v ' ok$' "$T/cmp" | head -5; }
done; done
[ "$(hashes "$T/r1.json")" = "$(hashes "$T/r2.json")" ] && ok || bad "param_hashes differ across N"
# shellcheck disable=SC2012 # the names the run wrote, which have no spaces
[ "$(ls "$T/d4" | tr '\n' ' ')" = "step_000000.safetensors step_000001.safetensors step_000002.safetensors step_000003.safetensors " ] \
    && ok || bad "dump files: $(ls "$T/d4")"
grep -q '"data": ".*train.bin"' "$T/r1.json" && ok || bad "report lacks the data file"
grep -q '"loss_floor": null' "$T/r1.json" && ok || bad "report gives a loss floor for real data"

# the dump's tokens are windows of the file, targets shifted by one, and its
# scalars and tensors are there with the right shapes
"$PY" - "$T" <<'EOF' && ok || bad "dump contents"
import json, struct, sys
t = sys.argv[1]
raw = open(t + "/train.bin", "rb").read()
toks = list(struct.unpack("<%dH" % ((len(raw) - 1024) // 2), raw[1024:]))
d = open(t + "/d1/step_000003.safetensors", "rb").read()
n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n]); base = 8 + n
def get(name, fmt):
    b, e = h[name]["data_offsets"]
    return list(struct.unpack("<%d%s" % ((e - b) // 4, fmt), d[base + b:base + e]))
assert h["tokens"]["shape"] == [8, 12] and h["tokens"]["dtype"] == "I32", h["tokens"]
x, y = get("tokens", "i"), get("targets", "i")
s = "".join(chr(65 + v) for v in toks)
for r in range(8):
    row = x[r * 12:(r + 1) * 12] + [y[r * 12 + 11]]
    assert row[1:] == y[r * 12:(r + 1) * 12]
    assert "".join(chr(65 + v) for v in row) in s, r
assert h["lr"]["shape"] == [] and h["loss"]["shape"] == []
assert h["grad.h.1.attn.c_attn.weight"]["shape"] == [16, 48]
assert h["param.wte.weight"]["shape"] == [40, 16]
assert h["__metadata__"]["step"] == "3"
assert 0 < get("loss", "f")[0] < 10
EOF

# without --deterministic N = 2 sums in another order: close, not equal
run 2 "$ZS" train $M --data "$T/train.bin" --micro-batch 2 --grad-accum 2 --dump-dir "$T/n2" --dump-steps 3 \
    >"$T/log" 2>&1 || bad "N=2 (not deterministic) failed"
"$ZS" compare "$T/d1/step_000003.safetensors" "$T/n2/step_000003.safetensors" --rtol 1e-4 --atol 1e-6 \
    >"$T/cmp" 2>&1 && ok || { bad "N=2 not within 1e-4"; grep -v ' ok$' "$T/cmp" | head; }
"$ZS" compare "$T/d1/step_000003.safetensors" "$T/n2/step_000003.safetensors" --rtol 0 --atol 0 >"$T/cmp" 2>&1
[ $? -eq 1 ] && grep -q 'NOT within' "$T/cmp" && ok || bad "compare --rtol 0 found no difference"

# compare: a missing tensor and another shape are named, exit 1; a bad file exits 2
"$ZS" compare "$T/d4/step_000000.safetensors" "$T/d4/step_000001.safetensors" >"$T/cmp" 2>&1
[ $? -eq 1 ] && grep -q '^grad.wte.weight .*MISSING in A' "$T/cmp" && ok || bad "missing tensor: $(tail -2 "$T/cmp")"
"$ZS" export --layers 1 --hidden 16 --heads 2 --seq 12 --vocab 40 --out "$T/s1.safetensors" >/dev/null 2>&1
"$ZS" export --layers 1 --hidden 16 --heads 2 --seq 10 --vocab 40 --out "$T/s2.bin" >/dev/null 2>&1
"$ZS" compare "$T/s1.safetensors" "$T/s2.bin" >"$T/cmp" 2>&1
[ $? -eq 1 ] && grep -q '^wpe.weight .*SHAPE differs: B has \[10,16\]' "$T/cmp" && ok || bad "shape: $(cat "$T/cmp")"
"$ZS" compare "$T/s1.safetensors" "$T/big.bin" >"$T/cmp" 2>&1
[ $? -eq 2 ] && ok || bad "compare of a token file did not fail as a file error"

# the held-out loss: every 2 steps and after the last, in the log and the report
run 2 "$ZS" train --layers 2 --hidden 16 --heads 2 --seq 12 --vocab 40 --steps 5 --micro-batch 2 --print-every 1 \
    --data "$T/train.bin" --val-data "$T/val.bin" --val-every 2 --report "$T/v.json" >"$T/log" 2>&1 \
    || { bad "--val-data failed"; cat "$T/log"; }
[ "$(grep -c 'val_loss' "$T/log")" -eq 3 ] && ok || bad "val_loss lines: $(grep -c val_loss "$T/log")"
grep -q 'loss floor unknown (real data)' "$T/log" && ok || bad "the summary gives a floor for real data"
steps=$(sed -n '/"val_loss"/,/\]/p' "$T/v.json" | sed -n 's/.*"step": \([0-9]*\).*/\1/p' | tr '\n' ' ')
[ "$steps" = "2 4 5 " ] && ok || bad "val_loss steps in the report: $steps"

# the held-out loss is the training loss of the same samples under the same
# parameters: with the training file as held-out data (samples 0 .. G-1 are
# step 1's batch) and a learning rate of 1e-12, step 1's loss
run 2 "$ZS" train --layers 2 --hidden 16 --heads 2 --seq 12 --vocab 40 --steps 1 --micro-batch 2 \
    --grad-accum 2 --stage 3 --lr 1e-12 --warmup 0 --min-lr-ratio 1 --data "$T/train.bin" \
    --val-data "$T/train.bin" --report "$T/same.json" --quiet >"$T/log" 2>&1 || bad "val = train failed"
tl=$(sed -n '/"losses"/,/\]/p' "$T/same.json" | sed -n '2p' | tr -d ' ,')
vl=$(sed -n '/"val_loss"/,/\]/p' "$T/same.json" | sed -n 's/.*"loss": \([0-9.e+-]*\).*/\1/p')
awk -v a="$tl" -v b="$vl" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-5 * a) }' \
    && ok || bad "held-out loss $vl of step 1's samples is not step 1's loss $tl"

# malformed token files: one line naming the file and the offset
refuse -m "big.bin: token 40 at offset 1124 is outside the vocabulary of 40" train $M --data "$T/big.bin"
refuse -m "trunc.bin: truncated at offset 1224" train $M --data "$T/trunc.bin"
refuse -m "magic.bin: bad magic 20240326 at offset 0" train $M --data "$T/magic.bin"
refuse -m "version.bin: version 2 at offset 4" train $M --data "$T/version.bin"
refuse -m "tail.bin: 3 bytes after the 100 tokens" train $M --data "$T/tail.bin"
refuse -m "few.bin: 10 tokens, fewer than one sample" train $M --val-data "$T/few.bin"
refuse -m "no such file\|No such file" train $M --data "$T/none.bin"
refuse -m "go together" train $M --dump-dir "$T/x"
refuse -m "after the last step" train $M --dump-dir "$T/x" --dump-steps 4
refuse -m "increasing order" train $M --dump-dir "$T/x" --dump-steps 2,1
refuse -m "needs --val-data" train $M --val-every 2
refuse -m "MLP" train $M --model mlp --data "$T/train.bin"
finish
