# Test accuracy against how much smaller the linear weights are: the
# post-training quantization formats of the fp32-trained model, and Deep
# Compression at three sparsities after each of its stages (pruned, + shared
# weights, + Huffman). Reads datadir/formats.dat (format bytes ratio
# accuracy) and datadir/compress.dat (sparsity kept ratio/accuracy pairs per
# stage); acc0, the fp32 model's accuracy, comes from the caller.
f = datadir . "/formats.dat"
c = datadir . "/compress.dat"
set title "Lab 13: LeNet-300-100 on Fashion-MNIST, test accuracy against compression (linear weights)"
set xlabel "compression ratio of the linear weights (fp32 = 1)"
set ylabel "test accuracy (%)"
set logscale x 2
set xrange [0.8:64]
set grid
set key bottom left
plot f using 3:4 with points pt 7 ps 1.3 lc rgb "#1f77b4" title "quantized (PTQ): int8, int8-zp, nf4", \
     c using 3:4 with linespoints pt 4 lc rgb "#f39c12" title "pruned", \
     c using 5:6 with linespoints pt 6 lc rgb "#27ae60" title "+ shared weights (64 per layer)", \
     c using 7:8 with linespoints pt 5 lc rgb "#c0392b" title "+ fine-tuned, + Huffman coding", \
     acc0 with lines dt 2 lc "black" title "fp32", \
     acc0 - 0.5 with lines dt 3 lw 1.5 lc rgb "#808080" title "fp32 - 0.5 points"
