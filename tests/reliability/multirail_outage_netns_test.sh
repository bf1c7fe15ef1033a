#!/usr/bin/env bash
# A rail's outage on real links (issue 27): two network namespaces joined by 2 veth links shaped
# to 400mbit (scripts/netns-failover.sh), a verified fabric-net-perf bw run under the rdma
# protocol, the leader's link set down 3 s after the start and up again at 8 s. On tcp the plugin
# does not fail over yet (a write on a broken link neither completes nor fails while TCP
# retransmits: docs/failover.md), so the run stalls during the outage; what this asserts is that
# nothing is lost or stuck: the run finishes with every byte verified, data moves again within
# 5 s of the link's return, and both rails carry it afterwards (at least 1.6 times one rail).
# Before, such a run stopped with "no progress for 30 s". Needs root and `ip netns`; skips (77)
# without.
#
# Usage: multirail_outage_netns_test.sh NETNS_FAILOVER_SH FABRIC_NET_PERF
set -euo pipefail

FAILOVER="$1"
PERF="$2"
RATE=400mbit
DOWN=3
UP=8
ONE_RAIL_MBS=50  # 400mbit

# shellcheck source=netns_prerequisites.sh
source "$(dirname "$0")/netns_prerequisites.sh"
require_netns "$RATE"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

status=0
"$FAILOVER" --rails 2 --rate "$RATE" --rail 0 --down "$DOWN" --up "$UP" --seconds 8 -t "$PERF" \
  --out "$WORK/out" >"$WORK/report.txt" 2>&1 || status=$?
cat "$WORK/report.txt"
fail() {
  echo "FAIL: $*"
  exit 1
}
((status == 0)) || fail "the run ended with status $status"
grep -q '^# Data check: every message verified, no mismatch' "$WORK/report.txt" ||
  fail "the data check did not pass"
# When data moved again after the outage (the report's "stalled ... until data moved again at T
# s"; a run that never stalled is fine too).
resumed=$(sed -n 's/.*until data moved again at \([0-9.]*\) s.*/\1/p' "$WORK/report.txt")
if grep -q 'stalled from the outage to the end' "$WORK/report.txt"; then
  fail "no data moved after the outage began"
fi
if [[ -n "$resumed" ]]; then
  awk -v t="$resumed" -v up="$UP" 'BEGIN { exit !(t <= up + 5) }' ||
    fail "data moved again only at $resumed s, more than 5 s after the link came back at $UP s"
fi
after=$(sed -n 's/^ *after *\([0-9.]*\) MB\/s.*/\1/p' "$WORK/report.txt")
[[ -n "$after" ]] || fail "no bandwidth after the outage"
awk -v a="$after" -v one="$ONE_RAIL_MBS" 'BEGIN { exit !(a >= 1.6 * one) }' ||
  fail "after the outage $after MB/s, less than 1.6 times one rail ($ONE_RAIL_MBS MB/s)"
[[ -z "$(ip netns list | grep nnf || true)" ]] || fail "namespaces were left behind"
echo "PASS"
