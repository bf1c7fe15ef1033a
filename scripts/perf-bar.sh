#!/usr/bin/env bash
# Measures every row of the performance bar (issues 5, 11, 26 and 28, docs/performance.md) RUNS times
# with fabric-net-perf, plugin beside raw libfabric in the same run, and prints per row the
# medians of the plugin and raw figures, the median and spread of the per-run ratios, and the
# verdict.
#   scripts/perf-bar.sh [-k DIR] [-l N] [-r ROWS] [RUNS] [-- extra fabric-net-perf options]
#     RUNS    runs of every row (default 5)
#     -k DIR  keep every run's CSV in DIR (for plots or a second look)
#     -l N    N busy-looping processes beside every row's ranks (fabric-net-perf --load): the
#             small-message rows' bar is then 70 % of raw instead of 90 % (issue 28)
#     -r RE   only the rows whose line matches the extended regular expression RE
# Build first (scripts/bootstrap.sh build). Every run also verifies its data.
set -euo pipefail
cd "$(dirname "$0")/.."
keep=""
load=0
only=""
runs=5
extra=(--repeat 4 --time 50)  # best of 4 alternating rounds of 50 ms per point
while (($#)); do
  case "$1" in
    -k) keep=$2; shift 2 ;;
    -l) load=$2; shift 2 ;;
    -r) only=$2; shift 2 ;;
    --) shift; extra+=("$@"); break ;;
    *) runs=$1; shift ;;
  esac
done
perf=${NNF_PERF:-./build/tools/fabric-net-perf/fabric-net-perf}
out=${keep:-$(mktemp -d)}
mkdir -p "$out"
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}

# mode provider protocol options. The plugin's protocol is named on every row (auto would be
# rdma on both providers): sendrecv rows race raw tagged messages, rdma bandwidth rows raw
# receiver-driven RMA (--raw rma), and the rdma latency row raw tagged messages, as issue 11 asks.
# rma-OP rows run `fabric-net-perf rma OP` (the RMA plugin's table; the protocol is not used).
rows=(
  "bw shm sendrecv -b 1M -e 16M -f 4"
  "bw tcp sendrecv -b 1M -e 16M -f 4"
  "lat shm sendrecv -b 8 -e 8"
  "msgrate shm sendrecv -b 8 -e 4K -f 8 --comms 1"
  "msgrate tcp sendrecv -b 8 -e 4K -f 8 --comms 1"
  "alltoall shm sendrecv -b 64K -e 1M -f 16 --ranks 4"
  "alltoall tcp sendrecv -b 64K -e 1M -f 16 --ranks 4"
  "bw shm rdma --raw rma -b 4K -e 16M -f 16"
  "bw tcp rdma --raw rma -b 1M -e 16M -f 4"
  "lat shm rdma -b 8 -e 8"
  # Issue 28: 32 sends and 32 receives of 4 KiB in flight on one comm, in rounds ended by the
  # acknowledgement, the receiver posting ahead of, in step with or behind the sender; against
  # raw tagged messages, as the outside testers measured.
  "bw shm rdma --order ahead -b 4K -e 4K"
  "bw shm rdma --order step -b 4K -e 4K"
  "bw shm rdma --order behind -b 4K -e 4K"
  "bw tcp rdma --order ahead -b 4K -e 4K"
  "bw tcp rdma --order step -b 4K -e 4K"
  "bw tcp rdma --order behind -b 4K -e 4K"
  # Issue 26: the one-sided RMA table (ncclRmaPlugin) beside raw fi_write / fi_writedata /
  # fi_read: put and get bandwidth from 1 MiB, put-with-signal latency (bar: raw + 0.5 us).
  "rma-put shm rdma -b 1M -e 16M -f 4"
  "rma-put tcp rdma -b 1M -e 16M -f 4"
  "rma-get shm rdma -b 1M -e 16M -f 4"
  "rma-get tcp rdma -b 1M -e 16M -f 4"
  "rma-put-signal shm rdma -b 8 -e 8"
  "rma-put-signal tcp rdma -b 8 -e 8"
)
((load > 0)) && extra+=(--load "$load")
start=$SECONDS
for ((run = 1; run <= runs; ++run)); do
  for index in "${!rows[@]}"; do
    [[ -n "$only" && ! "${rows[$index]}" =~ $only ]] && continue
    read -r mode provider protocol args <<<"${rows[$index]}"
    echo "run $run/$runs: $mode $provider $protocol $args ${extra[*]}" >&2
    # The rows' label: the protocol, and the posting order where the row has one.
    label=$protocol
    [[ "$args" =~ --order\ ([a-z]+) ]] && label="$protocol/${BASH_REMATCH[1]}"
    # rma-OP: the tool's rma mode and operation; its CSV says "rma" for every operation, so the
    # row's own name replaces it there.
    command=("$mode")
    [[ $mode == rma-* ]] && command=(rma "${mode#rma-}")
    # shellcheck disable=SC2086
    NCCL_FABRIC_PROTOCOL=$protocol $perf "${command[@]}" --provider "$provider" $args \
      "${extra[@]}" -q --csv "$out/$index.$run.csv" >/dev/null
    [[ $mode == rma-* ]] && sed -i "s|^rma,|$mode,|" "$out/$index.$run.csv"
    # The label leads each line, so that rows of both protocols (and orders) stay apart.
    sed -i "s|^|$label,|" "$out/$index.$run.csv"
  done
done
echo "perf-bar: $runs runs in $((SECONDS - start)) s, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# Bandwidth rows compare GB/s, msgrate rows Mmsg/s, lat rows the median half round trip (µs).
# plugin, raw: medians over the runs. ratio: the median of the per-run ratios (each run pairs
# the two engines in the same processes, minutes apart from the other runs, so load that
# drifts between runs cancels); for lat the median of the per-run differences. spread: the
# lowest and highest per-run ratio. The bar is judged on that median.
printf '%-14s %-4s %-12s %9s %12s %12s %9s %15s  %s\n' mode prov protocol bytes plugin raw ratio spread bar
cat "$out"/*.csv | grep -v '^[a-z/]*,mode,' | sort -t, -k1,1 -k2,2 -k3,3 -k4,4n | awk -F, -v load="$load" '
  function median(list,    n, i, j, t, a) {
    n = split(list, a, " ")
    for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  {
    # $1 is the protocol; the CSV fields of fabric-net-perf follow, one column later.
    key = $2 " " $3 " " $1 " " $4
    if (!(key in seen)) { order[++count] = key; seen[key] = 1; lo[key] = 1e18; hi[key] = -1e18 }
    if ($2 == "lat" || $2 == "rma-put-signal") { p = $8; r = $12; x = p - r } else if ($2 == "msgrate") { p = $10; r = $14; x = 100 * p / r } else { p = $9; r = $13; x = 100 * p / r }
    plugin[key] = plugin[key] " " p; raw[key] = raw[key] " " r; ratios[key] = ratios[key] " " x
    if (x < lo[key]) lo[key] = x
    if (x > hi[key]) hi[key] = x
  }
  END {
    for (i = 1; i <= count; ++i) {
      key = order[i]; split(key, k, " ")
      mp = median(plugin[key]); mr = median(raw[key]); mx = median(ratios[key])
      if (k[1] == "lat" || k[1] == "rma-put-signal") {
        # Latency: +0.3 us over raw tagged for the net plugin (issue 11), +0.5 us over raw
        # fi_writedata for put-with-signal (issue 26).
        bound = k[1] == "lat" ? 0.3 : 0.5
        verdict = (mx <= bound) ? "met (<= +" bound "us)" : "NOT MET (<= +" bound "us)"
        printf "%-14s %-4s %-12s %9d %10.3fus %10.3fus %+8.3fus %+6.2f..%+6.2fus  %s\n", k[1], k[2], k[3], k[4], mp, mr, mx, lo[key], hi[key], verdict
      } else {
        # Bandwidth: 95 % from 1 MiB, 90 % below (the rdma rows at 4 and 64 KiB); msgrate 90 %;
        # the posting-order rows 90 %, 70 % beside busy loops (issue 28).
        need = ((k[1] == "bw" || k[1] ~ /^rma-/) && k[4] >= 1048576) ? 95 : 90
        if (k[3] ~ /\// && load > 0) need = 70
        verdict = (mx >= need) ? "met" : "NOT MET"
        printf "%-14s %-4s %-12s %9d %12.3f %12.3f %8.1f%% %6.1f..%5.1f%%  %s (>= %d%%)\n", k[1], k[2], k[3], k[4], mp, mr, mx, lo[key], hi[key], verdict, need
      }
    }
  }'
[[ -n "$keep" ]] || rm -rf "$out"
