#!/usr/bin/env bash
# scripts/netns-perf.sh --link-event (issue 27): a verified bw run over 2 shaped veth rails sees
# rail 1 go down and come back up at the chosen seconds, says so, and prints the receiver's
# bandwidth over time (fabric-net-perf --timeline); a malformed event is refused. Today's plugin
# rides a short outage out on TCP's retransmissions, so the run finishes whole; the failover of
# issue 27 is tested with longer outages by scripts/netns-failover.sh. Root only (77 otherwise).
#   netns_link_events_test.sh NETNS_PERF_SH FABRIC_NET_PERF
set -euo pipefail
netns_perf=$1
perf=$2
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

status=0
"$netns_perf" --rails 2 --link-event 1:sideways:1 -t "$perf" -- bw >/dev/null 2>"$out/bad.err" ||
  status=$?
[[ $status -eq 2 ]] && grep -q "link-event '1:sideways:1'" "$out/bad.err" ||
  fail "a malformed event: status $status ($(cat "$out/bad.err"))"
"$netns_perf" --rails 2 --link-event 1:down:2 -t "$perf" -- bw >/dev/null 2>"$out/bad.err" ||
  status=$?
[[ $status -eq 2 ]] || fail "an event on rail 2 of 2: status $status"

NCCL_FABRIC_PROTOCOL=rdma "$netns_perf" --rails 2 -r 1gbit -t "$perf" \
  --link-event 1.5:down:1 --link-event 2:up:1 -- \
  bw -b 1M -e 1M -n 600 -w 0 --plugin-only --check --timeline 250 \
  >"$out/run.txt" 2>"$out/run.err" || fail "the run failed ($(tail -5 "$out/run.err"))"
grep -q 'no mismatch' "$out/run.txt" || fail "no data-check line"
grep -q 'netns-perf: t=1.5 s after start: rail1 down' "$out/run.err" || fail "no down line"
grep -q 'netns-perf: t=2 s after start: rail1 up' "$out/run.err" || fail "no up line"
received=$(awk -F, '$1 == "timeline" && $4 == "recv" { sum += $7 } END { print sum + 0 }' \
  "$out/run.err")
[[ "$received" -eq $((600 * 1048576)) ]] || fail "the timeline counts $received bytes received"
[[ -z "$(ip netns list | grep nnf || true)" ]] || fail "namespaces left behind"
echo "PASS: the events came at 1.5 s and 2 s, $received bytes verified and in the timeline"
