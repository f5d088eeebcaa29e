# The pipeline's activations: bytes of saved activations on each stage under
# GPipe, 1F1B and the interleaved schedule (P = 4, m = 8). Reads
# datadir/slots.dat (stage gpipe 1f1b interleaved, bytes).
MB = 1e6
file = datadir . "/slots.dat"
set title "Lab 8: activations per stage (8-block GPT, P = 4, m = 8), counted"
set ylabel "activations (MB = 1e6 bytes)"
set xlabel "pipeline stage (rank)"
set yrange [0:*]
set xrange [-0.6:3.6]
set grid ytics
set key top right
set style fill solid 1.0 noborder
set boxwidth 0.25
plot file using ($0 - 0.27):($2 / MB) with boxes lc rgb "#f5b041" title "GPipe", \
     file using ($0):($3 / MB):xtic(1) with boxes lc rgb "#52be80" title "1F1B", \
     file using ($0 + 0.27):($4 / MB) with boxes lc rgb "#5d7fc0" title "interleaved, v = 2"
