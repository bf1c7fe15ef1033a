#!/usr/bin/env bash
# fabric-net-perf comms, small: 200 comms open at once on one provider, every message checked,
# the table, CSV and JSON with one row per side, no file descriptor per comm, and the refusals
# of options the mode does not take.
#   perf_comms_test.sh PERF_BINARY PROVIDER
set -euo pipefail
perf=$1
provider=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export FI_TCP_IFACE=lo
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

"$perf" comms --comms 200 -b 100 --provider "$provider" -q --csv "$out/comms.csv" \
  --json "$out/comms.json" >"$out/comms.txt" 2>"$out/comms.err" ||
  fail "exit status $? ($(tail -3 "$out/comms.err"))"
cat "$out/comms.txt"
grep -q '^# Data check: every byte of every message verified, no mismatch$' "$out/comms.txt" ||
  fail "no data-check line"
[[ $(grep -cE '^ +(receiver|sender) +200 +100 ' "$out/comms.txt") -eq 2 ]] ||
  fail "expected a receiver and a sender row with 200 comms of 100 bytes"
[[ $(grep -c '"side": ' "$out/comms.json") -eq 2 ]] || fail "JSON: expected two sides"
# Per side: the three times positive, and the comms hold no file descriptor each.
awk -F, 'NR == 1 { next }
  { rows++ }
  !($2 == p && $5 == 200 && $6 == 100 && $7 > 0 && $8 > 0 && $9 > 0) {
    print "FAIL: CSV row: " $0 > "/dev/stderr"; bad = 1 }
  $14 - $13 > 8 || $15 - $13 > 8 {
    print "FAIL: file descriptors grow with the comms: " $0 > "/dev/stderr"; bad = 1 }
  END { if (rows != 2) { print "FAIL: " rows " CSV rows" > "/dev/stderr"; bad = 1 }; exit bad }' \
  p="$provider" "$out/comms.csv" || exit 1
echo "ok: comms"

for args in "comms -n 200" "comms --raw-only" "comms -b 64 -e 128" "comms --comms 0" "comms --plot x.png"; do
  status=0
  # shellcheck disable=SC2086
  "$perf" $args >/dev/null 2>"$out/bad.err" || status=$?
  [[ $status -eq 2 && -s "$out/bad.err" ]] || fail "'$args': status $status, expected 2 and a message"
done
echo "ok: refusals"
