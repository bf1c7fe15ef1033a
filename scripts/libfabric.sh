#!/usr/bin/env bash
# Builds libfabric 2.x from the source package of Debian's newer release (trixie) into a cache
# prefix outside the checkout, and prints that prefix on its last line of output.
#
#   scripts/libfabric.sh                         # -> /opt/nnf-deps/libfabric-2.1.0
#   NNF_DEPS=/somewhere scripts/libfabric.sh     # another cache folder
#   scripts/libfabric.sh --print-prefix          # only the prefix; builds nothing
#   scripts/libfabric.sh --cuda                  # -> /opt/nnf-deps/libfabric-2.1.0-cuda (GPU check)
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
# The source: Debian 12 ships libfabric 1.17; trixie's source package carries 2.1. The archive
# address is read at run time from this machine's own apt sources and written only to a private
# apt configuration under the cache folder, so the system's apt state is left as it was. Only the
# upstream tarball (.orig.tar.xz) is needed: it is checked by apt against the Sources index, and
# a missing .dsc or Debian patch set is accepted (we build upstream as released).
set -euo pipefail
scripts="$(cd "$(dirname "$0")" && pwd)"
version=${LIBFABRIC_VERSION:-2.1.0}
deps=${NNF_DEPS:-/opt/nnf-deps}
prefix=$deps/libfabric-$version
jobs=${JOBS:-$(nproc)}

print_prefix=0
cuda=""
for arg in "$@"; do
  case $arg in
    --print-prefix) print_prefix=1 ;;
    --cuda) cuda=${CUDA_HOME:-/usr/local/cuda} ;;
    *) echo "libfabric.sh: unknown argument '$arg'" >&2; exit 1 ;;
  esac
done
if [[ -n $cuda ]]; then
  prefix=$prefix-cuda
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
stamp_text="libfabric $version ${configure_flags[*]}"
stamp=$prefix/.nnf-build-stamp

if [[ -f $stamp && $(cat "$stamp") == "$stamp_text" && -f $prefix/lib/pkgconfig/libfabric.pc ]]; then
  echo "== libfabric $version: reusing $prefix" >&2
  echo "$prefix"
  exit 0
fi

if [[ -n $cuda ]]; then
  missing=()
  for tool in autoreconf automake libtoolize make gcc xz tar; do
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
  [[ -n $cuda ]] && break  # checked above, by command: no package manager needed
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "== installing: ${missing[*]}" >&2
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# debian_uri: the Debian archive this machine already uses (deb822 or one-line sources).
debian_uri() {
  local uri=""
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    # The first URI of a stanza whose suites are the plain release (not -security).
    uri=$(awk -v codename="$codename" '
      /^URIs:/ { uris = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == codename) found = 1 }
      /^$/ { if (found && uris != "") { print uris; exit } found = 0; uris = "" }
      END { if (found && uris != "") print uris }' /etc/apt/sources.list.d/debian.sources | head -1)
  fi
  if [[ -z $uri && -f /etc/apt/sources.list ]]; then
    uri=$(awk -v codename="$codename" '$1 == "deb" && $0 !~ /\[/ && $3 == codename { print $2; exit }
      $1 == "deb" && $3 == codename { for (i = 3; i <= NF; i++) if ($i ~ /\]$/) { print $(i + 1); exit } }' \
      /etc/apt/sources.list)
  fi
  echo "$uri"
}

src=$deps/src
tarball=${NNF_LIBFABRIC_TARBALL:-$src/libfabric_$version.orig.tar.xz}
mkdir -p "$src"
if [[ ! -f $tarball && ( -n $cuda || -n ${NNF_LIBFABRIC_TARBALL:-} ) ]]; then
  echo "libfabric.sh: no tarball at $tarball (set NNF_LIBFABRIC_TARBALL to" \
    "libfabric_$version.orig.tar.xz; scripts/libfabric.sh without --cuda fetches it)" >&2
  exit 1
fi
if [[ ! -f $tarball ]]; then
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  uri=$(debian_uri)
  if [[ -z $uri ]]; then
    echo "libfabric.sh: no Debian archive for '$codename' in /etc/apt/sources.list{,.d/debian.sources}" >&2
    exit 1
  fi
  # A private apt configuration: trixie's Sources index never enters the system's apt lists.
  apt_dir=$deps/apt
  mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  cat >"$apt_dir/sources.list.d/trixie-src.sources" <<EOF
Types: deb-src
URIs: $uri
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  apt_options=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
               -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
               -o "APT::Sandbox::User=root")
  echo "== fetching trixie's libfabric source package" >&2
  apt-get "${apt_options[@]}" update -qq >&2
  # The .dsc may be refused by the archive's mirror while the tarball arrives: judge the result
  # by the tarball, which apt has checked against the signed Sources index.
  (cd "$src" && apt-get "${apt_options[@]}" source --download-only "libfabric/trixie" >&2) ||
    echo "== apt-get source reported an error; checking for the upstream tarball" >&2
  if [[ ! -f $tarball ]]; then
    echo "libfabric.sh: $tarball did not arrive (trixie's libfabric is:" >&2
    ls "$src" >&2
    echo "); set LIBFABRIC_VERSION to its upstream version" >&2
    exit 1
  fi
fi

start=$SECONDS
work=$deps/build/libfabric-$version${cuda:+-cuda}
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
make -j"$jobs" >make.log 2>&1 || { tail -40 make.log >&2; exit 1; }
rm -rf "$prefix"
make install >install.log 2>&1 || { tail -40 install.log >&2; exit 1; }
echo "$stamp_text" >"$stamp"
echo "== libfabric $version built in $((SECONDS - start)) s; providers:" >&2
"$prefix/bin/fi_info" -l 2>/dev/null | sed -n "s/^\([a-z_0-9]*\):.*/\1/p" | tr "\n" " " >&2 || true
echo >&2
echo "$prefix"
