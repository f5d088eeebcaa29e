# Memory of rank 0 by category over the allocation and free events of one
# training step of ZeRO stage 3, stacked (params at the bottom); the black
# steps are the total, the dashed line stage 0's peak (stage 0 allocates
# nothing during a step: its timeline is flat). Reads datadir/timeline_s3.dat
# (a run's timeline.csv) and datadir/memory.dat.
MB = 1e6
file = datadir . "/timeline_s3.dat"
cats = "params grads optimizer activations checkpoints comm_buffers compression workspace"
cum(c) = c < 2 ? 0 : column(c) + cum(c - 1)
array C[8] = ["#a569bd", "#52be80", "#85c1e9", "#f5b041", "#f7dc6f", "#5d7fc0", "#ec7063", "#bfbfbf"]
stats datadir . "/memory.dat" using ($1 == 0 ? $8 : 1/0) name "S0" nooutput
set title "Lab 1: memory of rank 0 during one training step, ZeRO stage 3 (4 ranks, bf16)"
set xlabel "allocation or free event within the step"
set ylabel "held (MB = 1e6 bytes)"
set yrange [0:S0_max / MB * 1.08]
set autoscale xfix
set offsets 0.5, 0.5, 0, 0
set grid front
set key outside right top
set style fill solid 1.0 noborder
set boxwidth 1.04 absolute
plot for [i=9:2:-1] file using 1:(cum(i) / MB) with boxes lc rgb C[i - 1] title word(cats, i - 1), \
     file using 1:($10 / MB) with histeps lw 1.5 lc "black" title "total", \
     S0_max / MB with lines dt 2 lw 2 lc "red" title "stage 0's peak"
