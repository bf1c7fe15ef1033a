#!/usr/bin/env bash
# The GPU check must refuse to pass where no GPU byte can move (ctest tools.GpuCheckRefuses...):
# run.sh over an existing build, once with no GPU and no usable driver, once with the stand-in
# libcuda.so.1 and nvidia-smi (everything looks like a GPU; no provider takes the memory). Each
# must exit non-zero with its reason on the last line.
#   refusal_test.sh CMAKE_BUILD_DIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# expect NAME STATUS PATTERN... -- ARGS...: run.sh's exit status, and its output matching every
# PATTERN (grep -E); the last line must say FAILED.
expect() {
  local name=$1 want=$2
  shift 2
  local patterns=()
  while [[ $1 != -- ]]; do patterns+=("$1"); shift; done
  shift
  local status=0
  env NNF_GPU_CMAKE_BUILD="$build" NNF_GPU_BUILD_DIR="$work/$name" "$@" >"$work/$name.out" 2>&1 || status=$?
  local last
  last=$(tail -n 1 "$work/$name.out")
  [[ $status -eq $want ]] || { tail -40 "$work/$name.out" >&2; fail "$name: exit status $status, expected $want"; }
  [[ $last == "== GPU check FAILED: "* ]] || fail "$name: last line is not a failure: $last"
  for pattern in "${patterns[@]}"; do
    grep -Eq -- "$pattern" "$work/$name.out" || { tail -40 "$work/$name.out" >&2; fail "$name: no line matches /$pattern/"; }
  done
  echo "ok: $name: $last"
}

# No GPU: nvidia-smi fails and libcuda.so.1 is not a driver (an empty file named so comes first,
# whatever driver this machine has).
mkdir -p "$work/nogpu"
: >"$work/nogpu/libcuda.so.1"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."\nexit 9\n' \
  >"$work/nogpu/nvidia-smi"
chmod +x "$work/nogpu/nvidia-smi"
expect no-gpu 2 'no NVIDIA GPU visible' 'cannot load libcuda.so.1' 'GPU CHECK FAILED' -- \
  PATH="$work/nogpu:$PATH" LD_LIBRARY_PATH="$work/nogpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$here/run.sh"

# The stand-in: driver calls succeed, GPU memory is host memory the driver calls device memory.
# Whatever libfabric this build uses, none takes it as CUDA memory here, so nothing moves.
expect stand-in 1 'stand-in driver' 'GPU 0: nnf stand-in GPU' \
  'no provider took the GPU memory|the plugin offers no GPU memory' \
  'no GPU byte moved through the plugin and was verified' -- "$here/run.sh" --stand-in
