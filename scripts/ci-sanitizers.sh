#!/usr/bin/env bash
# Builds the test suite with sanitizers and runs it; fails on any sanitizer report.
#
# Both with the state machines' checks on (-DNNF_ASSERTS=ON, NNF_ASSERT in src/log/assert.h).
#
#   build-asan: -DNNF_SANITIZE=address,undefined; unit, functional and reliability tests
#               (not the long soak, registered only with -DNNF_SOAK_LONG=ON, nor the network
#               namespace tests, which need root: ci-reliability covers them).
#   build-tsan: -DNNF_SANITIZE=thread; the threaded tests (label "threaded" and threads_test).
#
#   scripts/ci-sanitizers.sh            # both
#   scripts/ci-sanitizers.sh asan       # one of them
#   JOBS=4 scripts/ci-sanitizers.sh     # build parallelism (default 2)
#   LIBFABRIC_ROOT=/opt/nnf-deps/libfabric-2.1.0 scripts/ci-sanitizers.sh   # that libfabric
#   NNF_WERROR=ON scripts/ci-sanitizers.sh  # warnings in the project's sources fail the build
#                                           # (what scripts/test.sh sets)
#
# NNF_CTEST_JUNIT_DIR (set by scripts/test.sh): each ctest run writes its JUnit results there.
#
# Every sanitizer report is written to <build>/sanitizer-logs/ (log_path), also from forked
# child processes whose stderr ctest may not show; the run fails if that folder is not empty.
# Suppressions (tests/sanitizers/*.supp) cover libfabric internals only; see the comments there.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=${JOBS:-2}
which=${1:-all}
supp=$root/tests/sanitizers
status=0
junit_dir=${NNF_CTEST_JUNIT_DIR:-}
# junit NAME: the ctest arguments that write this run's results, when asked for.
junit() {
  if [[ -n $junit_dir ]]; then echo "--output-junit $junit_dir/$1.xml"; fi
}
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

check_logs() {
  local dir=$1 name=$2
  if compgen -G "$dir/*" >/dev/null; then
    echo "=== $name: sanitizer reports:"
    for log in "$dir"/*; do
      echo "--- $log"
      head -60 "$log"
    done
    status=1
  else
    echo "=== $name: no sanitizer reports"
  fi
}

# configure_build DIR SANITIZERS [TARGET...]: everything when no target is named.
# -O1 -g1: half the compile time of -O2 -g (the ASan build was most of this stage), and line
# tables are all a sanitizer's stack trace needs.
configure_build() {
  local build=$1 sanitize=$2
  shift 2
  cmake -S "$root" -B "$build" -G Ninja -DNNF_BUILD_TOOLS=OFF -DNNF_SANITIZE="$sanitize" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DNNF_ASSERTS=ON -DLIBFABRIC_ROOT="${LIBFABRIC_ROOT:-}" \
    -DNNF_WERROR="${NNF_WERROR:-OFF}" "${launcher[@]}" >/dev/null
  if [[ $# -gt 0 ]]; then
    cmake --build "$build" -j"$jobs" --target "$@"
  else
    cmake --build "$build" -j"$jobs"
  fi
}

if [[ $which == all || $which == asan ]]; then
  build=$root/build-asan
  configure_build "$build" address,undefined
  logs=$build/sanitizer-logs
  rm -rf "$logs" && mkdir -p "$logs"
  # detect_leaks: leaks of the plugin fail the run; libfabric's are suppressed (lsan.supp).
  export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:log_path=$logs/asan:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logs/ubsan:suppressions=$supp/ubsan.supp"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  # The reliability suites under rdma repeat the sendrecv ones on a second protocol: they run in
  # the main ctest stage; here they would add a third of the stage's time. So do the softefa
  # suites (the real efa provider on the software EFA device, neither of them instrumented).
  (cd "$build" && ctest --output-on-failure --timeout 900 -j"$jobs" \
    -LE 'soak|netns|gpu|softefa|reliability-(shm|tcp)_rdma$' $(junit asan)) || status=1
  unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
  check_logs "$logs" "ASan+UBSan"
fi

if [[ $which == all || $which == tsan ]]; then
  build=$root/build-tsan
  # Only what the threaded tests need: TSan builds are slow and the rest is single-threaded.
  # The EFA-rules provider and the fake CUDA driver: the threaded tests also run on provider efa.
  configure_build "$build" thread nccl-net-fabric threads_test soak_test mr_cache_test domain_lock_test \
    efa-rules-fi nnf_fake_cuda
  logs=$build/sanitizer-logs
  rm -rf "$logs" && mkdir -p "$logs"
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$logs/tsan:suppressions=$supp/tsan.supp"
  # The threaded tests: several threads driving comms at once (functional Threads.*, the
  # reliability soak, labelled "threaded"), the MR cache's concurrent unit test and the
  # device's domain lock.
  # -L '^functional_': every provider's functional suite.
  # Not softefa: the software EFA device's own thread runs in a library TSan does not see.
  (cd "$build" && ctest --output-on-failure --timeout 900 -j1 -L '^functional_' -LE softefa \
    -R '\.Threads\.' $(junit tsan-functional)) || status=1
  (cd "$build" && ctest --output-on-failure --timeout 900 -j1 -L threaded -LE soak \
    $(junit tsan-threaded)) || status=1
  if [[ -x $build/tests/mr_cache_test ]]; then
    (cd "$build" && ctest --output-on-failure --timeout 900 -j1 -R '^unit\..*([Tt]hread|DomainLock)' \
    $(junit tsan-unit)) || status=1
  fi
  unset TSAN_OPTIONS
  check_logs "$logs" "TSan"
fi

exit $status
