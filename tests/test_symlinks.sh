#!/bin/sh
# No output is ever written through a symlink (issue 42). For every command
# that writes, a run in a clean folder lists the files it writes; then, in a
# fresh folder, a symlink to a canary file is planted at each of those names
# and at the temporary names a writer used to take (NAME.tmp.PID, the nvme
# swap file zerosim-PID-rank0.swap, bench's zerosim-bench-PID.swap; PID for
# each of the next 2,000 process ids, since it cannot be known in advance),
# and the command runs again: it must succeed, leave the canary as it was,
# leave a plain file at each name (rename replaces the symlink itself, not
# what it points to) and no temporary file. Then the reader: a `latest` that
# is a symlink to the canary, that holds a newline and a forged line, or
# that names a step folder which is a symlink, is refused with one line
# quoting none of the canary. tests/check_io tests the functions directly.
. "$(dirname "$0")/testlib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

CANARY=$T/canary
printf 'root:x:0:0:canary line\nzerosim: a forged second line\n' >"$T/canary.orig"
cp "$T/canary.orig" "$CANARY"
MODEL="--layers 2 --hidden 32 --heads 4 --seq 16 --vocab 32 --micro-batch 2 --quiet"

# plant DIR PATTERN...: a symlink to the canary at DIR/PATTERN, or, where
# the pattern holds {pid}, at each name it gives for the next 2,000 ids
plant() {
    perl -e '
        my ($canary, $dir, @patterns) = @ARGV;
        my ($last, $max) = ($$, 32768);
        if (open(my $f, "<", "/proc/sys/kernel/ns_last_pid")) { $last = <$f> + 0; }
        if (open(my $f, "<", "/proc/sys/kernel/pid_max")) { $max = <$f> + 0; }
        for my $pat (@patterns) {
            if ($pat !~ /\{pid\}/) {
                symlink($canary, "$dir/$pat") or die "cannot plant $dir/$pat: $!\n";
                next;
            }
            for my $i (1 .. 2000) {
                my $p = $last + $i;
                $p -= $max - 300 if $p >= $max; # ids wrap round to 300
                (my $name = $pat) =~ s/\{pid\}/$p/;
                symlink($canary, "$dir/$name");
            }
        }' "$CANARY" "$@"
}

canary_intact() {
    if cmp -s "$CANARY" "$T/canary.orig"; then
        ok
    else
        bad "$1: the canary was written through a symlink"
        cp "$T/canary.orig" "$CANARY"
    fi
}

# writes LABEL COMMAND [PATTERN...]: COMMAND (evaluated, $OUT its output
# folder) in a clean folder, then with symlinks planted at each name it
# wrote, each name's NAME.tmp.{pid}, and each extra PATTERN
writes() {
    label=$1 cmd=$2
    shift 2
    rm -rf "$T/clean" "$T/trap"
    mkdir "$T/clean" "$T/trap"
    OUT=$T/clean
    if ! eval "$cmd" </dev/null >"$T/log" 2>&1; then
        bad "$label: failed in a clean folder"
        cat "$T/log"
        return
    fi
    files=$(cd "$T/clean" && find . -type f | sort)
    [ -n "$files" ] || { bad "$label: wrote nothing"; return; }
    (cd "$T/clean" && find . -type d) | (cd "$T/trap" && xargs mkdir -p)
    for f in $files; do
        plant "$T/trap" "$f" "$f.tmp.{pid}"
    done
    [ $# -gt 0 ] && plant "$T/trap" "$@"
    # shellcheck disable=SC2034 # OUT is read by the eval of writes' command
    OUT=$T/trap
    if eval "$cmd" </dev/null >"$T/log" 2>&1; then
        ok
    else
        bad "$label: failed with symlinks planted: $(head -3 "$T/log")"
    fi
    canary_intact "$label"
    for f in $files; do
        if [ -f "$T/trap/$f" ] && [ ! -L "$T/trap/$f" ]; then ok; else
            bad "$label: $f is not a plain file (the symlink was not replaced)"
        fi
    done
    left=$(cd "$T/trap" && find . -type f | sort)
    [ "$left" = "$files" ] && ok ||
        bad "$label: files other than the outputs left: $(echo "$left" | grep -vxF "$files" | head -3)"
}

# refused LABEL PATTERN COMMAND: COMMAND fails with one line matching
# PATTERN (grep -F) that quotes none of the canary
refused() {
    label=$1 want=$2
    if eval "$3" </dev/null >"$T/log" 2>&1; then
        bad "$label: accepted"
        return
    fi
    [ "$(wc -l <"$T/log")" -eq 1 ] && ok || { bad "$label: not one line:"; cat "$T/log"; }
    grep -qF -- "$want" "$T/log" && ok || bad "$label: no \"$want\" in: $(head -3 "$T/log")"
    grep -q "root:x\|canary line" "$T/log" && bad "$label: the canary quoted: $(cat "$T/log")" || ok
    canary_intact "$label"
}

# the inputs: a checkpoint and a weight file
mkdir "$T/src"
"$ZS" train $MODEL --steps 2 --stage 1 --save-dir "$T/src/ck" --save-every 1 </dev/null \
    >"$T/log" 2>&1 || { bad "the input checkpoint: train failed"; cat "$T/log"; finish; }

# shellcheck disable=SC2016 # $OUT and $ZS are expanded by writes' eval
{
writes "train (2 ranks)" 'sh "$HERE/mpirun.sh" 2 "$ZS" train $MODEL --steps 2 --stage 2 \
    --report "$OUT/r.json" --csv "$OUT/csv" --save-dir "$OUT/ck" --save-every 1 \
    --dump-dir "$OUT/dd" --dump-steps 1 --trace "$OUT/t.json" --export "$OUT/w.safetensors"'
writes "export --out (safetensors)" '"$ZS" export --from "$T/src/ck" --out "$OUT/e.safetensors"'
writes "export --out (llm.c)" '"$ZS" export --from "$T/src/ck" --out "$OUT/e.bin"'
writes "quantize --out" '"$ZS" quantize --from "$T/src/ck" --format nf4 --out "$OUT/q.safetensors"'
writes "compress --out" '"$ZS" compress --from "$T/src/ck" --out "$OUT/m.zc" --sparsity 0.9 \
    --bits 4 --index-bits 3 --retrain-steps 2 --finetune-steps 2 --samples 64 --prune-rounds 1'
writes "bench --out" 'TMPDIR="$OUT" "$ZS" bench --quick --out "$OUT/cal.json"' \
    "zerosim-bench-{pid}.swap"
writes "plan --csv" '"$ZS" plan --params 1e9 --stage 1,2 --dp 8 --csv "$OUT/p.csv"'
# the nvme swap file: created fresh per run (exclusively, at a name nobody
# can plant in advance) and removed at the end
writes "train --offload-optimizer nvme" 'mkdir -p "$OUT/nvme" && "$ZS" train $MODEL --steps 2 --stage 1 \
    --offload-optimizer nvme --nvme-path "$OUT/nvme" --report "$OUT/r.json"' \
    "nvme/zerosim-{pid}-rank0.swap"
}

# the reader of latest
for c in l1 l2 l3; do cp -R "$T/src/ck" "$T/$c"; done
rm "$T/l1/latest"
ln -s "$CANARY" "$T/l1/latest"
printf 'global_step2\nzerosim: a forged second line\n' >"$T/l2/latest"
mv "$T/l3/global_step2" "$T/elsewhere"
ln -s "$T/elsewhere" "$T/l3/global_step2"
# shellcheck disable=SC2016
{
refused "--resume, latest a symlink" "latest is a symlink" \
    '"$ZS" train $MODEL --silent --steps 4 --stage 1 --resume "$T/l1"'
refused "export --from, latest a symlink" "latest is a symlink" \
    '"$ZS" export --from "$T/l1" --out "$T/x.safetensors"'
refused "--resume, latest with a forged line" '"global_step2\nzerosim: a forged' \
    '"$ZS" train $MODEL --silent --steps 4 --stage 1 --resume "$T/l2"'
refused "--resume, the step folder a symlink" "global_step2 is not a folder" \
    '"$ZS" train $MODEL --silent --steps 4 --stage 1 --resume "$T/l3"'
}
finish
