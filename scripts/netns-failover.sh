#!/usr/bin/env bash
# Rail failover on real links: two network namespaces joined by RAILS veth links shaped to RATE
# (scripts/netns-perf.sh --rails), one long single-size fabric-net-perf bw run through the plugin
# with every byte verified (--check), one rail taken down DOWN seconds after the start and up
# again at UP (--link-event), and the receiver's bandwidth over time (--timeline). Prints the
# run's outcome and the mean bandwidth before, during and after the outage. Needs root; every
# namespace it makes is removed on exit (netns-perf.sh's trap).
#
# Usage: sudo scripts/netns-failover.sh [options] [-- extra fabric-net-perf options]
#   --rails N      veth links (default 4)
#   --rate RATE    tbf rate of each link (default 400mbit)
#   --rail R       the rail taken down (default 1; 0 is the leader)
#   --down T       seconds after the start (default 5)
#   --up T         seconds after the start (default 12; "never": stays down)
#   --seconds S    about how long the run moves data with every rail up (default 20)
#   --size SIZE    message size (default 4M)
#   --period MS    timeline interval (default 500)
#   -t PERF        fabric-net-perf binary (default: the first build*/ one)
#   --out DIR      keep the output there (default: a temporary directory, removed)
# Environment: NCCL_FABRIC_PROTOCOL (default rdma here), any NCCL_FABRIC_* for the plugin.
# Exit status: that of the run (0: it finished with every byte verified).
set -euo pipefail

RAILS=4 RATE=400mbit RAIL=1 DOWN=5 UP=12 SECONDS_WANTED=20 SIZE=4M PERIOD=500 PERF="" OUT=""
while (($#)); do
  case "$1" in
    --rails) RAILS="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --rail) RAIL="$2"; shift 2 ;;
    --down) DOWN="$2"; shift 2 ;;
    --up) UP="$2"; shift 2 ;;
    --seconds) SECONDS_WANTED="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --period) PERIOD="$2"; shift 2 ;;
    -t) PERF="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    --) shift; break ;;
    *) echo "netns-failover: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [[ -z "$PERF" ]]; then
  for candidate in "$ROOT"/build*/tools/fabric-net-perf/fabric-net-perf; do
    [[ -x "$candidate" ]] && PERF="$candidate" && break
  done
fi
[[ -x "$PERF" ]] || { echo "netns-failover: fabric-net-perf not found; pass -t" >&2; exit 1; }
if [[ -z "$OUT" ]]; then
  OUT=$(mktemp -d)
  trap 'rm -rf "$OUT"' EXIT
else
  mkdir -p "$OUT"
fi

# Messages for about SECONDS_WANTED s with every rail up: RAILS x RATE, in bytes a second.
bytes_of() {  # 4M -> 4194304
  awk -v s="$1" 'BEGIN { n = s + 0; u = toupper(substr(s, length(s)));
    if (u == "K") n *= 1024; else if (u == "M") n *= 1048576; else if (u == "G") n *= 1073741824;
    printf "%d", n }'
}
rate_bytes() {  # 400mbit -> 50000000
  awk -v r="$1" 'BEGIN { n = r + 0; s = tolower(r);
    if (s ~ /gbit$/) n *= 1e9; else if (s ~ /mbit$/) n *= 1e6; else if (s ~ /kbit$/) n *= 1e3;
    printf "%d", n / 8 }'
}
size_bytes=$(bytes_of "$SIZE")
per_second=$(($(rate_bytes "$RATE") * RAILS))
count=$((per_second * SECONDS_WANTED / size_bytes))
((count >= 10)) || count=10

events=(--link-event "$DOWN:down:$RAIL")
[[ "$UP" == never ]] || events+=(--link-event "$UP:up:$RAIL")
echo "netns-failover: $RAILS rails at $RATE, bw $SIZE x $count (about ${SECONDS_WANTED} s)," \
  "rail$RAIL down at ${DOWN} s, up at ${UP}$([[ $UP == never ]] || echo " s")" >&2
start=$(date +%s.%N)
status=0
NCCL_FABRIC_PROTOCOL="${NCCL_FABRIC_PROTOCOL:-rdma}" "$ROOT/scripts/netns-perf.sh" \
  --rails "$RAILS" -r "$RATE" -t "$PERF" "${events[@]}" -- \
  bw -b "$SIZE" -e "$SIZE" -n "$count" -w 0 --plugin-only --check --timeline "$PERIOD" "$@" \
  >"$OUT/run.txt" 2>"$OUT/run.err" || status=$?
end=$(date +%s.%N)
grep '^timeline,' "$OUT/run.err" >"$OUT/timeline.csv" || true

echo "== run: exit status $status after $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s"
grep -E '^# (Data check|bytes sent per rail)' "$OUT/run.txt" || true
grep -vE '^(timeline,|netns-perf: (environment|[0-9]+ pair))' "$OUT/run.err" | tail -n 20 || true
# The receiving rank's plugin bandwidth per phase, over the intervals wholly inside it: from the
# first interval that moved data (set-up excluded), and SETTLE s after each link event. Then
# when data moved again after the outage began (0 MB/s intervals before it: the stall).
SETTLE=1
echo "== receiver's bandwidth (plugin, MB/s; one rail at $RATE is $(rate_bytes "$RATE" | awk '{ printf "%.1f", $1 / 1e6 }') MB/s)"
awk -F, -v down="$DOWN" -v up="$UP" -v settle="$SETTLE" '
  $1 == "timeline" && $4 == "recv" {
    end = $5; span = $6; bytes = $7; start = end - span
    if (!started && bytes == 0) next
    started = 1
    phase = ""
    if (end <= down) phase = "before"
    else if (start >= down + settle && (up == "never" || end <= up)) phase = "during"
    else if (up != "never" && start >= up + settle) phase = "after"
    if (phase != "") { sum[phase] += bytes; time[phase] += span }
    if (end > down && bytes == 0 && !resumed) stalled = 1
    if (stalled && bytes > 0 && !resumed) resumed = end
    last = end
  }
  END {
    n = split("before during after", order, " ")
    for (i = 1; i <= n; ++i) {
      p = order[i]
      if (time[p] > 0) printf "  %-7s %8.1f MB/s over %5.1f s\n", p, sum[p] / time[p] / 1e6, time[p]
      else printf "  %-7s (no interval)\n", p
    }
    if (stalled) {
      if (resumed) printf "  stalled from the outage until data moved again at %.1f s\n", resumed
      else printf "  stalled from the outage to the end\n"
    }
    printf "  last interval ended at %.1f s\n", last
  }' "$OUT/timeline.csv"
echo "== timeline (receiver): $OUT/timeline.csv"
awk -F, '$1 == "timeline" && $4 == "recv" { printf "  t=%6.2f s %8.1f MB/s\n", $5, $8 * 1000 }' \
  "$OUT/timeline.csv" | awk 'NR % 2 == 1'
exit "$status"
