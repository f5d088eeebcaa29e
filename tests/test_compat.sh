#!/bin/sh
# Every pair of the main features (zerosim config-keys --combinations) runs
# through zerosim train --phantom and zerosim plan on the matrix's base (a
# stage-3 GPT of 4 blocks, 8 ranks in nodes of 4): both accept or both
# refuse, with the same one line, and the matrix printed from the rule table
# says the same (a cell R<n> is refused by both, P<n> by the planner alone,
# any other cell runs). A refusal
# that lives outside the table (src/config/compat.c) fails here.
# ZS_COMPAT_PAIRS=N checks only the first N pairs (the fast tier, make
# check, checks 40: every pair of stage 0 and of stage 1 with the rest).
. "$(dirname "$0")/testlib.sh"

"$ZS" config-keys --combinations >"$T/matrix" || { bad "config-keys --combinations failed"; finish; }
# the base, as the program prints it: "base train: --world-size W ARGS"
WORLD=$(sed -n 's/^base train: --world-size \([0-9]*\) .*/\1/p' "$T/matrix")
BASE_TRAIN=$(sed -n 's/^base train: --world-size [0-9]* //p' "$T/matrix")
BASE_PLAN=$(sed -n 's/^base plan: //p' "$T/matrix")
[ -n "$WORLD" ] && [ -n "$BASE_TRAIN" ] && [ -n "$BASE_PLAN" ] && ok ||
    { bad "the matrix names no base"; finish; }
# the features: "number name args..."
sed -n '/^features/,/^$/p' "$T/matrix" | sed '1d;/^$/d' >"$T/features"
nf=$(wc -l <"$T/features")
[ "$nf" -ge 20 ] && ok || bad "the matrix lists $nf features, expected 20 or more"
# the cells: row a, column b
sed -n '/^pairs/,$p' "$T/matrix" | sed '1,2d' >"$T/cells"

args_of() { sed -n "$1p" "$T/features" | sed 's/^ *[0-9]* *[^ ]* *//'; }
name_of() { sed -n "$1p" "$T/features" | awk '{print $2}'; }
cell_of() { awk -v a="$1" -v b="$2" '$1 == a { print $(b + 1) }' "$T/cells"; }
# the one line a refusal printed, without the command's prefixes
line_of() { head -1 "$1" | sed 's/^zerosim plan: //; s/^zerosim: //; s/^stage [0-9], N = [0-9]*: //'; }
# "tp pp" of an argument list
size_of() { echo " $2 " | sed -n "s/.* --$1 \([0-9]*\) .*/\1/p" | grep . || echo 1; }

limit=${ZS_COMPAT_PAIRS:-1000000}
zs_fast && limit=${ZS_COMPAT_PAIRS:-40}
count=0
a=1
while [ "$a" -le "$nf" ] && [ "$count" -lt "$limit" ]; do
    b=$a
    while [ "$b" -le "$nf" ] && [ "$count" -lt "$limit" ]; do
        count=$((count + 1))
        A=$(args_of "$a") B=$(args_of "$b")
        pair="$(name_of "$a") x $(name_of "$b")"
        tp=$(size_of tp "$A $B") pp=$(size_of pp "$A $B")
        dp=$((WORLD / (tp * pp)))
        # shellcheck disable=SC2086 # the argument lists split into words
        "$ZS" train --phantom --world-size $WORLD --steps 1 $BASE_TRAIN $A $B \
            >"$T/train.out" 2>"$T/train.err"
        trc=$?
        # shellcheck disable=SC2086
        "$ZS" plan $BASE_PLAN --dp $dp $A $B >"$T/plan.out" 2>"$T/plan.err"
        prc=$?
        cell=$(cell_of "$a" "$b")
        tl=$(line_of "$T/train.err") pl=$(line_of "$T/plan.err")
        if [ "$trc" -ne 0 ] && [ "$(wc -l <"$T/train.err")" -ne 1 ]; then
            bad "$pair: train refused with $(wc -l <"$T/train.err") lines, not one"
        elif [ "$prc" -ne 0 ] && [ "$(wc -l <"$T/plan.err")" -ne 1 ]; then
            bad "$pair: plan refused with $(wc -l <"$T/plan.err") lines, not one"
        elif [ "$trc" -ne 0 ] && [ "$prc" -eq 0 ]; then
            bad "$pair: train refuses ($tl), plan accepts"
        elif [ "$trc" -eq 0 ] && [ "$prc" -ne 0 ]; then
            case "$cell" in
            P*) ok ;; # the planner's own rule, printed as such in the matrix
            *) bad "$pair: plan refuses ($pl), train accepts, the matrix says $cell" ;;
            esac
        elif [ "$trc" -ne 0 ] && [ "$tl" != "$pl" ]; then
            bad "$pair: train and plan refuse with other lines: \"$tl\" / \"$pl\""
        else
            case "$cell" in
            R*) [ "$trc" -ne 0 ] && ok || bad "$pair: the matrix says $cell, train and plan accept" ;;
            P*) bad "$pair: the matrix says $cell (the planner refuses), plan accepts" ;;
            *) [ "$trc" -eq 0 ] && ok || bad "$pair: the matrix says $cell, both refuse: $tl" ;;
            esac
        fi
        b=$((b + 1))
    done
    a=$((a + 1))
done
echo "$count pairs"

# rules outside the matrix's features: the exact sums of slices
# (--exact-slices) on the GPT with --deterministic and no --cp (rule
# exact-slices), on the portable backend (rule device+exact-slices, which
# the engine asks of the backend it was given)
SMALL="--steps 1 --layers 1 --hidden 32 --heads 4 --seq 8 --vocab 32 --micro-batch 1"
# shellcheck disable=SC2086
refuse -m "exact-slices" train $SMALL --backend ref --exact-slices 8
# shellcheck disable=SC2086
refuse -m "backend cpu has no exact sums" train $SMALL --deterministic --exact-slices 8
# shellcheck disable=SC2086
refuse -m "exact-slices" train --phantom --world-size 2 --cp 2 $SMALL --deterministic \
    --exact-slices 8
# accepted where they hold; 8 slices of a sequence of 8 positions need the
# LayerNorm's scratch of 8 slices (it was sized for 4, and crashed)
# shellcheck disable=SC2086
zs_run exact 0 $SMALL --deterministic --backend ref --exact-slices 8 && ok
finish
