#!/usr/bin/env bash
# Runs fabric-net-perf between pairs of network namespaces, each pair joined by its own veth
# link, over the tcp provider, so the two-host path (TCP bootstrap, real addresses, optional
# rate limit) can be measured on one machine; with -n several pairs run at once. Needs root.
# Everything it creates is removed on exit.
#
# Usage: scripts/netns-perf.sh [-n PAIRS] [-r RATE] [-t PERF] [-- fabric-net-perf options]
#   -n PAIRS  namespace pairs running at once (default 1; 2 x PAIRS namespaces)
#   -r RATE   shape every veth link with tbf (e.g. 10gbit, 500mbit); default unshaped
#   -t PERF   path of the fabric-net-perf binary (default: build/tools/fabric-net-perf/...)
# Example: sudo scripts/netns-perf.sh -n 2 -r 5gbit -- bw -e 4M
set -euo pipefail

RATE=""
PERF=""
PAIRS=1
while getopts "n:r:t:h" opt; do
  case "$opt" in
    n) PAIRS="$OPTARG" ;;
    r) RATE="$OPTARG" ;;
    t) PERF="$OPTARG" ;;
    h) sed -n '2,13p' "$0"; exit 0 ;;
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

[[ "$PAIRS" =~ ^[1-9][0-9]?$ ]] || { echo "netns-perf: -n takes 1..99 pairs" >&2; exit 2; }

# Names carry our pid so that parallel runs and leftovers of a killed run never collide.
TAG="nnf$$"
PORT=18515
WORK=$(mktemp -d)
NAMESPACES=()
LISTENERS=()

cleanup() {
  for pid in "${LISTENERS[@]}"; do kill "$pid" 2>/dev/null || true; done
  # Deleting a namespace deletes the veth end inside it, and with it the pair.
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# Pair k: namespaces ${TAG}a$k (10.99.k.1) and ${TAG}b$k (10.99.k.2) on veth ${TAG}va$k/vb$k.
for ((k = 0; k < PAIRS; ++k)); do
  ns_a="${TAG}a$k" ns_b="${TAG}b$k" veth_a="${TAG}va$k" veth_b="${TAG}vb$k"
  ip netns add "$ns_a" && NAMESPACES+=("$ns_a")
  ip netns add "$ns_b" && NAMESPACES+=("$ns_b")
  ip link add "$veth_a" type veth peer name "$veth_b"
  ip link set "$veth_a" netns "$ns_a"
  ip link set "$veth_b" netns "$ns_b"
  ip -n "$ns_a" addr add "10.99.$k.1/24" dev "$veth_a"
  ip -n "$ns_b" addr add "10.99.$k.2/24" dev "$veth_b"
  for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
  ip -n "$ns_a" link set "$veth_a" up
  ip -n "$ns_b" link set "$veth_b" up
  if [[ -n "$RATE" ]]; then
    # Shape both directions: a token bucket per sending side.
    ip netns exec "$ns_a" tc qdisc add dev "$veth_a" root tbf rate "$RATE" burst 256kb latency 50ms
    ip netns exec "$ns_b" tc qdisc add dev "$veth_b" root tbf rate "$RATE" burst 256kb latency 50ms
  fi
done
echo "netns-perf: $PAIRS pair(s) of namespaces over veth${RATE:+, shaped to $RATE}" >&2

# Listening sides first (they print the tables), then every connecting side at once.
for ((k = 0; k < PAIRS; ++k)); do
  ip netns exec "${TAG}a$k" env FI_PROVIDER=tcp FI_TCP_IFACE="${TAG}va$k" \
    "$PERF" "${ARGS[@]}" --provider tcp --listen "$PORT" >"$WORK/listen$k.txt" &
  LISTENERS+=($!)
done
CONNECTORS=()
for ((k = 0; k < PAIRS; ++k)); do
  ip netns exec "${TAG}b$k" env FI_PROVIDER=tcp FI_TCP_IFACE="${TAG}vb$k" \
    "$PERF" "${ARGS[@]}" --provider tcp --connect "10.99.$k.1:$PORT" -q &
  CONNECTORS+=($!)
done
status=0
for pid in "${CONNECTORS[@]}" "${LISTENERS[@]}"; do wait "$pid" || status=1; done
LISTENERS=()
for ((k = 0; k < PAIRS; ++k)); do
  ((PAIRS == 1)) || echo "## pair $k: ${TAG}a$k (10.99.$k.1) <-> ${TAG}b$k (10.99.$k.2)"
  cat "$WORK/listen$k.txt"
done
exit $status
