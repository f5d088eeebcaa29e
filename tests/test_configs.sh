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

clean=$((total - refused))
echo "configs: $total files; $runs load and would run ($sample trained 2 steps); $refused stop on" \
     "a DeepSpeed feature zerosim does not model; $refused_other use only keys DeepSpeed does not know"
echo "configs: of the $clean files that use no unmodelled feature, $runs run ($((100 * runs / (clean > 0 ? clean : 1)))%)"
[ $((100 * runs)) -ge $((95 * clean)) ] && ok || bad "fewer than 95% of the files without an unmodelled feature run"
[ "$total" -ge 100 ] && ok || bad "the corpus has only $total files"
finish
