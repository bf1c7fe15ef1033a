#!/usr/bin/env bash
# The main job: install, build what it needs (the plugin and fabric-net-perf, not the tests), then
# move data between two local processes through the plugin on the default provider and print
# bandwidth and latency beside raw libfabric.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
NNF_BUILD_TARGETS="nccl-net-fabric fabric-net-perf" scripts/bootstrap.sh build
# Local runs stay on loopback when the default provider is tcp.
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
./build/tools/fabric-net-perf/fabric-net-perf bw "$@"
./build/tools/fabric-net-perf/fabric-net-perf lat "$@"
echo
echo "main job: $((SECONDS - start)) s. The whole test suite: scripts/test.sh (about 45-55 minutes"
echo "on 2 cores from nothing: libfabric 2.1 built from source, two builds, sanitizers);"
echo "scripts/test.sh --quick runs ctest alone against libfabric 2.1 (about 10 minutes from nothing)."
