#!/bin/sh
# zerosim mesh: the groups of a tensor x data x pipeline mesh in
# Megatron-LM's rank order, checked against the table Megatron-LM documents
# for 16 ranks, tensor-parallel 2 and pipeline-parallel 4
# (megatron/core/parallel_state.py, initialize_model_parallel); JSON output;
# error cases. Then the mesh's communicators under MPI (tests/check_comm).
. "$(dirname "$0")/testlib.sh"

"$ZS" mesh --world 16 --tp 2 --pp 4 >"$T/out" || bad "mesh 16/2/4 failed"
want_tp="tp groups (8 of 2): [0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]"
want_dp="dp groups (8 of 2): [0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]"
want_pp="pp groups (4 of 4): [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]"
for w in "$want_tp" "$want_dp" "$want_pp"; do
    grep -qxF "$w" "$T/out" && ok || { bad "missing: $w"; cat "$T/out"; }
done

"$ZS" mesh --world 16 --tp 2 --pp 4 --json >"$T/out.json" || bad "mesh --json failed"
grep -q '"dp_size": 2' "$T/out.json" &&
grep -q '"pp": \[\[0,4,8,12\], \[1,5,9,13\], \[2,6,10,14\], \[3,7,11,15\]\]' "$T/out.json" && ok ||
    { bad "JSON pp groups"; cat "$T/out.json"; }

# every rank is in exactly one group of each axis, for several meshes
for m in "8 1 1" "8 2 1" "8 4 2" "12 3 2" "6 1 3"; do
    set -- $m
    "$ZS" mesh --world "$1" --tp "$2" --pp "$3" >"$T/m" || { bad "mesh $m"; continue; }
    for ax in tp dp pp; do
        n=$(grep "^$ax groups" "$T/m" | tr -c '0-9\n' ' ' | awk '{ for (i = 3; i <= NF; i++) print $i }' | sort -n | uniq | wc -l)
        [ "$n" -eq "$1" ] && ok || bad "mesh $m: $ax groups cover $n ranks"
    done
done

# errors: one line, non-zero exit
err() { # pattern args
    pat=$1; shift
    if "$ZS" mesh "$@" >/dev/null 2>"$T/err"; then bad "mesh $* succeeded"
    elif [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q -- "$pat" "$T/err"; then ok
    else bad "mesh $*: $(cat "$T/err")"; fi
}
err "do not divide" --world 10 --tp 4
err "do not divide" --world 16 --tp 2 --pp 3
err "give --world" --tp 2
err "must be an integer" --world 8 --tp zero

# expert parallelism: DeepSpeed's groups.py docstring example (16 ranks,
# ep 2), JSON, and an ep that does not divide the data-parallel size
"$ZS" mesh --world 16 --ep 2 >"$T/ep" || bad "mesh --ep 2 failed"
grep -qxF "ep groups (8 of 2): [0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]" "$T/ep" &&
grep -qxF "edp groups (2 of 8): [0,2,4,6,8,10,12,14] [1,3,5,7,9,11,13,15]" "$T/ep" && ok ||
    { bad "ep/edp groups of 16 ranks, ep 2"; cat "$T/ep"; }
"$ZS" mesh --world 8 --pp 2 --ep 2 --json >"$T/ep.json" || bad "mesh --ep --json failed"
grep -q '"ep": \[\[0,1\], \[2,3\], \[4,5\], \[6,7\]\]' "$T/ep.json" &&
grep -q '"edp": \[\[0,2\], \[1,3\], \[4,6\], \[5,7\]\]' "$T/ep.json" && ok ||
    { bad "JSON ep/edp groups with pp 2"; cat "$T/ep.json"; }
if "$ZS" mesh --world 8 --ep 3 >"$T/o" 2>&1; then bad "ep 3 of 8 accepted"; else
    grep -q "expert-parallel size (--ep 3) must divide" "$T/o" && ok || { bad "ep 3: $(cat "$T/o")"; }
fi

# the communicators of a mesh under MPI (4 ranks: tp 2)
sh "$HERE/mpirun.sh" 4 ./tests/check_comm >"$T/mpi" 2>&1 && ok || { bad "check_comm at 4 ranks"; cat "$T/mpi"; }

finish
