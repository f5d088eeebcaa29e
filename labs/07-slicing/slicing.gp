# Tensor and sequence parallelism: bytes per rank of the parameters (fp32),
# and of the activations without and with sequence parallelism, for t = 1,
# 2 and 4 (at t = 1 there is no sequence parallelism: the same bar twice).
# Reads datadir/slicing.dat (t params activations_tp activations_sp ...).
MB = 1e6
file = datadir . "/slicing.dat"
set title "Lab 7: bytes per rank against the tensor-parallel size (4-block GPT, micro-batch 8)"
set ylabel "MB per rank (1e6 bytes)"
set xlabel "tensor-parallel size t"
set yrange [0:*]
set xrange [-0.6:2.6]
set grid ytics
set key top right
set style fill solid 1.0 noborder
set boxwidth 0.25
plot file using ($0 - 0.27):($2 / MB) with boxes lc rgb "#a569bd" title "parameters", \
     file using ($0):($3 / MB):xtic(1) with boxes lc rgb "#f5b041" title "activations, TP", \
     file using ($0 + 0.27):($4 / MB) with boxes lc rgb "#52be80" title "activations, TP + SP"
