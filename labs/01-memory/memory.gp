# Rank 0's peak memory per ZeRO stage, stacked by category (model states at
# the bottom), with the closed form of the model states as a black mark and
# the ZeRO paper's (2+2+K)Psi... as a red one. Reads datadir/memory.dat.
# The terminal and output are set by labs/lib.sh (lab_plot).
MB = 1e6
file = datadir . "/memory.dat"
cats = "params grads optimizer activations comm_buffers workspace"
cum(c) = c < 2 ? 0 : column(c) + cum(c - 1)
array C[6] = ["#a569bd", "#52be80", "#85c1e9", "#f5b041", "#5d7fc0", "#bfbfbf"]
set title "Lab 1: peak of each category on rank 0, stacked (GPT, 1.66 M parameters, bf16, 4 ranks)"
set xlabel "ZeRO stage"
set ylabel "bytes at the peak (MB = 1e6 bytes)"
set xrange [-0.6:3.6]
set xtics 1
set yrange [0:*]
set grid ytics
set key outside right top
set style fill solid 1.0 border lc "white"
set boxwidth 0.6
plot for [i=7:2:-1] file using 1:(cum(i) / MB) with boxes lc rgb C[i - 1] title word(cats, i - 1), \
     file using 1:($10 / MB):(0.32) with xerrorbars pt -1 lw 3 lc "black" title "model states (closed form)", \
     file using 1:($11 / MB):(0.32) with xerrorbars pt -1 lw 2 dt 2 lc "red" title "ZeRO paper", \
     file using 1:($8 / MB):(0.32) with xerrorbars pt -1 lw 2 lc "#c0392b" title "total peak"
