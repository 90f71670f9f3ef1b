# Bar chart of the benchmark ratios (baseline time / handoff time), one bar per compared
# pair, log scale, with a line at 1.0: bars right of it are workloads where handoff is
# faster (green), bars left of it those where the baseline is faster (red).
#
#   gnuplot -e "datafile='ratios.tsv'; outfile='docs/benchmarks.png'" tools/plot.gp
#   gnuplot -e "datafile='km.tsv'; outfile='docs/benchmarks_keyed_mutex.png'; heading='keyed mutex'" tools/plot.gp
#
# datafile: written by `tools/bench_table.py --plot-data` (or --km-plot-data): an optional
# first line "# <subtitle>" (the machine), then one "label<TAB>ratio" line per pair.
# heading (optional): a prefix for the title. tools/bench.sh runs both, once per plot.
# Needs gnuplot with the pngcairo terminal (Debian gnuplot-nox).
if (!exists("datafile")) datafile = "ratios.tsv"
if (!exists("outfile")) outfile = "benchmarks.png"
if (!exists("heading")) heading = ""

set datafile separator "\t"
set datafile commentschars "#"
stats datafile using 2 nooutput
n = STATS_records
lo = (STATS_min < 0.5 ? STATS_min : 0.5) / 1.6
hi = (STATS_max > 2.0 ? STATS_max : 2.0) * 2.0
subtitle = system(sprintf("sed -n '1s/^# //p' '%s'", datafile))

set terminal pngcairo size 1100, (n * 24 + 170) font "sans,10" noenhanced
set output outfile

set title sprintf("%sbaseline time / handoff time (log scale; > 1: handoff faster)\n%s", \
                 heading eq "" ? "" : heading . ": ", subtitle)
set logscale x 10
set xrange [lo:hi]
set format x "%gx"
set xtics (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)
set mxtics 10
set grid xtics
set yrange [n - 0.4 : -0.6]
set ytics scale 0 nomirror
set border 3
set tics nomirror
set style fill solid 0.85 noborder
set arrow 1 from 1, graph 0 to 1, graph 1 nohead lw 2 lc rgb "black" dt 2
unset key

green = 0x2ca02c
red = 0xd62728
left(r) = r >= 1 ? 1 : r
right(r) = r >= 1 ? r : 1

plot datafile using (sqrt($2)):0:(left($2)):(right($2)):($0 - 0.36):($0 + 0.36):($2 >= 1 ? green : red):ytic(1) \
       with boxxyerror lc rgb variable, \
     '' using (right($2)):0:(sprintf("%.2f", $2)) with labels left offset 0.6, 0
