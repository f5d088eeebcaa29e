#!/bin/sh
# Saving is atomic at every point of the publish sequence, re-saving a step
# that exists included. The test hook ZEROSIM_FAULT_PUBLISH=N makes the
# saving process _exit at point N of ck_publish (src/io/checkpoint.c), as a
# rank killed there would stop. For every N, and for both a first save of
# a step and a re-save of it:
#  - the --save-dir resumes (--resume DIR, through latest) to the
#    parameters of the run that never stopped, byte for byte;
#  - the next save into it succeeds, moves latest, and leaves no
#    .global_stepK.tmp or .old folder behind, and it resumes exactly too.
. "$(dirname "$0")/testlib.sh"

MODEL="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32"
run() { "$ZS" train $MODEL --silent "$@" </dev/null; }

run --steps 6 --report "$T/full.json" >"$T/log" 2>&1 || { bad "the uninterrupted run failed"; finish; }
want=$(key "$T/full.json" param_hash)
run --steps 4 --save-every 2 --save-dir "$T/base" >"$T/log" 2>&1 ||
    { bad "the saving run failed: $(cat "$T/log")"; finish; }
[ "$(cat "$T/base/latest")" = global_step4 ] || { bad "latest is not global_step4"; finish; }

# resumes LABEL: the checkpoint in $T/ck resumes to the uninterrupted run,
# and so does the save that the resumed run makes after step 6
resumes() {
    if ! run --steps 6 --resume "$T/ck" --report "$T/r.json" >"$T/log" 2>&1; then
        bad "$1: --resume failed: $(cat "$T/log")"; return
    fi
    got=$(key "$T/r.json" param_hash)
    [ -n "$want" ] && [ "$got" = "$want" ] && ok || bad "$1: resumed to $got, not $want"
    if ! run --steps 6 --resume "$T/ck" --save-dir "$T/ck" --save-every 2 >"$T/log" 2>&1; then
        bad "$1: the next save failed: $(cat "$T/log")"; return
    fi
    # shellcheck disable=SC2010 # the hidden names only; the files are this test's own
    left=$(ls -A "$T/ck" | grep '^\.' | tr '\n' ' ')
    [ "$(cat "$T/ck/latest")" = global_step6 ] && [ -z "$left" ] && ok ||
        bad "$1: after the next save latest is $(cat "$T/ck/latest"), left: $left"
    run --steps 7 --resume "$T/ck" --report "$T/r7.json" >"$T/log" 2>&1 &&
        [ "$(key "$T/r7.json" resumed_param_hash)" = "$want" ] && ok ||
        bad "$1: the next save does not resume to $want: $(cat "$T/log")"
}

fired=0
for n in 1 2 3 4 5 6 7 8; do
    for how in resave first; do
        rm -rf "$T/ck"
        cp -r "$T/base" "$T/ck"
        if [ "$how" = first ]; then # step 4 not saved yet: latest names step 2
            rm -rf "$T/ck/global_step4"
            echo global_step2 >"$T/ck/latest"
        fi
        ZEROSIM_FAULT_PUBLISH=$n run --steps 4 --save-every 2 --save-dir "$T/ck" \
            --resume "$T/ck/global_step2" >"$T/log" 2>&1
        rc=$?
        if grep -q "test hook: exits at publish point $n" "$T/log"; then
            [ "$rc" -ne 0 ] && ok || bad "$how, point $n: the hook fired and the exit was 0"
            fired=$((fired + 1))
        elif [ "$rc" -ne 0 ]; then
            bad "$how, point $n: the save failed: $(cat "$T/log")"
        fi
        resumes "$how, killed at publish point $n"
    done
done
# a re-save passes every point; a first save skips the three of the old copy
echo "publish points where the hook fired: $fired"
[ "$fired" -eq 13 ] && ok || bad "the hook fired at $fired points, not 13"
finish
