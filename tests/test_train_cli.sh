#!/bin/sh
# The zerosim program trains, writes the JSON report with the documented
# keys, and two runs with the same seed give the same param_hash.
. "$(dirname "$0")/testlib.sh"

"$ZS" train --steps 12 --quiet --report "$T/a.json" || bad "first run failed"
"$ZS" train --steps 12 --quiet --report "$T/b.json" || bad "second run failed"
"$ZS" train --steps 12 --quiet --seed 7 --report "$T/c.json" || bad "third run failed"

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

finish
