#!/usr/bin/env bash
# Full sweeps of every fabric-net-perf mode on shm and tcp, plugin beside raw libfabric: writes
# one CSV and one plot per mode and provider into OUT, and OUT/tables.md with a markdown table
# per sweep (the tables and plots of docs/performance.md come from here).
#   scripts/perf-report.sh [OUT] [-- extra fabric-net-perf options]   (default OUT: perf-report)
# Build first (scripts/bootstrap.sh build); the plots need gnuplot (gnuplot-nox).
set -euo pipefail
cd "$(dirname "$0")/.."
out=perf-report
if (($#)) && [[ $1 != -- ]]; then out=$1; shift; fi
[[ ${1:-} == -- ]] && shift
extra=(--repeat 3 "$@")
perf=./build/tools/fabric-net-perf/fabric-net-perf
mkdir -p "$out"
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
tables=$out/tables.md
: >"$tables"

# One markdown table from a fabric-net-perf CSV (columns: see the CSV header).
to_markdown() {
  awk -F, '
    function size(b) {
      if (b >= 1048576 && b % 1048576 == 0) return b / 1048576 " MiB"
      if (b >= 1024 && b % 1024 == 0) return b / 1024 " KiB"
      return b " B"
    }
    NR == 1 { next }
    {
      mode = $1
      if (!printed) {
        if (mode == "lat") {
          print "| size | plugin median (µs) | plugin p99 (µs) | raw median (µs) | raw p99 (µs) | delta (µs) | ratio |"
          print "|---:|---:|---:|---:|---:|---:|---:|"
        } else if (mode == "msgrate") {
          print "| size | comms | plugin (Mmsg/s) | raw (Mmsg/s) | ratio |"
          print "|---:|---:|---:|---:|---:|"
        } else {
          t = mode == "alltoall" ? "step" : "message"
          print "| size | plugin time/" t " (µs) | plugin GB/s | raw time/" t " (µs) | raw GB/s | ratio |"
          print "|---:|---:|---:|---:|---:|---:|"
        }
        printed = 1
      }
      if (mode == "lat")
        printf "| %s | %.2f | %.2f | %.2f | %.2f | %+.2f | %.0f %% |\n", size($3), $7, $10, $11, $14, $7 - $11, $15
      else if (mode == "msgrate")
        printf "| %s | %d | %.3f | %.3f | %.0f %% |\n", size($3), $4, $9, $13, $15
      else
        printf "| %s | %.2f | %.3f | %.2f | %.3f | %.0f %% |\n", size($3), $7, $8, $11, $12, $15
    }' "$1"
}

start=$SECONDS
for provider in shm tcp; do
  for mode in bw bibw lat msgrate alltoall; do
    echo "perf-report: $mode $provider" >&2
    "$perf" "$mode" --provider "$provider" "${extra[@]}" -q \
      --csv "$out/$mode-$provider.csv" --plot "$out/$mode-$provider.png" >"$out/$mode-$provider.txt"
    {
      echo "#### $mode, $provider"
      echo
      echo "\`fabric-net-perf $mode --provider $provider ${extra[*]}\`"
      echo
      to_markdown "$out/$mode-$provider.csv"
      echo
    } >>"$tables"
  done
done
echo "perf-report: done in $((SECONDS - start)) s, load average $(cut -d' ' -f1-3 /proc/loadavg); $tables" >&2
