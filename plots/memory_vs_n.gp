# Per-rank model-state memory (params + grads + optimizer states, peak
# bytes of rank 0) against the number of ranks N, one colour per ZeRO
# stage: measured as points, the closed-form prediction as lines.
# Usage: gnuplot -e "datadir='plots/data'; outdir='plots'" plots/memory_vs_n.gp
if (!exists("datadir")) datadir = "plots/data"
if (!exists("outdir")) outdir = "plots"
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,600 font "Sans,11" noenhanced
} else {
    set terminal png size 900,600 noenhanced
}
set output outdir . "/memory_vs_n.png"
file = datadir . "/memory_vs_n.dat"
MiB = 1048576.0
# column c of the rows of stage s, in MiB; no point elsewhere or when < 0
pick(s, c) = (column(1) == s && column(c) >= 0) ? column(c) / MiB : NaN
# stages may coincide: nested open markers and lines of decreasing width
array PT[4] = [6, 4, 8, 7]
array PS[4] = [2.6, 2.0, 1.6, 1.1]
array LW[4] = [5.5, 3.5, 2, 1]

set title "Model-state memory per rank (params + grads + optimizer states), peak on rank 0"
set xlabel "data-parallel ranks N"
set ylabel "memory per rank (MiB)"
set xtics 1
set autoscale xfix
set offsets 0.25, 0.25, 0, 0
set yrange [0:*]
set grid
set key top right box opaque
plot for [s=0:3] file using 2:(pick(s, 10)) with lines lw LW[s+1] lc s+1 notitle, \
     for [s=0:3] file using 2:(pick(s, 6)) with points pt PT[s+1] ps PS[s+1] lw 2 lc s+1 notitle, \
     for [s=0:3] NaN with linespoints lw LW[s+1] pt PT[s+1] ps PS[s+1] lc s+1 title sprintf("ZeRO stage %d", s), \
     NaN with points pt 6 ps 1.6 lw 2 lc "black" title "measured", \
     NaN with lines lw 2 lc "black" title "predicted"
