# Sourced by the network-namespace tests (multirail_netns_test.sh, multirail_outage_netns_test.sh):
# `require_netns RATE` exits 77 (ctest's skip) with a reason unless this process is root and the
# kernel gives a namespace a token bucket of RATE on its loopback, which scripts/netns-perf.sh
# needs.
skip() {
  echo "SKIP: $*"
  exit 77
}

require_netns() {
  local rate="$1" probe="nnfprobe$$" shaped=0
  [[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces, veth, tc)"
  command -v ip >/dev/null && command -v tc >/dev/null || skip "needs ip and tc (iproute2)"
  if ! ip netns add "$probe" 2>/dev/null; then skip "ip netns unavailable here"; fi
  ip -n "$probe" link set lo up &&
    ip netns exec "$probe" tc qdisc add dev lo root tbf rate "$rate" burst 256kb latency 50ms &&
    shaped=1
  ip netns del "$probe"
  ((shaped)) || skip "tc tbf unavailable in namespaces"
}
