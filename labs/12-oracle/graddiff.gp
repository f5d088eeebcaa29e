# The largest difference between zerosim's gradient and PyTorch's, tensor by
# tensor, at step 1: the GPT as written, with LayerNorm's eps 1e-3, and
# without the attention's 1/sqrt(head size). Reads datadir/graddiff.dat
# (columns: index tensor none ln-eps no-scale).
file = datadir . "/graddiff.dat"
set title "Lab 12: max |zerosim - PyTorch| per gradient, step 1 (GPT, 2 blocks, hidden 32)"
set ylabel "largest absolute difference"
set logscale y
set format y "%.0e"
set yrange [1e-11:100]
set grid ytics
set key top center horizontal
set xtics rotate by -60 font ",8"
set bmargin 8
plot file using 1:3:xtic(2) with linespoints pt 7 ps 0.8 lc rgb "#2e8b57" title "as written", \
     file using 1:4 with linespoints pt 5 ps 0.8 lc rgb "#d62728" title "LayerNorm eps 1e-3", \
     file using 1:5 with linespoints pt 9 ps 0.8 lc rgb "#1f77b4" title "no attention scale", \
     1e-7 with lines dt 2 lc "black" title "atol 1e-7"
