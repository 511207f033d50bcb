# Samples/s per batch for every scenario of the two-region experiment, on one chart.
#
#   gnuplot -e "csvs='colocated.csv remote-nospoke.csv spoke-cold.csv'" \
#           -e "titles='co-located remote-no-spoke Spoke-cold'" \
#           -e "out='samples-per-s.png'; ideal=118.5" bench/two-region/plot.gp
#
# csvs:   spoke-loader --csv files (space separated). Required.
# titles: one word per csv (use '-' or '_' inside a title, not spaces); default: file names.
# out:    PNG to write; default samples-per-s.png.
# ideal:  samples/s of a never-stalled loader (batch x accelerators / compute s); drawn as a
#         dashed line when given. 95 % of it is drawn too (the warm-up threshold).
# window: the moving window the loader used (--window, default 10), for the axis label only.
#
# The y value is the loader's window_samples_per_s column (samples in the last `window`
# batches over the time they took to complete); x is the batch number over the whole run.

if (!exists("csvs")) { print "set csvs='a.csv b.csv ...' with -e"; exit status 2 }
if (!exists("titles")) { titles = "" }
if (!exists("out")) { out = "samples-per-s.png" }
if (!exists("window")) { window = 10 }

# pngcairo when this gnuplot has it (gnuplot-nox on Debian does), else libgd png.
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
  set terminal pngcairo size 1400,700 enhanced font "sans,11"
} else {
  set terminal png size 1400,700
}
set output out

set datafile separator ","
set title "Data-loader throughput per batch (moving window of ".window." batches)"
set xlabel "batch (whole run)"
set ylabel "samples/s"
set grid
set key outside right top
set yrange [0:*]

title_of(i) = (words(titles) >= i) ? word(titles, i) : word(csvs, i)

if (exists("ideal")) {
  plot for [i=1:words(csvs)] word(csvs, i) skip 1 using 1:13 with lines lw 2 title title_of(i), \
       ideal with lines dt 2 lc rgb "black" title sprintf("never stalled (%.1f)", ideal), \
       0.95 * ideal with lines dt 3 lc rgb "gray40" title "95 %"
} else {
  plot for [i=1:words(csvs)] word(csvs, i) skip 1 using 1:13 with lines lw 2 title title_of(i)
}
