#!/usr/bin/env bash
# The GPU check (tests/gpu/gpu_check.cc): two processes move GPU buffers (cuMemAlloc) through the
# built plugin, driven as NCCL drives it, over the EFA-rules provider on libfabric's shm with CUDA;
# every byte is filled on the GPU and compared after copying it back. It passes only when GPU
# bytes moved and all were right: anything else, "not supported here" included, is a failure
# with its reason. docs/memory.md ("GPU check") says what it proves and how to run it.
#
#   tests/gpu/run.sh                 build libfabric 2.1 with CUDA, the plugin and the check; run
#   tests/gpu/run.sh --build-only    build them, then stop (exit 3: nothing was checked)
#   tests/gpu/run.sh --pack DIR      build them, then copy what a run needs into DIR
#   tests/gpu/run.sh --prebuilt DIR  run from DIR (no compiler, CMake or autotools needed); builds
#                                    from source instead only when DIR's binaries cannot load here
#   tests/gpu/run.sh --stand-in      run with tests/fake_cuda as libcuda.so.1 and a fake
#                                    nvidia-smi: everything looks like a GPU but is host memory,
#                                    which no provider takes as such; the check must fail
#
# Environment:
#   NNF_LIBFABRIC_TARBALL  libfabric_2.1.0.orig.tar.xz (Debian's); default: third_party/ in the
#                          checkout, then /opt/nnf-deps/src/
#   NNF_GPU_LIBFABRIC      an installed libfabric to use instead of building one
#   NNF_GPU_BUILD_DIR      where to build (default: build-gpu in the checkout)
#   NNF_GPU_CMAKE_BUILD    an existing CMake build folder of this checkout, used as it is (ctest)
#   CUDA_HOME              CUDA headers for libfabric's configure (default /usr/local/cuda)
#   JOBS                   parallel build jobs (default: every core)
#   NNF_GPU_CHECK_TIMEOUT  seconds the check may run (default 300; it takes well under one minute)
#
# Exit status: 0 only when the check passed; 1 it failed; 2 no GPU; 3 built only; 4 build failed.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version=2.1.0

mode=run
pack=""
prebuilt=""
stand_in=0
while (($#)); do
  case $1 in
    --build-only) mode=build ;;
    --pack) mode=pack; pack=${2:?--pack needs a folder}; shift ;;
    --prebuilt) prebuilt=${2:?--prebuilt needs a folder}; shift ;;
    --stand-in) stand_in=1 ;;
    -h | --help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 4 ;;
  esac
  shift
done
build=${NNF_GPU_BUILD_DIR:-$root/build-gpu}
jobs=${JOBS:-$(nproc)}
cuda_home=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$build"
start=$SECONDS

say() { echo "== $*"; }
# finish STATUS TEXT: the last line, which ctest and people read.
finish() {
  echo "== GPU check $2 ($((SECONDS - start)) s)"
  exit "$1"
}
absolute() { (cd "$1" && pwd); }

# --- what runs: gpu_check, the plugin, the EFA-rules provider, the libraries beside them.
check="" plugin="" rules_dir="" fake="" libpath="" prefix="" packed_cudart=""

use_pack() {  # use_pack DIR: true when every binary there loads on this machine
  local dir
  dir=$(absolute "$1") || return 1
  check=$dir/bin/gpu_check plugin=$dir/plugin/libnccl-net-fabric.so rules_dir=$dir/efa_rules
  fake=$dir/fake_cuda/libnnf_fake_cuda.so libpath=$dir/lib prefix="$dir/lib (packed)"
  [[ -f $dir/cudart/libcudart.so ]] && packed_cudart=$dir/cudart/libcudart.so
  local missing
  missing=$(LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
    ldd "$check" "$plugin" "$rules_dir/libefa-rules-fi.so" 2>&1 | grep -E 'not found|No such file')
  if [[ -n $missing ]]; then
    say "the pack in $dir cannot load here:"
    echo "$missing" | sort -u | head -10
    return 1
  fi
  [[ -f $dir/MANIFEST ]] && sed 's/^/   /' "$dir/MANIFEST"
  return 0
}

build_libfabric() {
  if [[ -n ${NNF_GPU_LIBFABRIC:-} ]]; then
    prefix=$NNF_GPU_LIBFABRIC
    return 0
  fi
  local tarball=${NNF_LIBFABRIC_TARBALL:-}
  if [[ -z $tarball ]]; then
    for candidate in "$root/third_party/libfabric_$version.orig.tar.xz" \
      "/opt/nnf-deps/src/libfabric_$version.orig.tar.xz"; do
      [[ -f $candidate ]] && { tarball=$candidate; break; }
    done
  fi
  if [[ -z $tarball ]]; then
    say "no libfabric tarball: put libfabric_$version.orig.tar.xz in third_party/ or set NNF_LIBFABRIC_TARBALL"
    return 1
  fi
  say "libfabric $version with CUDA ($cuda_home) from $tarball"
  local t=$SECONDS
  prefix=$(NNF_DEPS="$build/deps" NNF_LIBFABRIC_TARBALL="$tarball" CUDA_HOME="$cuda_home" \
    JOBS="$jobs" "$root/scripts/libfabric.sh" --cuda | tail -1) || return 1
  say "libfabric ready in $prefix ($((SECONDS - t)) s)"
}

build_plugin() {
  local cmake_build targets=(nccl-net-fabric efa-rules-fi gpu_check nnf_fake_cuda)
  if [[ -n ${NNF_GPU_CMAKE_BUILD:-} ]]; then
    cmake_build=$(absolute "$NNF_GPU_CMAKE_BUILD") || return 1
    [[ -x $cmake_build/tests/gpu/gpu_check ]] || cmake --build "$cmake_build" --target "${targets[@]}" || return 1
    prefix=$(sed -n 's/^LIBFABRIC_ROOT:PATH=//p' "$cmake_build/CMakeCache.txt")
    prefix=${prefix:-the system\'s}
  else
    local missing=()
    command -v cmake >/dev/null || missing+=(cmake)
    command -v c++ >/dev/null || command -v g++ >/dev/null || missing+=("a C++ compiler")
    pkg-config --exists hwloc 2>/dev/null || missing+=("hwloc headers (libhwloc-dev)")
    [[ -f /usr/include/gtest/gtest.h || -f /usr/local/include/gtest/gtest.h ]] ||
      missing+=("GoogleTest (libgtest-dev)")
    if ((${#missing[@]})); then
      say "cannot build the plugin here, missing: ${missing[*]} (build a pack elsewhere: --pack)"
      return 1
    fi
    cmake_build=$build/cmake
    local generator=() launcher=()
    command -v ninja >/dev/null && generator=(-G Ninja)
    command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    say "plugin and check against $prefix in $cmake_build"
    local t=$SECONDS
    if [[ ! -f $cmake_build/CMakeCache.txt ]]; then
      cmake -S "$root" -B "$cmake_build" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DLIBFABRIC_ROOT="$prefix" -DNNF_BUILD_TOOLS=OFF >"$build/cmake-configure.log" 2>&1 ||
        { tail -30 "$build/cmake-configure.log"; return 1; }
    fi
    cmake --build "$cmake_build" --parallel "$jobs" --target "${targets[@]}" >"$build/cmake-build.log" 2>&1 ||
      { grep -E 'error|Error' "$build/cmake-build.log" | head -30; return 1; }
    say "built in $((SECONDS - t)) s"
    libpath=$prefix/lib
  fi
  check=$cmake_build/tests/gpu/gpu_check
  plugin=$cmake_build/src/libnccl-net-fabric.so
  rules_dir=$cmake_build/tests/efa_rules
  fake=$cmake_build/tests/fake_cuda/libnnf_fake_cuda.so
}

make_pack() {  # make_pack DIR: the binaries, stripped, and the libraries not every system has
  local dir=$1
  rm -rf "$dir"
  mkdir -p "$dir/bin" "$dir/lib" "$dir/plugin" "$dir/efa_rules" "$dir/fake_cuda" || return 1
  cp "$check" "$dir/bin/" && cp "$plugin" "$dir/plugin/" && cp "$rules_dir/libefa-rules-fi.so" "$dir/efa_rules/" &&
    cp "$fake" "$dir/fake_cuda/" || return 1
  [[ -x $prefix/bin/fi_info ]] && cp "$prefix/bin/fi_info" "$dir/bin/"
  # The CUDA runtime libfabric dlopens, for a machine whose own is not found: the last resort.
  local cudart
  cudart=$(readlink -f "$cuda_home/lib64/libcudart.so" 2>/dev/null)
  if [[ -f $cudart ]]; then
    mkdir -p "$dir/cudart" && cp "$cudart" "$dir/cudart/libcudart.so"
  fi
  # Every library they load except the C and C++ runtimes, which the GPU machine has (newer).
  LD_LIBRARY_PATH=$libpath ldd "$check" "$plugin" "$rules_dir/libefa-rules-fi.so" |
    awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' |
    while read -r library; do cp -L "$library" "$dir/lib/"; done
  find "$dir" -type f \( -name '*.so*' -o -path '*/bin/*' \) -exec strip --strip-debug {} \; 2>/dev/null
  {
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -1)"
    echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
    echo "libfabric $prefix: $(cat "$prefix/.nnf-build-stamp" 2>/dev/null)"
  } >"$dir/MANIFEST"
  say "packed into $dir ($(du -sh "$dir" | cut -f1)): $(ls "$dir/lib" | tr '\n' ' ')"
}

# --- build (or take the pack).
if [[ -n $prebuilt ]] && use_pack "$prebuilt"; then
  say "running from the pack $prebuilt"
else
  [[ -n $prebuilt ]] && say "building from source instead"
  if [[ -z ${NNF_GPU_CMAKE_BUILD:-} ]]; then
    build_libfabric || finish 4 "FAILED: libfabric with CUDA could not be built here"
  fi
  build_plugin || finish 4 "FAILED: the plugin and the check could not be built here"
fi
if [[ -n $prefix && -f $libpath/libfabric.so.1 ]] && ! grep -aq 'libcudart.so' "$libpath/libfabric.so.1"; then
  say "note: $libpath/libfabric.so.1 has no CUDA support (not built --with-cuda)"
fi
case $mode in
  build) finish 3 "NOT RUN: built (--build-only); no GPU byte was moved or checked" ;;
  pack)
    make_pack "$pack" || finish 4 "FAILED: packing into $pack"
    finish 3 "NOT RUN: packed into $pack; run tests/gpu/run.sh --prebuilt $pack on the GPU machine" ;;
esac

# --- the machine: a GPU, its driver, the CUDA runtime libfabric loads.
standin_dir=""
if ((stand_in)); then
  standin_dir=$build/stand-in
  mkdir -p "$standin_dir"
  ln -sf "$fake" "$standin_dir/libcuda.so.1"
  printf '#!/bin/sh\necho "GPU 0: nnf stand-in GPU, host memory (UUID: GPU-00000000-0000-0000-0000-000000000000)"\n' \
    >"$standin_dir/nvidia-smi"
  chmod +x "$standin_dir/nvidia-smi"
  export PATH=$standin_dir:$PATH
  say "stand-in driver: libcuda.so.1 -> $fake, and a fake nvidia-smi"
fi
gpus=0
if command -v nvidia-smi >/dev/null; then
  listing=$(nvidia-smi -L 2>&1)
  smi=$?
  gpus=$(grep -c '^GPU ' <<<"$listing")
  [[ -n $listing ]] || listing="nvidia-smi -L printed nothing"
  ((smi == 0)) || listing="nvidia-smi -L failed with status $smi: $listing"
  echo "$listing" | head -8
else
  listing="nvidia-smi not found"
fi
((gpus > 0)) || say "no NVIDIA GPU visible ($(head -1 <<<"$listing")); running the check anyway for its reason"
# libfabric dlopens libcudart.so (unversioned) for CUDA memory: give it one if the loader has none.
cudart_dir=""
if [[ $(ldconfig -p 2>/dev/null) != *"libcudart.so ("* ]]; then
  for candidate in "$cuda_home"/lib64/libcudart.so* "$cuda_home"/targets/*/lib/libcudart.so* \
    /usr/local/cuda*/lib64/libcudart.so* /usr/local/lib/python3*/dist-packages/nvidia/cu*/lib/libcudart.so* \
    /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libcudart.so* $packed_cudart; do
    if [[ -f $candidate ]]; then
      cudart_dir=$build/cudart
      mkdir -p "$cudart_dir"
      ln -sf "$candidate" "$cudart_dir/libcudart.so"
      say "CUDA runtime for libfabric: $candidate"
      break
    fi
  done
  [[ -n $cudart_dir ]] || say "no libcudart.so found: libfabric cannot use CUDA memory (the check will say so)"
fi

# --- run.
log=$build/gpu-check.log
say "running $check (plugin $plugin, libfabric $prefix)"
ld_path=$standin_dir${libpath:+:$libpath}${cudart_dir:+:$cudart_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
LD_LIBRARY_PATH=${ld_path#:} NNF_PLUGIN=$plugin NNF_EFA_RULES_DIR=$rules_dir \
  timeout "${NNF_GPU_CHECK_TIMEOUT:-300}" "$check" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
verdict=$(grep -E '^GPU CHECK (PASSED|FAILED)' "$log" | tail -1)
if [[ $status -eq 0 && $verdict == "GPU CHECK PASSED"* ]]; then
  ((stand_in)) && finish 1 "FAILED: it passed on the stand-in driver, so it proves nothing: a bug in the check"
  ((gpus > 0)) || finish 1 "FAILED: it passed but nvidia-smi lists no GPU"
  finish 0 "PASSED: ${verdict#GPU CHECK PASSED: }"
fi
[[ -n $verdict ]] || verdict="gpu_check ended with status $status and no verdict (killed at the ${NNF_GPU_CHECK_TIMEOUT:-300} s limit, or crashed)"
reason=${verdict#GPU CHECK FAILED: }
((gpus > 0)) || finish 2 "FAILED: no NVIDIA GPU visible ($(head -1 <<<"$listing")); $reason"
finish 1 "FAILED: $reason"
