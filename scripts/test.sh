#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing, builds, then runs
#   1. ctest: unit, functional (two processes, shm and tcp), reliability (bad input, dead peers,
#      resource hygiene, network faults between namespaces when root, short soak);
#   2. the suite again under ASan+UBSan, and the threaded tests under TSan;
#   3. every libFuzzer target for a short fixed time (FUZZ_SECONDS, default 15);
#   4. a functional test under valgrind (no definite leaks).
# Usage: scripts/test.sh [--quick]   (--quick: step 1 only)
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0
[[ ${1:-} == --quick ]] && quick=1

scripts/bootstrap.sh build || exit 1

failed=()
log=$(mktemp)
echo "== ctest"
(cd build && ctest --output-on-failure --timeout 600 -j2 -LE soak) 2>&1 | tee "$log"
ctest_status=${PIPESTATUS[0]}
((ctest_status == 0)) || failed+=(ctest)
total=$(sed -n 's/.* tests failed out of \([0-9]*\)$/\1/p' "$log" | tail -1)
failures=$(sed -n 's/.*, \([0-9]*\) tests failed out of .*/\1/p' "$log" | tail -1)
rm -f "$log"

if ((quick == 0)); then
  echo "== sanitizers"
  scripts/ci-sanitizers.sh || failed+=(sanitizers)
  echo "== fuzzing"
  FUZZ_SECONDS=${FUZZ_SECONDS:-15} scripts/ci-fuzz.sh || failed+=(fuzz)
  echo "== valgrind"
  BUILD_DIR=build scripts/ci-valgrind.sh || failed+=(valgrind)
fi

if ((${#failed[@]})); then
  echo "FAILED stages: ${failed[*]}"
fi
# The closing line CI reads: the main ctest run's counts.
echo "tests: $((${total:-0} - ${failures:-0})) passed, ${failures:-0} failed"
((${#failed[@]} == 0))
