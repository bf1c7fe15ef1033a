#!/usr/bin/env bash
# Multi-rail proof on real links: two network namespaces joined by N veth links, each shaped to
# RATE (scripts/netns-perf.sh --rails N), fabric-net-perf bw under the rdma protocol over 1 rail
# and then over 2 rails grouped into one device (NCCL_FABRIC_RAILS). Two rails must move at
# least 1.8 times the bytes per second of one: a device that writes on its leader rail only
# stays at 1x, however many links it was given. Needs root and `ip netns`; skips (77) without.
#
# Usage: multirail_netns_test.sh NETNS_PERF_SH FABRIC_NET_PERF [RATE]   (RATE default 400mbit)
set -euo pipefail

NETNS_PERF="$1"
PERF="$2"
RATE="${3:-400mbit}"
MIN_RATIO=1.8
SIZE=4M
ITERATIONS=24  # about 2 s of data on one 400mbit rail

# shellcheck source=netns_prerequisites.sh
source "$(dirname "$0")/netns_prerequisites.sh"
require_netns "$RATE"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Runs bw over `rails` links; prints netns-perf's table and per-rail byte counts; leaves the CSV.
run() {
  local rails="$1"
  NCCL_FABRIC_PROTOCOL=rdma "$NETNS_PERF" --rails "$rails" -r "$RATE" -t "$PERF" -- \
    bw -b "$SIZE" -e "$SIZE" -n "$ITERATIONS" -w 4 --plugin-only --check \
    --csv "$WORK/rails$rails.csv" >"$WORK/rails$rails.txt" 2>&1 || {
    cat "$WORK/rails$rails.txt"
    echo "FAIL: fabric-net-perf over $rails rail(s) failed"
    exit 1
  }
  grep -E '^# (plugin|bytes sent per rail|Data check)' "$WORK/rails$rails.txt" |
    sed "s/^/  $rails rail(s): /"
  grep -q 'no mismatch' "$WORK/rails$rails.txt" || {
    echo "FAIL: data check failed over $rails rail(s)"
    exit 1
  }
}

# MB/s of the plugin from a CSV: bytes over microseconds per message.
rate_of() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
           { printf "%.1f\n", $col["bytes"] / $col["plugin_time_us"] }' "$1"
}

run 1
run 2
one=$(rate_of "$WORK/rails1.csv")
two=$(rate_of "$WORK/rails2.csv")
ratio=$(awk -v a="$one" -v b="$two" 'BEGIN { printf "%.2f", b / a }')
echo "bw $SIZE, rdma protocol, links shaped to $RATE: 1 rail $one MB/s, 2 rails $two MB/s" \
  "(${ratio}x; at least ${MIN_RATIO}x expected)"
awk -v r="$ratio" -v min="$MIN_RATIO" 'BEGIN { exit !(r >= min) }' || {
  echo "FAIL: 2 rails moved ${ratio}x the bytes of 1 rail"
  exit 1
}
[[ -z "$(ip netns list | grep nnf || true)" ]] || {
  echo "FAIL: netns-perf.sh left namespaces behind"
  exit 1
}
echo "PASS"
