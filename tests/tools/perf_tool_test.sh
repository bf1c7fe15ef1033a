#!/usr/bin/env bash
# fabric-net-perf end to end on one provider: every mode through the plugin and raw libfabric
# with every byte checked (--check), the CSV / JSON / plot outputs, the two-host mode over
# loopback, and the refusals of a bad command line or a missing plugin.
#   perf_tool_test.sh PERF_BINARY PROVIDER
set -euo pipefail
perf=$1
provider=$2
out=$(mktemp -d)
listener=""
cleanup() {
  [[ -n "$listener" ]] && kill "$listener" 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT
export FI_TCP_IFACE=lo
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Runs one mode; checks the exit status, the data-check line, and that the table, the CSV and
# the JSON carry the same number of measured rows, each with plugin, raw and ratio filled.
check_mode() {
  local name=$1
  shift
  "$perf" "$@" --provider "$provider" -q --check --csv "$out/$name.csv" --json "$out/$name.json" \
    >"$out/$name.txt" 2>"$out/$name.err" || fail "$name: exit status $? ($(tail -3 "$out/$name.err"))"
  grep -q '^# Data check: every message verified, no mismatch$' "$out/$name.txt" ||
    fail "$name: no data-check line"
  local table csv json
  table=$(grep -cv '^#' "$out/$name.txt")
  csv=$(grep -c "^[a-z]*,$provider," "$out/$name.csv")
  json=$(grep -c '"bytes": ' "$out/$name.json")
  [[ "$table" -ge "${MIN_ROWS:-1}" ]] || fail "$name: $table table rows, expected at least ${MIN_ROWS:-1}"
  [[ "$csv" -eq "$table" && "$json" -eq "$table" ]] ||
    fail "$name: table $table rows, CSV $csv, JSON $json"
  # Every CSV row has a positive plugin time, a positive raw time and a ratio.
  awk -F, -v name="$name" 'NR > 1 && !($7 > 0 && $11 > 0 && $15 > 0) {
      print "FAIL: " name ": incomplete CSV row: " $0 > "/dev/stderr"; bad = 1 }
    END { exit bad }' "$out/$name.csv" || exit 1
  echo "ok: $name ($table rows)"
}

MIN_ROWS=12 check_mode bw bw -b 0 -e 1M -n 20         # 0, 1, 4, ..., 1M: zero bytes included
MIN_ROWS=4 check_mode bibw bibw -b 4K -e 1M -f 4 -n 20
MIN_ROWS=4 check_mode lat lat -b 8 -e 4K -f 8 -n 100
MIN_ROWS=6 check_mode msgrate msgrate -b 8 -e 4K -f 8 --comms 2 -n 300 --repeat 2
MIN_ROWS=3 check_mode alltoall alltoall -b 1K -e 64K -f 8 --ranks 3 -n 5
# The rma mode (issue 26): put-with-signal latency between 2 ranks (the target waits on its
# signal), gets all-to-all among 3, the plugin's RMA table beside raw libfabric RMA.
MIN_ROWS=3 check_mode rma-put-signal rma put-signal -b 8 -e 4K -f 64 -n 100
MIN_ROWS=2 check_mode rma-get rma get -b 4K -e 256K -f 64 -n 50 --ranks 3
grep -q '^# fabric-net-perf rma put-signal, provider .*, full check$' "$out/rma-put-signal.txt" ||
  fail "rma put-signal: no title line"
grep -q '^# plugin: .* ncclRmaPlugin_v15, ' "$out/rma-get.txt" || fail "rma get: not the v15 table"
grep -q '^# rma get: 3 ranks, all-to-all' "$out/rma-get.txt" || fail "rma get: no all-to-all line"

# The posting orders of issue 28 (rounds of a window, each ended by the acknowledgement), every
# byte checked, with busy loops beside the ranks; the table says both, and the busy loops end
# with the run (none of this run's children is left spinning).
for order in ahead step behind; do
  MIN_ROWS=2 check_mode "order-$order" bw -b 4K -e 8K -n 100 --order "$order" --load 1
  grep -q "^# order: $order (rounds of 32 messages a comm" "$out/order-$order.txt" ||
    fail "order $order: no order line"
  grep -q '^# load: 1 busy-looping process beside the ranks$' "$out/order-$order.txt" ||
    fail "order $order: no load line"
done
MIN_ROWS=2 check_mode order-msgrate msgrate -b 64 -e 64 --comms 2 -n 200 --order behind
# The busy loops end with the tool: run it as a session of its own, then look for its members.
setsid "$perf" bw --provider "$provider" -q -b 4K -e 4K -n 50 --order step --load 2 >/dev/null \
  2>"$out/load.err" &
session=$!
wait "$session" || fail "--load 2: exit status $? ($(tail -3 "$out/load.err"))"
sleep 0.5
left=$({ ps -o pid= -s "$session" || true; } | wc -l)
[[ "$left" -eq 0 ]] || fail "--load: $left processes of the run still there after it ended"
echo "ok: --order, --load"

# --phases: per measured point, each rank of each engine says how long a round spent moving its
# messages and in the acknowledgement; both are positive, and the rounds of a rank's line are
# those of the point (100 messages in rounds of 32: 4 rounds, the last one short).
"$perf" bw --provider "$provider" -q --check -b 4K -e 4K -n 100 -w 0 --order ahead --phases \
  >"$out/phases.txt" 2>"$out/phases.err" || fail "--phases: exit status $?"
grep -q '^phases,engine,rank,dir,bytes,rounds,stream_us,ack_us$' "$out/phases.err" ||
  fail "--phases: no header line"
for side in "plugin,0,send" "plugin,1,recv" "raw,0,send" "raw,1,recv"; do
  awk -F, -v side="$side" '
    $1 == "phases" && ($2 "," $3 "," $4) == side {
      ++lines
      if ($5 != 4096 || $6 != 4 || $7 + 0 <= 0 || $8 + 0 <= 0) { print "FAIL: --phases: " $0; bad = 1 }
    }
    END {
      if (lines != 1) { print "FAIL: --phases " side ": " lines " lines, expected 1"; bad = 1 }
      exit bad
    }' "$out/phases.err" || exit 1
done
echo "ok: --phases"

# Without -n the count comes from the warm-up (--time); both ranks must agree on it or the
# run hangs, and the measured count is at least the fixed minimum.
"$perf" msgrate --provider "$provider" -q -b 64 -e 64 --comms 1 --time 20 --csv "$out/timed.csv" \
  >/dev/null || fail "timed msgrate: exit status $?"
count=$(awk -F, 'NR == 2 { print $5 }' "$out/timed.csv")
[[ "$count" -ge 64 ]] || fail "timed msgrate: count $count"
echo "ok: --time (count $count)"

if command -v gnuplot >/dev/null; then
  "$perf" bw --provider "$provider" -q -b 1K -e 64K -n 20 --plot "$out/bw.png" >/dev/null ||
    fail "plot: exit status $?"
  [[ "$(head -c 4 "$out/bw.png" | od -An -c | tr -d ' ')" == '211PNG' ]] || fail "plot: not a PNG"
  [[ ! -e "$out/bw.png.gp" && ! -e "$out/bw.png.dat" ]] || fail "plot: left its scratch files"
  echo "ok: --plot"
else
  echo "skip: --plot (gnuplot not installed)"
fi

# --timeline (issue 27): a long single-size run prints, per interval, the bytes each rank's
# messages moved. The receiver's intervals, in time order, add up to every byte it received
# (warm-up included), and the sender's to every byte it sent.
"$perf" bw --provider "$provider" -q --check -b 64K -e 64K -n 400 -w 0 --plugin-only \
  --timeline 20 >"$out/timeline.txt" 2>"$out/timeline.err" || fail "--timeline: exit status $?"
grep -q 'no mismatch' "$out/timeline.txt" || fail "--timeline: no data-check line"
grep -q '^timeline,engine,rank,dir,t_s,interval_s,bytes,gbps$' "$out/timeline.err" ||
  fail "--timeline: no header line"
for side in "0,send" "1,recv"; do
  awk -F, -v side="$side" -v want=$((400 * 65536)) '
    $1 == "timeline" && $2 == "plugin" && ($3 "," $4) == side {
      if ($5 + 0 < last) { print "FAIL: --timeline " side ": time goes back at " $5; bad = 1 }
      last = $5 + 0; sum += $7; ++lines
    }
    END {
      if (lines < 1 || sum != want) {
        print "FAIL: --timeline " side ": " lines " lines, " sum " bytes, expected " want; bad = 1
      }
      exit bad
    }' "$out/timeline.err" || exit 1
done
echo "ok: --timeline"

# Two hosts, here both on loopback: the listening side prints the table.
port=$((20000 + RANDOM % 20000))
"$perf" bw --listen "$port" --provider "$provider" -q --check -b 4K -e 64K -n 20 \
  >"$out/listen.txt" 2>"$out/listen.err" &
listener=$!
# The connecting side retries while the listener comes up.
connect_status=0
"$perf" bw --connect "127.0.0.1:$port" --provider "$provider" -q --check -b 4K -e 64K -n 20 \
  >"$out/connect.txt" 2>"$out/connect.err" || connect_status=$?
wait "$listener" || fail "two hosts: the listening side failed ($(tail -3 "$out/listen.err"))"
listener=""
[[ $connect_status -eq 0 ]] || fail "two hosts: the connecting side failed ($(tail -3 "$out/connect.err"))"
[[ "$(grep -cv '^#' "$out/listen.txt")" -eq 3 ]] || fail "two hosts: expected 3 rows"
grep -q 'no mismatch' "$out/listen.txt" || fail "two hosts: no data-check line"
echo "ok: --listen / --connect"

# Refusals: a bad command line exits 2 with a message; a plugin that cannot load fails the run.
for args in "bw -f 1" "bw --window 33" "nosuchmode" "bw -b 2M -e 1M" "bw --listen 1 --connect h:2" \
  "lat --order ahead" "bw --order sideways" "bw --load 65" "lat --timeline 10" \
  "bw --timeline 0" "bw --phases"; do
  status=0
  # shellcheck disable=SC2086
  "$perf" $args >/dev/null 2>"$out/bad.err" || status=$?
  [[ $status -eq 2 && -s "$out/bad.err" ]] || fail "'$args': status $status, expected 2 and a message"
done
status=0
"$perf" bw --provider "$provider" -q -n 5 -e 1K --plugin /nonexistent/libnccl-net.so \
  >/dev/null 2>"$out/bad.err" || status=$?
[[ $status -ne 0 ]] && grep -q nonexistent "$out/bad.err" || fail "missing plugin: status $status"
echo "ok: refusals"
