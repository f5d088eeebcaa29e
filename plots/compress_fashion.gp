# Deep Compression of LeNet-300-100 on Fashion-MNIST: test accuracy against
# the compression ratio of the linear weights, one curve per stage (pruning
# with relative indices; + weight sharing with fine-tuned centroids; +
# Huffman coding), one point per sparsity; the uncompressed model's
# accuracy and the 0.5-point band below it as lines.
# Usage: gnuplot plots/compress_fashion.gp (or -e "datafile='rows.dat'; outfile='x.png'")
# (rows.dat: bench/bench_compress_fashion.sh's output)
if (!exists("datafile")) datafile = "docs/compress_fashion.dat"
if (!exists("outfile")) outfile = "docs/compress_fashion.png"
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,600 font "Sans,11" noenhanced
} else {
    set terminal png size 900,600 noenhanced
}
set output outfile
stats datafile using 3 nooutput
base = STATS_mean
set title "LeNet-300-100 on Fashion-MNIST: Deep Compression's stages"
set xlabel "compression ratio of the linear weights (x, log scale)"
set ylabel "test accuracy (%)"
set logscale x
set xrange [1:100]
set grid
set key bottom left
plot base with lines dashtype 2 lc rgb "black" title sprintf("uncompressed (%.2f%%)", base), \
     base - 0.5 with lines dashtype 3 lc rgb "gray40" title "0.5 points below", \
     datafile using 4:5 with linespoints pt 7 lc rgb "#1f77b4" title "pruning (+ relative indices)", \
     datafile using 6:7 with linespoints pt 5 lc rgb "#ff7f0e" title "+ weight sharing (fine-tuned)", \
     datafile using 8:9 with linespoints pt 9 lc rgb "#2ca02c" title "+ Huffman coding"
