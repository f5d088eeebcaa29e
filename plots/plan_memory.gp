# Planned per-device memory (params + grads + optimizer states, plus
# activations when the model has a shape) against the number of
# data-parallel devices N, one line per ZeRO stage, from
#   zerosim plan ... --dp 1,4,16,64,256,1024 --stage 0,1,2,3 --csv FILE
# (columns: stage dp params grads optimizer activations total traffic
# step_s fits max_params; bytes per device).
# Usage: gnuplot -e "datadir='plots/data'; outdir='plots'" plots/plan_memory.gp
if (!exists("datadir")) datadir = "plots/data"
if (!exists("outdir")) outdir = "plots"
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,600 font "Sans,11" noenhanced
} else {
    set terminal png size 900,600 noenhanced
}
set output outdir . "/plan_memory.png"
file = datadir . "/plan_memory.dat"
GB = 1e9
# total bytes (column 7) of the rows of stage s, in GB
pick(s) = column(1) == s ? column(7) / GB : NaN
array PT[4] = [6, 4, 8, 7]

set title "Planned memory per device against N (zerosim plan)"
set xlabel "data-parallel devices N"
set ylabel "memory per device (GB = 1e9 bytes)"
set logscale xy 2
set grid
set key top right box opaque
plot for [s=0:3] file using 2:(pick(s)) with linespoints lw 2 pt PT[s+1] lc s+1 \
     title sprintf("ZeRO stage %d", s)
