#!/usr/bin/env bash
# The main job: install, build, then move data between two local processes through the plugin
# on the default provider and print bandwidth and latency beside raw libfabric.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh build
# Local runs stay on loopback when the default provider is tcp.
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
./build/tools/fabric-net-perf/fabric-net-perf bw "$@"
./build/tools/fabric-net-perf/fabric-net-perf lat "$@"
