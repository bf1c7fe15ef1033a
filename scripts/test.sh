#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing, builds, runs.
#
# Main combination - libfabric 2.1 (built from Debian trixie's source by scripts/libfabric.sh
# --efa, cached in /opt/nnf-deps: shm, tcp, rxm, rxd and the real efa provider, as a loadable
# library, against rdma-core 56.1's headers from scripts/rdma-core.sh), build folder build-lf2,
# every provider ctest knows (softefa: that efa provider on the software EFA device,
# tests/soft_efa):
#   1. ctest: unit, functional (two processes, each provider), reliability (bad input, dead
#      peers, resource hygiene, network faults between namespaces when root, short soak);
#   2. the suite again under ASan+UBSan, and the threaded tests under TSan;
#   3. every libFuzzer target for a short fixed time (FUZZ_SECONDS, default 15);
#   4. a functional test under valgrind (no definite leaks).
# Smoke combination - Debian 12's libfabric 1.17, build folder build: the unit tests and the
#   functional suites of every provider (ctest labels unit, functional_*, efa_rules*).
#
# Every build here but the fuzzers' takes -DNNF_WERROR=ON: a compiler warning in the project's
# own sources fails CI.
#
# Usage: scripts/test.sh [--quick]   (--quick: step 1 only, main combination)
# Build folders are reused when present, and compiles go through ccache. The closing line sums
# every ctest run: "tests: N passed, N failed, N skipped", the skipped tests with their reasons
# listed once above it (scripts/ctest-summary.sh over build-ci/*.xml).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
quick=0
[[ ${1:-} == --quick ]] && quick=1
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$root")}
# A whole run compiles five builds, with different flags: ccache's default 5 GB (shared with
# other work) would evict much of the last run's objects before this one reads them.
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-16G}
results=$root/build-ci  # one JUnit file per ctest run
rm -rf "$results" && mkdir -p "$results"
export NNF_CTEST_JUNIT_DIR=$results  # the ci-*.sh scripts write theirs here too
# In CI (root, a machine of its own) the .deb is installed with dpkg, used, and removed again
# (tests/tools/deb_test.sh); elsewhere that test only inspects the package.
if [[ ${CI:-} == true && $(id -u) -eq 0 ]]; then export NNF_DEB_INSTALL=${NNF_DEB_INSTALL:-1}; fi

failed=()
times=()
# stage NAME COMMAND...: runs and times one stage; a failure is recorded, the script goes on.
stage() {
  local name=$1 start=$SECONDS
  shift
  echo "== $name"
  "$@"
  local status=$?
  times+=("$(printf '%-26s %5d s%s' "$name" $((SECONDS - start)) "$( ((status == 0)) || echo '  FAILED')")")
  ((status == 0)) || failed+=("$name")
  return $status
}

# run_ctest RESULT_NAME BUILD_DIR ARGS...: one ctest run, its results in build-ci/NAME.xml.
# Shared-memory regions left by processes that no longer exist (tests kill peers on purpose).
# libfabric 1.x shm names an endpoint "<pid>:<n>:<n>" by default: a recycled pid meeting its
# stale region makes fi_enable fail (seen in the EFA-rules tests, which use default names).
remove_stale_shm() {
  local region name pid
  for region in /dev/shm/*; do
    name=${region##*/}
    pid=${name%%:*}
    [[ $name == *:* && $pid =~ ^[0-9]+$ ]] || continue
    kill -0 "$pid" 2>/dev/null || rm -f "$region"
  done
}

run_ctest() {
  remove_stale_shm
  local name=$1 build=$2
  shift 2
  (cd "$build" && ctest --output-on-failure --timeout 600 -j2 --output-junit "$results/$name.xml" "$@")
}

# The smoke set: unit tests and each provider's functional suite (and the EFA-rules tests),
# chosen by label so that a provider added to tests/CMakeLists.txt joins without an edit here.
smoke_labels='^(unit|functional_|efa_rules)'

# A full run needs about 10 GB of disk (five build folders); a full disk fails a link, so say
# how much there is at both ends.
df -h . | tail -1 | awk '{print "== disk: " $4 " free of " $2}'
stage "packages" scripts/bootstrap.sh --packages-only || exit 1
# Sets lf2_prefix: the 2.1 install with the efa provider (built once, then reused from its cache
# folder); rdma-core's headers for the software EFA device come with it.
libfabric_2() {
  lf2_prefix=$(scripts/libfabric.sh --efa | tail -1) && [[ -f $lf2_prefix/lib/pkgconfig/libfabric.pc ]]
}
stage "libfabric 2.1" libfabric_2 || exit 1
# -DNNF_WERROR=ON: a warning in the project's own sources fails CI (the sanitizer builds too).
export NNF_WERROR=ON
if stage "build (libfabric 2.1)" scripts/bootstrap.sh build-lf2 -DLIBFABRIC_ROOT="$lf2_prefix" \
  -DNNF_WERROR=ON; then
  stage "ctest (libfabric 2.1)" run_ctest lf2 build-lf2 -LE soak
fi

if ((quick == 0)); then
  # -DLIBFABRIC_ROOT= : Debian's libfabric, whatever this folder was configured with before.
  if stage "build (libfabric 1.17)" scripts/bootstrap.sh build -DLIBFABRIC_ROOT= -DNNF_WERROR=ON; then
    stage "smoke (libfabric 1.17)" run_ctest lf117-smoke build -L "$smoke_labels"
  fi
  export LIBFABRIC_ROOT=$lf2_prefix  # the ci-*.sh scripts build against it
  stage "sanitizers (2.1)" scripts/ci-sanitizers.sh
  stage "fuzzing (2.1)" env FUZZ_SECONDS="${FUZZ_SECONDS:-15}" scripts/ci-fuzz.sh
  stage "valgrind (2.1)" env BUILD_DIR=build-lf2 scripts/ci-valgrind.sh
fi

echo
df -h . | tail -1 | awk '{print "== disk: " $4 " free of " $2}'
echo "== stage times"
printf '%s\n' "${times[@]}"
printf '%-26s %5d s\n' "total" "$SECONDS"
if ((${#failed[@]})); then
  echo "FAILED stages: ${failed[*]}"
fi
# The closing line CI reads: every ctest run's counts, summed.
shopt -s nullglob
scripts/ctest-summary.sh "$results"/*.xml
((${#failed[@]} == 0))
