#!/bin/sh
# Real DeepSpeed configuration files (tests/configs/deepspeed, collected from
# public training repositories; SOURCES.tsv names each file's repository,
# commit and path) run in zerosim, or stop naming the DeepSpeed feature that
# zerosim does not model.
#
# tests/config_corpus loads every file as `zerosim train --config FILE` does
# at 1, 2, 4 and 8 ranks (a file's batch sizes fit the cluster it was written
# for). A file then either
#   - loads: it would run (a sample of them trains two steps for real, and
#     ZEROSIM_CONFIGS_ALL=1 trains every one of them), or
#   - is refused, and then every problem it reports is a real DeepSpeed
#     feature zerosim does not model yet, or a key DeepSpeed itself does not
#     know (listed in tests/config_corpus.c).
# Anything else fails: a refusal that names no feature, a crash, a
# message that is not one line per problem.
# The closing lines count the files and check the issue's target: at least 95% of the files that use no
# unmodelled feature run.
. "$(dirname "$0")/testlib.sh"
CONFIG_CORPUS=${CONFIG_CORPUS:-$(dirname "$ZS")/tests/config_corpus}
DIR="$HERE/configs/deepspeed"
[ -d "$DIR" ] || DIR="$(cd "$(dirname "$0")" && pwd)/configs/deepspeed"

"$CONFIG_CORPUS" "$DIR"/*.json >"$T/corpus"
grep '^FAIL' "$T/corpus" | while read -r line; do echo "$line"; done
set -- $(tail -n 1 "$T/corpus")
total=$2 runs=$4 refused=$6 refused_other=$8 failed=${10}
[ "$failed" -eq 0 ] && ok || bad "$failed files were refused for a reason that is not an unmodelled DeepSpeed feature (above)"
ok_files=$(sed -n 's/^ok \([0-9]*\) /\1:/p' "$T/corpus")

# the files that load train for real: a fixed sample (every 8th), or all
sample=0
i=0
for nf in $ok_files; do
    i=$((i + 1))
    [ "${ZEROSIM_CONFIGS_ALL:-0}" = 1 ] || [ $((i % 8)) -eq 1 ] || continue
    n=${nf%%:*}
    f=${nf#*:}
    sample=$((sample + 1))
    if sh "$HERE/mpirun.sh" "$n" "$ZS" train --config "$f" --steps 2 --quiet \
        --report "$T/r.json" </dev/null >"$T/out" 2>&1 && grep -q '"param_hash": "[0-9a-f]' "$T/r.json"; then
        ok
    else
        bad "$(basename "$f") at $n ranks: $(tail -n 3 "$T/out")"
    fi
done

# the keys that change arithmetic reach the engine
M="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32 --micro-batch 2 --steps 3 --quiet"
run() { # run N NAME JSON: a run with that config; its report in $T/NAME.json
    printf '%s\n' "$3" >"$T/$2.cfg"
    sh "$HERE/mpirun.sh" "$1" "$ZS" train --config "$T/$2.cfg" $M --report "$T/$2.json" \
        </dev/null >"$T/$2.log" 2>&1 || { bad "$2: $(tail -n 2 "$T/$2.log")"; return 1; }
}
h() { key "$T/$1.json" param_hash; }
# prescale_gradients / gradient_predivide_factor: at N = 2 the divisions are
# by powers of two, exact in floating point, so the three arithmetics give
# the same bytes (a check that the scaling is complete: a missing or doubled
# 1/N would change them)
# (SGD without clipping, whose update is proportional to the gradient, so
# that a wrong factor cannot cancel out as it would in Adam or a clip)
opt='"optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "gradient_clipping": 0'
run 2 in_loss "{$opt}" && run 2 pre "{$opt, \"prescale_gradients\": true}" &&
    run 2 post "{$opt, \"prescale_gradients\": false}" &&
    run 2 predivide "{$opt, \"gradient_predivide_factor\": 2.0}" &&
    { [ "$(h in_loss)" = "$(h pre)" ] && [ "$(h in_loss)" = "$(h post)" ] &&
        [ "$(h in_loss)" = "$(h predivide)" ] && ok ||
        bad "gradient scaling at N=2: $(h in_loss) $(h pre) $(h post) $(h predivide)"; }
# Adam with L2 (adam_w_mode false) and without bias correction are other
# updates than AdamW's: other bytes, and a finite loss
run 1 adamw '{"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1}}}' &&
    run 1 adam_l2 '{"optimizer": {"type": "Adam", "params": {"lr": 0.01, "weight_decay": 0.1, "adam_w_mode": false}}}' &&
    run 1 no_bc '{"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1, "bias_correction": false}}}' &&
    { [ "$(h adamw)" != "$(h adam_l2)" ] && [ "$(h adamw)" != "$(h no_bc)" ] && ok ||
        bad "adam_w_mode false or bias_correction false changed nothing"; }
# steps_per_print 2 of 5 steps: steps 1, 2, 4 and the last
printf '{"steps_per_print": 2}\n' >"$T/spp.cfg"
"$ZS" train --config "$T/spp.cfg" --steps 5 --layers 1 --hidden 16 --heads 2 --seq 8 --vocab 16 \
    --micro-batch 2 2>/dev/null </dev/null | sed -n 's/^step *\([0-9]*\)\/5 .*/\1/p' | tr '\n' ' ' >"$T/spp"
[ "$(cat "$T/spp")" = "1 2 4 5 " ] && ok || bad "steps_per_print 2 printed steps $(cat "$T/spp")"

clean=$((total - refused))
echo "configs: $total files; $runs load and would run ($sample trained 2 steps); $refused stop on" \
     "a DeepSpeed feature zerosim does not model; $refused_other use only keys DeepSpeed does not know"
echo "configs: of the $clean files that use no unmodelled feature, $runs run ($((100 * runs / (clean > 0 ? clean : 1)))%)"
[ $((100 * runs)) -ge $((95 * clean)) ] && ok || bad "fewer than 95% of the files without an unmodelled feature run"
[ "$total" -ge 100 ] && ok || bad "the corpus has only $total files"
finish
