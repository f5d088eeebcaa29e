#!/bin/sh
# Reports by class of ranks (docs/report.md): from 9 ranks on, the JSON
# lists the ranks whose figures are the same as one row with their ranks as
# ranges, and --report-per-rank keeps a row for every rank. For phantom runs
# that make ranks differ (pipeline stages, ring neighbours on other nodes)
# and one with padding: expanding the classes gives the per-rank rows byte
# for byte (the expansion is written here, in Python, from the documented
# layout), the ranks that differ are in classes of their own, the CSV files
# are the same either way, and the text tables print a class once.
. "$(dirname "$0")/testlib.sh"

command -v python3 > /dev/null || { echo "SKIP: python3 is needed to read the reports"; exit 77; }

MODEL="--layers 2 --hidden 24 --heads 4 --seq 10 --vocab 40 --micro-batch 2 --steps 2 --warmup 0"

# run LABEL N ARGS...: the phantom run in both forms: $T/LABEL-c (classes)
# and $T/LABEL-p (--report-per-rank), each a .json, a .txt and a --csv folder
run() {
    label=$1 n=$2
    shift 2
    for form in c p; do
        extra=
        [ $form = p ] && extra=--report-per-rank
        if ! "$ZS" train --phantom --world-size "$n" $MODEL "$@" $extra --report "$T/$label-$form.json" \
                --csv "$T/$label-$form" > "$T/$label-$form.txt" 2>&1; then
            bad "$label ($form): the run failed: $(tail -2 "$T/$label-$form.txt")"
            return 1
        fi
    done
}

# agree LABEL: the class form expanded is the per-rank form; prints the
# memory and comm classes' rank lists, one class a line ("memory 0-5")
agree() {
    python3 - "$T/$1-c.json" "$T/$1-p.json" <<'PY'
import json, sys

def ranks_of(text):
    """ "0-2,4,6-7" -> [0, 1, 2, 4, 6, 7] """
    out = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out

def expand(rows, node_of=None, rss=None):
    """Class rows -> per-rank rows: "rank" (and "node") first, then the
    class's figures; rank 0's memory row gets the process's RSS before "tiers"."""
    per_rank = {}
    for row in rows:
        for q in ranks_of(row["ranks"]):
            assert q not in per_rank, "rank %d in two classes" % q
            out = {"rank": q}
            if node_of is not None:
                out["node"] = node_of[q]
            for k, v in row.items():
                if k in ("ranks", "rank_count"):
                    continue
                if k == "tiers" and q == 0 and rss is not None:
                    out["peak_rss_bytes"] = rss
                out[k] = v
            if q == 0 and rss is not None and "peak_rss_bytes" not in out:
                out["peak_rss_bytes"] = rss
            per_rank[q] = out
        assert len(ranks_of(row["ranks"])) == row["rank_count"], row["ranks"]
    assert sorted(per_rank) == list(range(len(per_rank))), "ranks missing"
    return [per_rank[q] for q in sorted(per_rank)]

c = json.load(open(sys.argv[1]))
p = json.load(open(sys.argv[2]))
N = c["world_size"]
assert c["report_version"] == 2 and p["report_version"] == 2
assert c["rank_rows"] == "classes" and p["rank_rows"] == "per_rank", (c["rank_rows"], p["rank_rows"])
node_of = {}
for row in c["rank_nodes"]:
    for q in ranks_of(row["ranks"]):
        node_of[q] = row["node"]
assert sorted(node_of) == list(range(N))
# the process's peak RSS and the steps' seconds differ between the two
# runs: the same in both
rss = 1
p["memory"][0]["peak_rss_bytes"] = rss
for d in (c, p):
    for row in d.get("pipeline", {}).get("ranks", []):
        row["step_seconds"] = 0
sections = {
    "memory": (lambda d: d["memory"], None, rss),
    "comm": (lambda d: d["comm"], node_of, None),
    "pipeline": (lambda d: d["pipeline"]["ranks"], None, None),
    "checkpoint_io": (lambda d: d["checkpoint_io"], None, None),
}
for name, (get, nodes, r) in sections.items():
    if name not in p:
        assert name not in c, name
        continue
    got = json.dumps(expand(get(c), nodes, r), indent=2)
    want = json.dumps(get(p), indent=2)
    if got != want:
        sys.exit("%s: the expanded classes differ from the per-rank rows" % name)
# the rest of the report is the same, but for what the form adds and time
for d in (c, p):
    for k in ("rank_rows", "peak_rss_bytes", "rank_nodes", "memory", "comm", "seconds",
              "step_seconds"):
        d.pop(k, None)
    if "pipeline" in d:
        d["pipeline"].pop("ranks")
if json.dumps(c) != json.dumps(p):
    sys.exit("the keys beside the rank rows differ")
# classes do not repeat: no two classes of a table have the same figures
for name in ("memory", "comm"):
    rows = json.load(open(sys.argv[1]))[name]
    seen = set()
    for row in rows:
        fig = json.dumps({k: v for k, v in row.items() if k not in ("ranks", "rank_count")})
        assert fig not in seen, "%s: two classes with the same figures" % name
        seen.add(fig)
        print(name, row["ranks"])
PY
}

# same_csv LABEL: the CSV files are the same in both forms (steps.csv's
# seconds aside)
same_csv() {
    for f in run.csv memory.csv comm.csv comm_groups.csv timeline.csv; do
        cmp -s "$T/$1-c/$f" "$T/$1-p/$f" && ok || bad "$1: $f differs between the forms"
    done
    awk '{$6 = ""; print}' "$T/$1-c/steps.csv" > "$T/$1-c.steps"
    awk '{$6 = ""; print}' "$T/$1-p/steps.csv" > "$T/$1-p.steps"
    cmp -s "$T/$1-c.steps" "$T/$1-p.steps" && ok || bad "$1: steps.csv differs between the forms"
}

# classes LABEL TABLE: the classes' rank lists of a table, space-separated
classes() { awk -v t="$2" '$1 == t { printf "%s%s", sep, $2; sep = " " }' "$T/$1.classes"; }

check() { # LABEL: the expansion, the CSV
    if agree "$1" > "$T/$1.classes" 2> "$T/$1.err"; then ok
    else bad "$1: $(tail -1 "$T/$1.err")"; fi
    same_csv "$1"
}

# pipeline, 2 stages on 12 ranks: a memory class per stage; the first and
# last ranks (the tied embedding's sends) apart from their stages' others
if run pp 12 --stage 1 --pp 2 --grad-accum 4; then
    check pp
    [ "$(classes pp memory)" = "0-5 6-11" ] && ok || bad "pp: memory classes $(classes pp memory)"
    [ "$(classes pp comm)" = "0 1-5 6-10 11" ] && ok || bad "pp: comm classes $(classes pp comm)"
    # the text: a class's first rank stands for its others
    grep -q "(ranks 1-5: the same as rank 0)" "$T/pp-c.txt" && ok || bad "pp: text table by class"
    [ "$(grep -c "total peak" "$T/pp-c.txt")" = 2 ] && ok ||
        bad "pp: $(grep -c "total peak" "$T/pp-c.txt") memory blocks in the text, not 2"
fi

# nodes of 4 ranks: each node's last rank sends across nodes (strided,
# "3,7,11"); "rank_nodes" gives each rank's node
if run nodes 12 --stage 3 --ranks-per-node 4; then
    check nodes
    [ "$(classes nodes comm)" = "0-2,4-6,8-10 3,7,11" ] && ok || bad "nodes: comm classes $(classes nodes comm)"
    grep -q "(ranks 7,11: the same as rank 3)" "$T/nodes-c.txt" && ok ||
        bad "nodes: the text's traffic table by class"
fi

# padding: 13 ranks do not divide the parameters; every rank holds an
# equal padded shard, so the ranks stay one class
if run pad 13 --stage 3; then
    check pad
    pad=$(key "$T/pad-c.json" padded_params) n=$(key "$T/pad-c.json" num_params)
    [ "$pad" -gt "$n" ] && ok || bad "pad: no padding ($n of $pad)"
    [ "$(classes pad memory)" = "0-12" ] && ok || bad "pad: memory classes $(classes pad memory)"
fi

# up to 8 ranks the rows are per rank by default; from 9 by class
for n in 8 9; do
    "$ZS" train --phantom --world-size $n $MODEL --stage 2 --quiet --report "$T/n$n.json" \
        > "$T/n$n.txt" 2>&1 || bad "$n ranks: the run failed"
done
[ "$(key "$T/n8.json" rank_rows)" = per_rank ] && [ "$(key "$T/n9.json" rank_rows)" = classes ] && ok ||
    bad "default forms: 8 ranks $(key "$T/n8.json" rank_rows), 9 ranks $(key "$T/n9.json" rank_rows)"

finish
