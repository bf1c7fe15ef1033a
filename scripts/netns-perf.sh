#!/usr/bin/env bash
# Runs fabric-net-perf between two network namespaces joined by a veth pair, over the tcp
# provider, so the two-host path (TCP bootstrap, real addresses, optional rate limit) can be
# measured on one machine. Needs root. Everything it creates is removed on exit.
#
# Usage: scripts/netns-perf.sh [-r RATE] [-t PERF] [-- fabric-net-perf options]
#   -r RATE  shape the veth link with tbf (e.g. 10gbit, 500mbit); default unshaped
#   -t PERF  path of the fabric-net-perf binary (default: build/tools/fabric-net-perf/...)
# Example: sudo scripts/netns-perf.sh -r 5gbit -- bw -e 4M
set -euo pipefail

RATE=""
PERF=""
while getopts "r:t:h" opt; do
  case "$opt" in
    r) RATE="$OPTARG" ;;
    t) PERF="$OPTARG" ;;
    h) sed -n '2,11p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ "${1:-}" == "--" ]] && shift
ARGS=("$@")
[[ ${#ARGS[@]} -eq 0 ]] && ARGS=(bw -e 4M)

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [[ -z "$PERF" ]]; then
  for candidate in "$ROOT"/build*/tools/fabric-net-perf/fabric-net-perf; do
    [[ -x "$candidate" ]] && PERF="$candidate" && break
  done
fi
[[ -x "$PERF" ]] || { echo "netns-perf: fabric-net-perf not found; build it or pass -t" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "netns-perf: needs root (network namespaces)" >&2; exit 1; }

# Names carry our pid so that parallel runs and leftovers of a killed run never collide.
TAG="nnf$$"
NS_A="${TAG}a"
NS_B="${TAG}b"
VETH_A="${TAG}va"
VETH_B="${TAG}vb"
ADDR_A=10.99.0.1
ADDR_B=10.99.0.2
PORT=18515
LISTENER_PID=""
CONNECT_RC=0
LISTEN_RC=0

cleanup() {
  [[ -n "$LISTENER_PID" ]] && kill "$LISTENER_PID" 2>/dev/null || true
  # Deleting a namespace deletes the veth end inside it, and with it the pair.
  ip netns del "$NS_A" 2>/dev/null || true
  ip netns del "$NS_B" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

ip netns add "$NS_A"
ip netns add "$NS_B"
ip link add "$VETH_A" type veth peer name "$VETH_B"
ip link set "$VETH_A" netns "$NS_A"
ip link set "$VETH_B" netns "$NS_B"
ip -n "$NS_A" addr add "$ADDR_A/24" dev "$VETH_A"
ip -n "$NS_B" addr add "$ADDR_B/24" dev "$VETH_B"
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "$VETH_A" up
ip -n "$NS_B" link set "$VETH_B" up
if [[ -n "$RATE" ]]; then
  # Shape both directions: a token bucket per sending side.
  ip netns exec "$NS_A" tc qdisc add dev "$VETH_A" root tbf rate "$RATE" burst 256kb latency 50ms
  ip netns exec "$NS_B" tc qdisc add dev "$VETH_B" root tbf rate "$RATE" burst 256kb latency 50ms
fi

echo "netns-perf: $NS_A ($ADDR_A) <-> $NS_B ($ADDR_B) over veth${RATE:+, shaped to $RATE}" >&2
# The listening side prints the table; its stdout is ours.
ip netns exec "$NS_A" env FI_PROVIDER=tcp FI_TCP_IFACE="$VETH_A" \
  "$PERF" "${ARGS[@]}" --provider tcp --listen "$PORT" &
LISTENER_PID=$!
ip netns exec "$NS_B" env FI_PROVIDER=tcp FI_TCP_IFACE="$VETH_B" \
  "$PERF" "${ARGS[@]}" --provider tcp --connect "$ADDR_A:$PORT" -q || CONNECT_RC=$?
wait "$LISTENER_PID" || LISTEN_RC=$?
LISTENER_PID=""
[[ $CONNECT_RC -eq 0 && $LISTEN_RC -eq 0 ]]
