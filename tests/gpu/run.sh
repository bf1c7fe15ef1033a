#!/usr/bin/env bash
# GPU check of the memory layer on a machine with an NVIDIA GPU. Builds what it needs with g++
# directly (no CMake state, no other layer of the plugin), then runs tests/gpu/gpu_mr_check:
# real libcuda through the run-time loader, cuMemAlloc'd buffers classified, registered with the
# shm and tcp providers (FI_HMEM_CUDA) and served by the MR cache; whether each provider accepts
# FI_OPT_CUDA_API_PERMITTED=false (else the plugin offers host memory only), the DMA-BUF decision
# from the real driver attribute and kernel, and a DMA-BUF registration at a non-zero offset. Finishes in well under 5
# minutes. Missing pieces are reported plainly and the check degrades instead of failing:
#   - no libfabric headers/library: CUDA-only check (loader, pointer attributes, flush, DMA-BUF)
#   - libfabric without CUDA support for a provider: reported as such, not a failure.
# Exit status: 0 when everything that can be checked here passed, 1 otherwise, 2 when no GPU.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${NNF_GPU_BUILD_DIR:-$root/build-gpu}"
mkdir -p "$out"

say() { echo "== $*"; }

build_only="${NNF_GPU_BUILD_ONLY:-0}"  # 1: build and stop (lets a machine without a GPU check it)
if [ "$build_only" != 1 ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    say "no NVIDIA GPU visible (nvidia-smi): nothing to check"; exit 2
  fi
  nvidia-smi -L | head -8
fi
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1'; then
  say "libcuda.so.1 is not in the loader's cache; the driver may still load from LD_LIBRARY_PATH"
fi
CXX="${CXX:-$(command -v g++ || command -v c++ || command -v clang++ || true)}"
if [ -z "$CXX" ]; then say "no C++ compiler found: cannot build the check"; exit 1; fi

# libfabric: pkg-config first, then the usual places; try apt only if it is reachable quickly.
fabric_cflags="" ; fabric_libs=""
if pkg-config --exists libfabric 2>/dev/null; then
  fabric_cflags="$(pkg-config --cflags libfabric)"; fabric_libs="$(pkg-config --libs libfabric)"
elif [ -f /usr/include/rdma/fabric.h ] || [ -f /opt/amazon/efa/include/rdma/fabric.h ]; then
  for prefix in /opt/amazon/efa /usr; do
    if [ -f "$prefix/include/rdma/fabric.h" ]; then
      fabric_cflags="-I$prefix/include"; fabric_libs="-L$prefix/lib64 -L$prefix/lib -lfabric"
      break
    fi
  done
elif command -v apt-get >/dev/null 2>&1 && timeout 60 apt-get install -y -q libfabric-dev >/dev/null 2>&1; then
  fabric_cflags="$(pkg-config --cflags libfabric 2>/dev/null)"; fabric_libs="-lfabric"
fi

probe() {  # probe NAME CODE: 1 when CODE compiles against the libfabric headers
  printf '#include <rdma/fabric.h>\n#include <rdma/fi_domain.h>\nint main(void){%s}\n' "$2" \
    > "$out/probe.c"
  if cc $fabric_cflags -c "$out/probe.c" -o "$out/probe.o" >/dev/null 2>&1; then echo 1; else echo 0; fi
}

defs="-DNNF_CUDA_LIBRARY_NAME=\"libcuda.so.1\" -DNNF_VERSION=\"gpu-check\""
sources="$root/src/memory/cuda_driver.cc $root/src/memory/gdr_policy.cc $root/src/log/log.cc $root/src/config/config.cc"
if [ -n "$fabric_libs" ]; then
  hmem=$(probe hmem 'struct fi_mr_attr a; a.iface = FI_HMEM_CUDA; a.device.cuda = 0; return (int)FI_HMEM;')
  dmabuf=$(probe dmabuf 'struct fi_mr_attr a; a.dmabuf = 0; return (int)FI_MR_DMABUF;')
  say "libfabric found ($fabric_libs): FI_HMEM=$hmem FI_MR_DMABUF=$dmabuf"
  command -v fi_info >/dev/null && fi_info --version 2>/dev/null | head -2
  defs="$defs -DNNF_GPU_CHECK_FABRIC=1 -DNNF_HAVE_FI_HMEM=$hmem -DNNF_HAVE_FI_MR_DMABUF=$dmabuf"
  sources="$sources $root/src/memory/fabric_registrar.cc $root/src/memory/mr_cache.cc"
  sources="$sources $root/src/platform/dmabuf_probe.cc $root/src/platform/provider_rules.cc"
else
  say "libfabric development files not found (and apt unreachable): CUDA-only check"
  defs="$defs -DNNF_GPU_CHECK_FABRIC=0 -DNNF_HAVE_FI_HMEM=0 -DNNF_HAVE_FI_MR_DMABUF=0"
fi

say "building gpu_mr_check"
# shellcheck disable=SC2086
if ! timeout 180 "$CXX" -std=c++17 -O1 -g -Wall -I"$root/src" $defs $fabric_cflags \
    "$here/gpu_mr_check.cc" $sources -o "$out/gpu_mr_check" $fabric_libs -ldl -lpthread; then
  say "build failed"; exit 1
fi
if [ "$build_only" = 1 ]; then say "built $out/gpu_mr_check"; exit 0; fi
say "running gpu_mr_check"
NCCL_DEBUG=INFO timeout 60 "$out/gpu_mr_check"
status=$?
say "gpu_mr_check exit status $status"
exit $status
