#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then the prefix copied elsewhere (a relocated
# install) and its tools run with the build tree out of sight: hidden under an empty tmpfs where
# mount namespaces are available (root), else simply not on any path the tools are given.
# Deletes nothing of the build tree.
#   install_test.sh BUILD_DIR
set -uo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 ||
  fail "cmake --install: $(tail -3 "$tmp/install.log")"
for file in lib/libnccl-net-fabric.so bin/fabric-net-info bin/fabric-net-perf \
  share/doc/nccl-net-fabric/README.md share/doc/nccl-net-fabric/pytorch.md; do
  [[ -e "$tmp/prefix/$file" ]] || fail "$file not installed"
done
[[ "$(readlink "$tmp/prefix/lib/libnccl-net.so")" == libnccl-net-fabric.so ]] ||
  fail "lib/libnccl-net.so is not the alias of libnccl-net-fabric.so"
echo "ok: layout"

cp -a "$tmp/prefix" "$tmp/moved"
moved=$tmp/moved
# Runs a command with the build tree hidden when we may, as it is after a fresh clone's build
# directory is deleted.
hidden() {
  if [[ $(id -u) -eq 0 ]] && unshare -m true 2>/dev/null; then
    unshare -m bash -c 'mount -t tmpfs none "$0" && exec "$@"' "$(realpath "$build")" "$@"
  else
    "$@"
  fi
}

hidden env -u NNF_PLUGIN FI_PROVIDER=shm "$moved/bin/fabric-net-info" >"$tmp/info.txt" 2>&1 ||
  fail "installed fabric-net-info: $(tail -1 "$tmp/info.txt")"
grep -q "^plugin $moved/bin/../lib/libnccl-net-fabric.so (Fabric, ncclNetPlugin_v12)" \
  "$tmp/info.txt" || fail "installed fabric-net-info did not load the installed plugin: $(grep '^plugin' "$tmp/info.txt")"
echo "ok: installed fabric-net-info loads $moved/lib's plugin"

hidden env -u NNF_PLUGIN "$moved/bin/fabric-net-perf" bw --provider shm -q --check -b 1K -e 64K \
  -n 20 >"$tmp/perf.txt" 2>&1 || fail "installed fabric-net-perf: $(tail -3 "$tmp/perf.txt")"
grep -q 'no mismatch' "$tmp/perf.txt" || fail "installed fabric-net-perf: no data-check line"
echo "ok: installed fabric-net-perf"

# NCCL's default: dlopen("libnccl-net.so") through LD_LIBRARY_PATH, no NCCL_NET_PLUGIN.
hidden env -u NNF_PLUGIN FI_PROVIDER=shm LD_LIBRARY_PATH="$moved/lib" \
  "$moved/bin/fabric-net-info" --plugin libnccl-net.so >"$tmp/alias.txt" 2>&1 ||
  fail "libnccl-net.so through LD_LIBRARY_PATH: $(tail -1 "$tmp/alias.txt")"
echo "ok: libnccl-net.so found through LD_LIBRARY_PATH"

[[ -e "$build/src/libnccl-net-fabric.so" ]] || fail "the build tree lost its plugin"
