# One training step per rank from a --trace file (plots/gantt_data.c makes
# the rows): for each rank a compute lane and, above it, a communication
# lane; the stage-3 prefetched gathers show as allgathers that run while
# the compute lane is busy.
# Usage: gnuplot -e "datadir='plots/data'; outdir='plots'" plots/gantt.gp
if (!exists("datadir")) datadir = "plots/data"
if (!exists("outdir")) outdir = "plots"
# name: the data file and the picture (gantt; pipeline_gantt for a --pp run)
if (!exists("name")) name = "gantt"
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 1000,520 font "Sans,11" noenhanced
} else {
    set terminal png size 1000,520 noenhanced
}
set output outdir . "/" . name . ".png"
file = datadir . "/" . name . ".dat"
ranks = system(sprintf("awk '!/^#/ && $1 + 1 > n {n = $1 + 1} END {print n + 0}' '%s'", file)) + 0
run = system(sprintf("awk '/^# run /{sub(/^# run /, \"\"); print; exit}' '%s'", file))
array C[8] = ["#5d7fc0", "#ec7063", "#f5b041", "#d5d8dc", "#85c1e9", "#52be80", "#a569bd", "#7f8c8d"]
array K[8] = ["forward", "backward", "recompute", "wait", "other compute", "allgather", \
              "reduce-scatter", "other collectives"]
set title "One training step per rank" . (run eq "" ? "" : " (" . run . ")")
set xlabel "milliseconds since the step began"
set yrange [-0.6:3 * ranks - 0.4]
set ytics ()
do for [r = 0:ranks - 1] {
    set ytics add (sprintf("rank %d compute", r) 3 * r, sprintf("rank %d comm", r) 3 * r + 1)
}
set grid xtics
set key outside right top
set style fill solid 0.9 border lc rgb "#404040"
row(rank, lane) = 3 * rank + lane
plot for [k = 0:7] file using (($5 == k) ? ($3 + $4) / 2 : 1/0):(row($1, $2)):(($4 - $3) / 2):(0.38) \
        with boxxyerror lc rgb C[k + 1] title K[k + 1]
