# One bar per run, coloured and numbered by its final parameters' hash: runs
# with the same colour ended with the same parameters, byte for byte.
# Reads datadir/hashes.dat (index, hash id, run, hash).
file = datadir . "/hashes.dat"
stats file using 2 nooutput
n = STATS_max
set title "Lab 3: runs with the same colour ended with byte-identical parameters"
set ylabel "final parameters (one number per distinct hash)"
set yrange [0:n + 1.2]
set ytics 1
set xtics rotate by -35 left
set style fill solid 0.9 noborder
set boxwidth 0.7
set grid ytics
set bmargin 7
set rmargin 8
set key off
plot file using 1:2:2:xtic(3) with boxes lc variable, \
     file using 1:($2 + 0.12):(substr(strcol(4), 1, 8)) with labels rotate by 90 left font ",9"
