#!/usr/bin/env bash
# Measures every row of the performance bar (docs/performance.md) RUNS times with
# fabric-net-perf, plugin beside raw libfabric in the same run, and prints the medians.
#   scripts/perf-bar.sh [RUNS]      (default 5; build first: scripts/bootstrap.sh build)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
perf=./build/tools/fabric-net-perf/fabric-net-perf
out=$(mktemp -d)
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}

rows=(
  "bw shm -b 1M -e 16M -f 4"
  "bw tcp -b 1M -e 16M -f 4"
  "lat shm -b 8 -e 8"
  "msgrate shm -b 8 -e 4K -f 8 --comms 1"
  "msgrate tcp -b 8 -e 4K -f 8 --comms 1"
  "alltoall shm -b 64K -e 1M -f 16 --ranks 4"
  "alltoall tcp -b 64K -e 1M -f 16 --ranks 4"
)
for ((run = 1; run <= runs; ++run)); do
  for index in "${!rows[@]}"; do
    read -r mode provider args <<<"${rows[$index]}"
    echo "run $run/$runs: $mode $provider $args" >&2
    # shellcheck disable=SC2086
    $perf "$mode" --provider "$provider" $args -q --csv "$out/$index.$run.csv" >/dev/null
  done
done

# Medians per (mode, provider, size) of the plugin and raw figures, and the ratio of medians.
# Bandwidth rows compare GB/s, msgrate rows Mmsg/s, lat rows the half round trip in µs.
printf '%-9s %-4s %9s %12s %12s %9s\n' mode prov bytes plugin raw ratio
cat "$out"/*.csv | grep -v '^mode,' | sort -t, -k1,1 -k2,2 -k3,3n | awk -F, '
  function median(list, n,    i, j, t, a) {
    n = split(list, a, " ")
    for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  {
    key = $1 " " $2 " " $3
    if (!(key in seen)) { order[++count] = key; seen[key] = 1 }
    if ($1 == "lat") { p = $7; r = $11 } else if ($1 == "msgrate") { p = $9; r = $13 } else { p = $8; r = $12 }
    plugin[key] = plugin[key] " " p; raw[key] = raw[key] " " r
  }
  END {
    for (i = 1; i <= count; ++i) {
      split(order[i], k, " ")
      mp = median(plugin[order[i]]); mr = median(raw[order[i]])
      if (k[1] == "lat") printf "%-9s %-4s %9d %10.3fus %10.3fus %+8.3fus\n", k[1], k[2], k[3], mp, mr, mp - mr
      else printf "%-9s %-4s %9d %12.3f %12.3f %8.1f%%\n", k[1], k[2], k[3], mp, mr, 100 * mp / mr
    }
  }'
rm -rf "$out"
