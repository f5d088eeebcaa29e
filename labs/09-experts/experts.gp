# The router's load: tokens routed to each expert and kept (the rest
# dropped, over the capacity), block 1 of a one-rank run's last
# micro-batch. Reads datadir/experts.dat (expert routed kept) and the
# capacity from the assignment cap.
file = datadir . "/experts.dat"
set title "Lab 9: tokens per expert (block 1, one micro-batch of 256 tokens, top-1)"
set ylabel "tokens"
set xlabel "expert"
set yrange [0:*]
set xrange [-0.6:3.6]
set grid ytics
set key top right
set style fill solid 1.0 noborder
set boxwidth 0.35
plot file using ($1 - 0.18):2:xtic(1) with boxes lc rgb "#f5b041" title "routed", \
     file using ($1 + 0.18):3 with boxes lc rgb "#52be80" title "kept", \
     cap with lines dt 2 lw 2 lc "red" title "capacity"
