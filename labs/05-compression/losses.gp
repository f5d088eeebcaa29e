# Loss per step of the compressed runs beside dense training, one panel per
# method, with and without error feedback. Reads datadir/losses.dat
# (columns: step dense topk topk_noef int8 int8_noef sign sign_noef) and
# the loss floor (floor, set by the caller; 0 or unset: none, as with
# --data, whose text has no known floor).
file = datadir . "/losses.dat"
if (!exists("floor")) floor = 0
set multiplot layout 1,3 title "Lab 5: loss per step, ZeRO stage 2 on 4 ranks (GPT, 0.1 M parameters)"
set xlabel "step"
set yrange [1:4.5]
set grid
set key top right
set xtics 50
array T[3] = ["top-k 1%", "int8", "sign"]
do for [m=1:3] {
    set title T[m]
    if (m == 1) { set ylabel "loss"; set key top right } else { unset ylabel; unset key }
    plot file using 1:2 with lines lw 1 lc rgb "#909090" title "dense", \
         file using 1:(column(2 * m + 1)) with lines lw 1.5 lc rgb "#1f77b4" title "error feedback", \
         file using 1:(column(2 * m + 2)) with lines lw 1.5 lc rgb "#d62728" title "no error feedback", \
         (floor > 0 ? floor : NaN) with lines dt 2 lc "black" title (floor > 0 ? "loss floor" : "")
}
unset multiplot
