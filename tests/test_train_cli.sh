#!/bin/sh
# The zerosim program trains, writes the JSON report with the documented
# keys, and two runs with the same seed give the same param_hash.
. "$(dirname "$0")/testlib.sh"

"$ZS" train --steps 12 --silent --report "$T/a.json" || bad "first run failed"
"$ZS" train --steps 12 --silent --report "$T/b.json" || bad "second run failed"
"$ZS" train --steps 12 --silent --seed 7 --report "$T/c.json" || bad "third run failed"

for k in num_params world_size stage precision steps param_hash; do
    [ -n "$(key "$T/a.json" $k)" ] && ok || bad "report lacks \"$k\""
done
grep -q '"losses": \[' "$T/a.json" && ok || bad "report lacks \"losses\""
[ "$(key "$T/a.json" steps)" = 12 ] && ok || bad "steps is not 12"
[ "$(key "$T/a.json" world_size)" = 1 ] && ok || bad "world_size is not 1"
[ "$(key "$T/a.json" precision)" = fp32 ] && ok || bad "precision is not fp32"
# 12 losses: the lines between "losses": [ and the closing bracket
n=$(sed -n '/"losses": \[/,/\]/p' "$T/a.json" | grep -c '^ *[0-9]')
[ "$n" -eq 12 ] && ok || bad "expected 12 losses, found $n"

ha=$(key "$T/a.json" param_hash); hb=$(key "$T/b.json" param_hash); hc=$(key "$T/c.json" param_hash)
echo "param_hash: $ha $hb (seed 7: $hc)"
[ ${#ha} -eq 16 ] && ok || bad "param_hash is not 16 hex digits: $ha"
[ "$ha" = "$hb" ] && ok || bad "same seed, different param_hash: $ha vs $hb"
[ "$ha" != "$hc" ] && ok || bad "different seeds, same param_hash"

# a config file with overrides: the example DeepSpeed-style config loads and runs
CFG=${srcdir:-.}/examples/configs/gpt_small_fp16_zero2.json
"$ZS" train --config "$CFG" --steps 3 --quiet --report "$T/d.json" && ok || bad "example config failed"
[ "$(key "$T/d.json" precision)" = fp16 ] && ok || bad "config did not select fp16"
"$ZS" train --config "$CFG" --steps 3 --quiet --precision bf16 --report "$T/e.json" && ok || bad "override failed"
[ "$(key "$T/e.json" precision)" = bf16 ] && ok || bad "--precision did not override the file"
CFG2=${srcdir:-.}/examples/configs/mlp_adamw.json
"$ZS" train --config "$CFG2" --steps 3 --quiet && ok || bad "MLP example config failed"

# --quiet: no progress lines (step lines, "saved" lines); the start-up line,
# the summary and the tables still print. --silent: nothing but errors.
"$ZS" train --steps 3 --print-every 1 >"$T/loud" 2>&1 || bad "plain run failed"
"$ZS" train --steps 3 --print-every 1 --quiet >"$T/quiet" 2>&1 || bad "--quiet run failed"
"$ZS" train --steps 3 --print-every 1 --quiet --save-dir "$T/ck" --save-every 1 >"$T/quiet-ck" 2>&1 || bad "--quiet --save-dir failed"
"$ZS" train --steps 3 --print-every 1 --silent --report "$T/s.json" >"$T/silent" 2>&1 || bad "--silent run failed"
[ "$(grep -c '^step ' "$T/loud")" -eq 3 ] && ok || bad "no progress lines without --quiet"
grep -q '^step \|^saved ' "$T/quiet" "$T/quiet-ck" && bad "--quiet printed a progress line: $(grep -h '^step \|^saved ' "$T/quiet" "$T/quiet-ck" | head -1)" || ok
[ -d "$T/ck/global_step3" ] && ok || bad "--quiet: the checkpoint was not saved"
for want in '^zerosim [0-9.]*: gpt model' '^parameters 106240 ' '^param_hash ' '^memory per rank' '^traffic per rank'; do
    grep -q "$want" "$T/quiet" && ok || bad "--quiet left out \"$want\""
done
# apart from the progress lines, --quiet prints what a plain run prints
grep -v '^step ' "$T/loud" | grep -v 'total ms\|  *[0-9.]*  *[0-9.]*  *[0-9.]*$\|[0-9.]* s$\|peak RSS\|^ *0  *[0-9.]*  *[0-9.]*  *[0-9.]*$' >"$T/loud.f"
grep -v 'total ms\|  *[0-9.]*  *[0-9.]*  *[0-9.]*$\|[0-9.]* s$\|peak RSS\|^ *0  *[0-9.]*  *[0-9.]*  *[0-9.]*$' "$T/quiet" >"$T/quiet.f"
cmp -s "$T/loud.f" "$T/quiet.f" && ok || { bad "--quiet changed more than the progress lines"; diff "$T/loud.f" "$T/quiet.f" | head; }
[ ! -s "$T/silent" ] && ok || bad "--silent printed: $(head -2 "$T/silent")"
[ -n "$(key "$T/s.json" param_hash)" ] && ok || bad "--silent wrote no report"
"$ZS" train --steps 1 --silent --stage 7 >"$T/err" 2>&1 && bad "--silent --stage 7 accepted" ||
    { [ "$(wc -l <"$T/err")" -eq 1 ] && ok || bad "--silent hid the error: $(cat "$T/err")"; }
"$ZS" train --help | grep -q -- '--quiet  *no progress lines' && ok || bad "--help does not say what --quiet silences"
"$ZS" train --help | grep -q -- '--silent  *print nothing but errors' && ok || bad "--help lacks --silent"

# a bad size names its option once (plan's message once printed it twice)
for opt in --device-memory --host-memory; do
    "$ZS" train --steps 1 "$opt" 12XB >"$T/err" 2>&1 && bad "$opt 12XB accepted" ||
        { [ "$(grep -o -- "$opt" "$T/err" | wc -l)" -eq 1 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && ok ||
            bad "$opt 12XB: $(cat "$T/err")"; }
done

finish
