# Activation checkpointing: bytes of activations plus checkpoints (bars, left
# axis) and the median step time relative to no checkpointing (points, right
# axis), per setting. Reads datadir/checkpointing.dat.
MB = 1e6
file = datadir . "/checkpointing.dat"
stats file using (strcol(1) eq "off" ? $6 : 1/0) name "OFF" nooutput
set title "Lab 4: activation memory against step time (16-block GPT, one rank)"
set ylabel "activations + checkpoints (MB = 1e6 bytes)"
set y2label "step time / step time without checkpointing"
set yrange [0:*]
set y2range [0:*]
set ytics nomirror
set y2tics
set style fill solid 1.0 noborder
set boxwidth 0.6
set grid ytics
set key top center
plot file using 0:($4 / MB):xtic(1) with boxes lc rgb "#f5b041" title "activations", \
     file using 0:($3 / MB) with boxes lc rgb "#5d7fc0" title "checkpoints", \
     file using 0:($6 / OFF_min) axes x1y2 with linespoints pt 7 ps 1.5 lw 2 lc "black" title "step time (right axis)"
