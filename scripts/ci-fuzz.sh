#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang in build-fuzz, replays the committed
# corpus, then fuzzes each target for FUZZ_SECONDS (default 20) and prints its executions.
# (Any build, GCC too, runs the same targets without libFuzzer: ctest -R fuzz_smoke.)
#
#   scripts/ci-fuzz.sh                  # CI: 20 s per target
#   FUZZ_SECONDS=3600 scripts/ci-fuzz.sh  # on demand: an hour per target
#   scripts/ci-fuzz.sh --refresh-seeds  # rewrite tests/fuzz/corpus/* from the encoders first
#
# New inputs found while fuzzing go to build-fuzz/corpus/<target> (not to the committed corpus);
# a crash leaves its reproducer in build-fuzz/crashes/ and fails the script. Add a reproducer
# to tests/fuzz/corpus/<target>/ once the bug is fixed, so that ctest replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-20}
jobs=${FUZZ_JOBS:-2}
targets=(listen_handle connect_message accept_message config)

if ! command -v clang++ >/dev/null; then
  echo "ci-fuzz: clang++ not found (apt-get install clang)" >&2
  exit 1
fi

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# LIBFABRIC_ROOT: which libfabric to build against (empty: the system's), as in CMakeLists.txt.
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DNNF_BUILD_TOOLS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIBFABRIC_ROOT="${LIBFABRIC_ROOT:-}" "${launcher[@]}" >/dev/null
cmake --build "$build" --target nnf_fuzzers nnf_fuzz_make_seeds -j"$jobs"

if [[ "${1:-}" == "--refresh-seeds" ]]; then
  "$build/tests/fuzz/nnf_fuzz_make_seeds" "$root/tests/fuzz/corpus"
fi

mkdir -p "$build/crashes"
status=0
summary=()
for target in "${targets[@]}"; do
  binary="$build/tests/fuzz/${target}_fuzzer"
  work="$build/corpus/$target"
  mkdir -p "$work"
  log="$build/${target}.log"
  echo "=== $target: replaying the committed corpus"
  "$binary" -runs=0 "$root/tests/fuzz/corpus/$target" >"$log.replay" 2>&1 || {
    cat "$log.replay"
    echo "ci-fuzz: $target crashes on its committed corpus" >&2
    status=1
    continue
  }
  echo "=== $target: fuzzing for ${seconds}s"
  # The work directory comes first: libFuzzer writes new inputs only to the first corpus dir.
  if "$binary" -max_total_time="$seconds" -print_final_stats=1 -max_len=512 -timeout=10 \
       -artifact_prefix="$build/crashes/${target}-" "$work" "$root/tests/fuzz/corpus/$target" \
       >"$log" 2>&1; then
    result=ok
  else
    result=CRASH
    status=1
    tail -40 "$log"
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')
  summary+=("$(printf '%-16s %-6s executions=%-10s coverage=%s' "$target" "$result" "$runs" "$cov")")
done

echo
echo "=== fuzzing summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
ls "$build/crashes" 2>/dev/null | sed 's/^/crash: /'
exit $status
