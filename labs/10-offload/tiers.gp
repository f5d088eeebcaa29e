# Rank 0's peak bytes in each tier (device: every category; host; nvme
# files) for stage 2 without offload, the optimizer on the host (cpu), in
# files (nvme), and stage 3 with the parameters in files too (inf). Reads
# datadir/tiers.dat (config device host nvme).
file = datadir . "/tiers.dat"
set title "Lab 10: where the bytes live (default GPT, bf16, 2 ranks, rank 0's peaks)"
set ylabel "MB (1e6 bytes)"
set xlabel "run"
set yrange [0:*]
set xrange [-0.6:3.6]
set grid ytics
set key top right
set style fill solid 1.0 noborder
set boxwidth 0.25
plot file using ($0 - 0.27):($2 / 1e6):xtic(1) with boxes lc rgb "#85c1e9" title "device", \
     file using ($0):($3 / 1e6) with boxes lc rgb "#f5b041" title "host", \
     file using ($0 + 0.27):($4 / 1e6) with boxes lc rgb "#a569bd" title "nvme (files)"
