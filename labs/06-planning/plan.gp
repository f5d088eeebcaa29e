# GPT-3 175B on 1024 devices, per ZeRO stage: bytes per device by group
# (params, grads, optimizer, activations, and the rest), log scale, against
# 32 GB and 80 GB devices. Reads datadir/fit.dat (stage params grads
# optimizer activations total fits, in GB = 1e9 bytes).
file = datadir . "/fit.dat"
set title "Lab 6: GPT-3 175B on 1024 devices (bf16, sqrt checkpointing, micro-batch 1), plan"
set ylabel "GB per device (1e9 bytes, log scale)"
set xlabel "ZeRO stage"
set logscale y
set yrange [0.1:5000]
set xrange [-0.6:3.6]
set xtics 1
set grid ytics
set key top right
set style fill solid 1.0 noborder
set boxwidth 0.16
array C[5] = ["#a569bd", "#52be80", "#85c1e9", "#f5b041", "#bfbfbf"]
plot for [i=2:5] file using ($1 + (i - 3.5) * 0.17):(column(i)) with boxes lc rgb C[i - 1] title word("params grads optimizer activations", i - 1), \
     file using 1:6:(0.45) with xerrorbars pt -1 lw 2 lc "black" title "total (all categories)", \
     32 with lines dt 2 lc "red" title "32 GB", \
     80 with lines dt 3 lc "#c0392b" title "80 GB"
