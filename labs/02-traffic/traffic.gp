# Bytes per training step sent by rank 0 (reduce-scatter + allgather, ring
# volume) against N, per ZeRO stage: measured points (moved apart a little
# where stages 0-2 coincide), closed-form lines.
# Reads datadir/traffic.dat.
MB = 1e6
file = datadir . "/traffic.dat"
set title "Lab 2: bytes rank 0 sends per step (GPT, 1.66 M parameters, bf16)"
set xlabel "ranks N"
set ylabel "bytes per step (MB = 1e6 bytes)"
set xrange [0.5:4.5]
set xtics 1
set yrange [0:*]
set grid
set key top left
array C[4] = ["#5d7fc0", "#52be80", "#f5b041", "#c0392b"]
array P[4] = [7, 5, 9, 13]
plot for [s=0:3] file using ($1 == s ? $2 : 1/0):($7 / MB) with lines lw 2 dt 2 lc rgb C[s + 1] notitle, \
     for [s=0:3] file using ($1 == s ? $2 + (s - 1.5) * 0.07 : 1/0):($6 / MB) with points pt P[s + 1] ps 1.8 lc rgb C[s + 1] title sprintf("stage %d", s)
