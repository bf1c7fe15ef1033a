#!/usr/bin/env bash
# The whole test suite: install, build, run every test (unit and functional on shm and tcp).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh build
cd build
ctest --output-on-failure --timeout 600 -j2 "$@"
