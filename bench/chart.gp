# gnuplot -e "datafile='chart.dat'; outfile='chart.png'" chart.gp
set terminal pngcairo size 1400,650 font "DejaVu Sans,10"
set output outfile
set title "rwlock: µs per operation (lower is better), next to its baseline from the same run"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y 10
set yrange [0.5:*]
set ylabel "µs per operation (log scale)"
set grid ytics
set key top left
set xtics nomirror font ",9"
set bmargin 5
stats datafile using 2 nooutput
set xrange [-0.6:STATS_records-0.4]
plot datafile using 2:xtic(1) title "rwlock" linecolor rgb "#c0392b", \
     '' using 3 title "baseline" linecolor rgb "#7f8c8d", \
     '' using ($0-0.22):2:($2 >= 100 ? sprintf("%.0f", $2) : sprintf("%.3g", $2)) with labels offset 0,0.6 font ",8" notitle, \
     '' using ($0+0.22):3:($3 >= 100 ? sprintf("%.0f", $3) : sprintf("%.3g", $3)) with labels offset 0,0.6 font ",8" notitle
