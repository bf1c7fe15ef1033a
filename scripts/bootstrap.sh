#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks, then configures and builds the project.
# Usage: scripts/bootstrap.sh [BUILD_DIR] [extra cmake args...]
#        NNF_BUILD_TARGETS="nccl-net-fabric fabric-net-perf" scripts/bootstrap.sh   # just those
#        scripts/bootstrap.sh --packages-only
# Compiles through ccache (installed here): rebuilds in a fresh build folder cost little.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
# CCACHE_BASEDIR: hits across checkouts (worktrees) of the same sources.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$PWD")}

packages=(g++ cmake ninja-build pkg-config libfabric-dev libfabric-bin libhwloc-dev hwloc
          libhwloc-plugins  # hwloc reads hand-written XML fixtures only through libxml2
          googletest libgtest-dev libgmock-dev clang valgrind iproute2 procps nftables
          ccache gnuplot-nox)  # fabric-net-perf --plot, exercised by the PerfTool tests
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "== installing: ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then sudo=sudo; else sudo=; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[[ $build_dir == --packages-only ]] && exit 0

echo "== building in $build_dir"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache "$@" >/dev/null
# NNF_BUILD_TARGETS: only these targets (the main job needs the plugin and fabric-net-perf).
# shellcheck disable=SC2086
cmake --build "$build_dir" -j"$(nproc)" ${NNF_BUILD_TARGETS:+--target $NNF_BUILD_TARGETS}
