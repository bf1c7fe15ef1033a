#!/usr/bin/env bash
# `cpack -G DEB` from the build tree, and the package's contents and dependencies. Installing it
# with dpkg -i (then running the packaged fabric-net-info and removing the package) happens only
# as root with NNF_DEB_INSTALL=1, as in CI: it changes the machine.
#   deb_test.sh BUILD_DIR
set -uo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
command -v dpkg-deb >/dev/null || { echo "skip: dpkg-deb not installed"; exit 77; }

(cd "$tmp" && cpack --config "$build/CPackConfig.cmake" -G DEB -B "$tmp" >"$tmp/cpack.log" 2>&1) ||
  fail "cpack: $(tail -5 "$tmp/cpack.log")"
deb=$(ls "$tmp"/*.deb 2>/dev/null | head -1)
[[ -n "$deb" ]] || fail "cpack made no .deb"
dpkg-deb -c "$deb" >"$tmp/contents.txt"
for path in ./usr/lib/libnccl-net-fabric.so ./usr/bin/fabric-net-info ./usr/bin/fabric-net-perf \
  ./usr/share/doc/nccl-net-fabric/README.md ./usr/share/doc/nccl-net-fabric/pytorch.md; do
  grep -q " $path\$" "$tmp/contents.txt" || fail "$path missing from $(basename "$deb")"
done
grep -q ' ./usr/lib/libnccl-net.so -> libnccl-net-fabric.so$' "$tmp/contents.txt" ||
  fail "the libnccl-net.so alias is missing"
depends=$(dpkg-deb -f "$deb" Depends)
[[ "$depends" == *libfabric* && "$depends" == *hwloc* ]] || fail "Depends lacks libfabric/hwloc: $depends"
echo "ok: $(basename "$deb"): contents and Depends ($depends)"

if [[ $(id -u) -eq 0 && "${NNF_DEB_INSTALL:-0}" == 1 ]]; then
  dpkg -i "$deb" >"$tmp/dpkg.log" 2>&1 || fail "dpkg -i: $(tail -3 "$tmp/dpkg.log")"
  status=0
  env -u NNF_PLUGIN FI_PROVIDER=shm /usr/bin/fabric-net-info >"$tmp/info.txt" 2>&1 || status=$?
  dpkg -P nccl-net-fabric >/dev/null 2>&1
  [[ $status -eq 0 ]] || fail "packaged fabric-net-info: $(tail -1 "$tmp/info.txt")"
  grep -q '^plugin /usr/bin/../lib/libnccl-net-fabric.so' "$tmp/info.txt" ||
    fail "packaged fabric-net-info did not load /usr/lib's plugin"
  echo "ok: installed with dpkg -i, fabric-net-info works, removed"
else
  echo "note: dpkg -i skipped (needs root and NNF_DEB_INSTALL=1)"
fi
