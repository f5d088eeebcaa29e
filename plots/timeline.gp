# Memory of rank 0 by category over the allocation and free events of one
# training step, stacked (params at the bottom), one bar per event (the
# memory held after it); the black line is the total the allocator
# reports, which the stack must reach.
# Usage: gnuplot -e "datadir='plots/data'; outdir='plots'" plots/timeline.gp
if (!exists("datadir")) datadir = "plots/data"
if (!exists("outdir")) outdir = "plots"
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,600 font "Sans,11" noenhanced
} else {
    set terminal png size 900,600 noenhanced
}
set output outdir . "/timeline.png"
file = datadir . "/timeline.dat"
MiB = 1048576.0
# columns 2-9 are the categories, 10 the total; cum(c): columns 2..c summed
cats = "params grads optimizer activations checkpoints comm_buffers compression workspace"
cum(c) = c < 2 ? 0 : column(c) + cum(c - 1)
array C[8] = ["#a569bd", "#52be80", "#85c1e9", "#f5b041", "#f7dc6f", "#5d7fc0", "#ec7063", "#bfbfbf"]
# the "# step S" and (from sweep.sh) "# run ..." comment lines, if present
step = system(sprintf("awk '/^# step /{print $3; exit}' '%s'", file))
run = system(sprintf("awk '/^# run /{sub(/^# run /, \"\"); print; exit}' '%s'", file))

set title sprintf("Memory of rank 0 during training step %s%s", step, run eq "" ? "" : " (" . run . ")")
set xlabel "allocation or free event within the step"
set ylabel "memory held (MiB)"
set yrange [0:*]
set autoscale xfix
set offsets 0.5, 0.5, 0, 0
set grid front
set key outside right top
set style fill solid 1.0 noborder
set boxwidth 1.04 absolute   # a little overlap hides seams
# each bar reaches the top of its category; the lower ones are drawn over it
plot for [i=9:2:-1] file using 1:(cum(i) / MiB) with boxes lc rgb C[i - 1] title word(cats, i - 1), \
     file using 1:($10 / MiB) with histeps lw 1.5 lc "black" title "total"
