#!/usr/bin/env bash
# Builds libfabric 2.x from the source package of Debian's newer release (trixie) into a cache
# prefix outside the checkout, and prints that prefix on its last line of output.
#
#   scripts/libfabric.sh                         # -> /opt/nnf-deps/libfabric-2.1.0
#   NNF_DEPS=/somewhere scripts/libfabric.sh     # another cache folder
#   scripts/libfabric.sh --print-prefix          # only the prefix; builds nothing
#   scripts/libfabric.sh --cuda                  # -> /opt/nnf-deps/libfabric-2.1.0-cuda (GPU check)
#   scripts/libfabric.sh --efa                   # -> /opt/nnf-deps/libfabric-2.1.0-efa (main CI)
#
# A finished build is reused: the prefix holds a stamp with the version and the configure flags,
# and a prefix whose stamp matches is returned at once.
#
# --cuda builds shm, tcp and rxm with CUDA support (--with-cuda=$CUDA_HOME, default
# /usr/local/cuda, whose headers are all it needs; the CUDA libraries are dlopened at run time),
# for tests/gpu/run.sh. It never installs or downloads anything, so that it runs on a machine
# without network access: the tarball comes from NNF_LIBFABRIC_TARBALL or the cache folder, and
# a missing build tool is an error naming it.
#
# --efa builds what the plain build has, plus the real efa provider as a loadable library
# (lib/libfabric/libefa-fi.so, against rdma-core 56.1's headers from scripts/rdma-core.sh) and
# CUDA support dlopened (as --cuda), so that the efa provider runs on the software EFA device
# (tests/soft_efa) and takes FI_HMEM_CUDA registrations there. As a loadable library, the efa
# provider needs libibverbs.so.1 and libefa.so.1 only where it is loaded: a process that puts the
# software device first on LD_LIBRARY_PATH gets it; any other finds no EFA device (Debian's
# rdma-core 44, if installed, lacks the symbol versions it binds to, or lists no device), and a
# process that sets FI_PROVIDER_PATH (the EFA-rules stand-in, tests/efa_rules) never loads it.
#
# The source: Debian 12 ships libfabric 1.17; trixie's source package carries 2.1, fetched by
# scripts/debian-source.sh (a private apt configuration; the tarball checked against trixie's
# signed Sources index; we build upstream as released).
set -euo pipefail
scripts="$(cd "$(dirname "$0")" && pwd)"
version=${LIBFABRIC_VERSION:-2.1.0}
deps=${NNF_DEPS:-/opt/nnf-deps}
prefix=$deps/libfabric-$version
jobs=${JOBS:-$(nproc)}

print_prefix=0
cuda=""
efa=0
for arg in "$@"; do
  case $arg in
    --print-prefix) print_prefix=1 ;;
    --cuda) cuda=${CUDA_HOME:-/usr/local/cuda} ;;
    --efa) efa=1 ;;
    *) echo "libfabric.sh: unknown argument '$arg'" >&2; exit 1 ;;
  esac
done
if ((efa)) && [[ -n $cuda ]]; then
  echo "libfabric.sh: --efa already includes CUDA support; give one of --efa, --cuda" >&2
  exit 1
fi
offline=0
if [[ -n $cuda ]]; then
  prefix=$prefix-cuda
  offline=1  # the GPU check builds where there may be no network: nothing is fetched
elif ((efa)); then
  prefix=$prefix-efa
fi
if ((print_prefix)); then
  echo "$prefix"
  exit 0
fi

# Only what the tests use: shm and tcp (RDM over tcp is native in 2.x), rxm (rxm over tcp, as in
# 1.x) and rxd over udp, which are small. --enable-only skips every other provider: no EFA, verbs,
# psm2/3, opx, cxi, usnic or ucx hardware exists here, and the tests' EFA stand-in is our own
# EFA-rules provider, loaded through FI_PROVIDER_PATH under the name "efa" - a built-in efa
# provider would only compete with it. sockets is never used (project rule). The hook providers
# (perf, trace, profile, ...) and lnx are not needed either.
configure_flags=(--enable-only --enable-shm --enable-tcp --enable-rxm --enable-udp --enable-rxd
                 --disable-static --disable-debug --with-cuda=no --with-ze=no --with-rocr=no
                 --with-neuron=no --with-synapseai=no --with-gdrcopy=no --with-uring=no
                 --with-lttng=no)
if [[ -n $cuda ]]; then
  # The GPU check's set: shm takes CUDA memory (FI_HMEM); tcp and rxm as in CI. CUDA is dlopened
  # (libcudart.so, libcuda.so.1) so the library loads where there is no GPU.
  configure_flags=(--enable-only --enable-shm --enable-tcp --enable-rxm
                   --disable-static --disable-debug --with-cuda="$cuda" --enable-cuda-dlopen
                   --with-ze=no --with-rocr=no --with-neuron=no --with-synapseai=no
                   --with-gdrcopy=no --with-uring=no --with-lttng=no)
fi
if ((efa)); then
  # The plain set plus efa (a DSO) and dlopened CUDA. rdma-core's headers and link-only
  # libraries come from scripts/rdma-core.sh (fetched from Debian's archive once, then reused).
  rdma=$("$scripts/rdma-core.sh" --print-prefix)
  cuda=${CUDA_HOME:-/usr/local/cuda}
  configure_flags=(--enable-only --enable-shm --enable-tcp --enable-rxm --enable-udp --enable-rxd
                   --enable-efa="dl:$rdma" --disable-static --disable-debug
                   --with-cuda="$cuda" --enable-cuda-dlopen --with-ze=no --with-rocr=no
                   --with-neuron=no --with-synapseai=no --with-gdrcopy=no --with-uring=no
                   --with-lttng=no)
fi
stamp_text="libfabric $version ${configure_flags[*]}"
stamp=$prefix/.nnf-build-stamp

if [[ -f $stamp && $(cat "$stamp") == "$stamp_text" && -f $prefix/lib/pkgconfig/libfabric.pc ]]; then
  echo "== libfabric $version: reusing $prefix" >&2
  echo "$prefix"
  exit 0
fi

if [[ -n $cuda ]]; then  # --cuda and --efa: the CUDA headers; --cuda: the tools (no installing)
  missing=()
  for tool in autoreconf automake libtoolize make gcc xz tar; do
    ((offline)) || break
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  [[ -f $cuda/include/cuda_runtime.h ]] || missing+=("CUDA headers ($cuda/include/cuda_runtime.h; set CUDA_HOME)")
  if ((${#missing[@]})); then
    echo "libfabric.sh: cannot build libfabric with CUDA here, missing: ${missing[*]}" >&2
    exit 1
  fi
fi

if [[ $(id -u) -ne 0 ]]; then sudo=sudo; else sudo=; fi
packages=(autoconf automake libtool make gcc pkg-config dpkg-dev xz-utils)
missing=()
for package in "${packages[@]}"; do
  ((offline)) && break  # checked above, by command: no package manager needed
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "== installing: ${missing[*]}" >&2
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

src=$deps/src
tarball=${NNF_LIBFABRIC_TARBALL:-$src/libfabric_$version.orig.tar.xz}
if [[ ! -f $tarball && ( $offline -eq 1 || -n ${NNF_LIBFABRIC_TARBALL:-} ) ]]; then
  echo "libfabric.sh: no tarball at $tarball (set NNF_LIBFABRIC_TARBALL to" \
    "libfabric_$version.orig.tar.xz; scripts/libfabric.sh without --cuda fetches it)" >&2
  exit 1
fi
if [[ ! -f $tarball ]]; then
  tarball=$("$scripts/debian-source.sh" libfabric "libfabric_$version.orig.tar.xz" | tail -1) ||
    { echo "libfabric.sh: set LIBFABRIC_VERSION to trixie's upstream version" >&2; exit 1; }
fi
if ((efa)); then
  # rdma-core's headers and link-only libraries (fetched from the same archive once, then reused).
  "$scripts/rdma-core.sh" >/dev/null || exit 1
fi

start=$SECONDS
work=$deps/build/libfabric-$version$( ((efa)) && echo -efa || echo "${cuda:+-cuda}")
rm -rf "$work"
mkdir -p "$work"
tar -xJf "$tarball" -C "$work" --strip-components=1
cd "$work"
echo "== libfabric $version: autoreconf, configure, build (-j$jobs), install into $prefix" >&2
# The upstream tarball is a git export: it has no configure script yet.
autoreconf -ivf >autoreconf.log 2>&1 || { tail -30 autoreconf.log >&2; exit 1; }
# A CUDA toolkit without nvml.h (a separate package) gets our stand-in, which is all that
# libfabric's dlopened CUDA code needs from it.
configure_env=()
if [[ -n $cuda && ! -f $cuda/include/nvml.h ]]; then
  configure_env=(CPPFLAGS="-I$scripts/nvml-shim")
fi
./configure --prefix="$prefix" "${configure_flags[@]}" "${configure_env[@]}" >configure.log 2>&1 ||
  { tail -40 configure.log >&2; exit 1; }
if [[ -n $cuda ]] && ! grep -q '^#define HAVE_CUDA 1' config.h; then
  echo "libfabric.sh: configure did not enable CUDA with $cuda:" >&2
  grep -i cuda configure.log | tail -20 >&2
  exit 1
fi
if ((efa)) && ! grep -q '^#define HAVE_EFA 1' config.h; then
  echo "libfabric.sh: configure did not enable efa with rdma-core at $rdma:" >&2
  grep -iE 'efa|verbs' configure.log | tail -20 >&2
  exit 1
fi
make -j"$jobs" >make.log 2>&1 || { tail -40 make.log >&2; exit 1; }
rm -rf "$prefix"
make install >install.log 2>&1 || { tail -40 install.log >&2; exit 1; }
if ((efa)); then
  # The provider must find libibverbs.so.1 and libefa.so.1 on LD_LIBRARY_PATH only, never the
  # link-only stand-ins it was linked against (its run path names libfabric's own folder).
  if readelf -d "$prefix/lib/libfabric/libefa-fi.so" | grep -E 'RPATH|RUNPATH' | grep -qF "$rdma"; then
    echo "libfabric.sh: libefa-fi.so's run path names $rdma:" >&2
    readelf -d "$prefix/lib/libfabric/libefa-fi.so" | grep -E 'RPATH|RUNPATH' >&2
    exit 1
  fi
fi
echo "$stamp_text" >"$stamp"
echo "== libfabric $version built in $((SECONDS - start)) s; providers:" >&2
"$prefix/bin/fi_info" -l 2>/dev/null | sed -n "s/^\([a-z_0-9]*\):.*/\1/p" | tr "\n" " " >&2 || true
echo >&2
echo "$prefix"
