# Bytes across node 0's link per step, as a fraction of plain stage 3's,
# for each run on 2 nodes of 2 (bars), beside ZeRO++'s published fractions
# (3M, 2.5M, 2M, 2.25M, 0.75M of 3M: points). Reads datadir/links.dat
# (config node0_bytes of_M of_stage3 paper_of_stage3 planned_step_s).
file = datadir . "/links.dat"
set title "Lab 11: bytes across a node's link per step (default GPT, bf16, stage 3, 2 nodes x 2)"
set ylabel "fraction of plain stage 3's bytes"
set xlabel "run"
set yrange [0:1.15]
set xrange [-0.6:5.6]
set grid ytics
set key top right
set style fill solid 1.0 noborder
set boxwidth 0.5
plot file using 0:4:xtic(1) with boxes lc rgb "#85c1e9" title "measured (the ledger)", \
     file using 0:5 with points pt 7 ps 1.6 lc "red" title "ZeRO++ paper (of 3M)"
