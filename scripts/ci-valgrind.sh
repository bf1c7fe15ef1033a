#!/usr/bin/env bash
# Runs a short functional test under valgrind memcheck and fails on definite leaks (or memory
# errors) from the plugin. The sender and receiver are forked children: valgrind follows forks
# by itself and checks each process when it exits, after it has closed its comms.
#
#   scripts/ci-valgrind.sh                               # tcp, the default filter below
#   PROVIDER=shm FILTER='Transfer.*' scripts/ci-valgrind.sh
#   BUILD_DIR=build-rel scripts/ci-valgrind.sh           # reuse a build (default: build-valgrind)
#
# Leaks are counted only as "definitely lost" (--errors-for-leak-kinds=definite): memory still
# reachable at exit is libfabric's process-lifetime state and the plugin's never-destroyed
# singleton (by design: NCCL's threads may call in while the process exits). Suppressions
# (tests/sanitizers/valgrind.supp) cover libfabric internals only; see the comments there.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-$root/build-valgrind}
provider=${PROVIDER:-tcp}
filter=${FILTER:-Transfer.ReceiveLargerThanSendReportsTheRealSize:Transfer.SendsPostedBeforeTheirReceives}
logs=$build/valgrind-logs

command -v valgrind >/dev/null || { echo "ci-valgrind: apt-get install valgrind" >&2; exit 1; }
if [[ ! -f $build/build.ninja ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DNNF_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLIBFABRIC_ROOT="${LIBFABRIC_ROOT:-}" >/dev/null
fi
cmake --build "$build" --target nccl-net-fabric transfer_test -j"${JOBS:-2}"

rm -rf "$logs" && mkdir -p "$logs"
set +e
FI_PROVIDER=$provider FI_TCP_IFACE=lo NNF_TEST_PROVIDER=$provider \
  valgrind --tool=memcheck --leak-check=full --errors-for-leak-kinds=definite \
    --show-leak-kinds=definite --error-exitcode=99 --num-callers=30 \
    --suppressions="$root/tests/sanitizers/valgrind.supp" \
    --log-file="$logs/memcheck.%p" \
    "$build/tests/transfer_test" --gtest_filter="$filter"
rc=$?
set -e

# One log per process; a process with errors says so in its summary.
bad=0
for log in "$logs"/memcheck.*; do
  if grep -qE 'ERROR SUMMARY: [1-9]|definitely lost: [1-9]' "$log"; then
    echo "--- $log"
    cat "$log"
    bad=1
  fi
done
grep -h 'definitely lost\|ERROR SUMMARY' "$logs"/memcheck.* | sort | uniq -c
if [[ $rc -ne 0 || $bad -ne 0 ]]; then
  echo "ci-valgrind: FAILED (exit $rc; logs in $logs)" >&2
  exit 1
fi
echo "ci-valgrind: no definite leaks, no memory errors ($provider, $filter)"
