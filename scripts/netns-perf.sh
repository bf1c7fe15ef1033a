#!/usr/bin/env bash
# Runs fabric-net-perf between pairs of network namespaces, each pair joined by its own veth
# link, over the tcp provider, so the two-host path (TCP bootstrap, real addresses, optional
# rate limit) can be measured on one machine; with -n several pairs run at once. Needs root.
# Everything it creates is removed on exit.
#
# Usage: scripts/netns-perf.sh [-n PAIRS] [-r RATE] [-t PERF] [--rails N] [-- fabric-net-perf options]
#   -n PAIRS   namespace pairs running at once (default 1; 2 x PAIRS namespaces)
#   -r RATE    shape every veth link with tbf (e.g. 10gbit, 500mbit); default unshaped
#   -t PERF    path of the fabric-net-perf binary (default: build/tools/fabric-net-perf/...)
#   --rails N  join each pair by N veth links rail0..rail<N-1> (1..16), rail r on its own subnet
#              10.<99+r>.<pair>.0/24, each shaped by -r; the plugin groups them into one device
#              (NCCL_FABRIC_RAILS=rail0,...); FI_TCP_IFACE=rail0 with one rail, unset with more
#   --link-event T:down|up:R  (with --rails; repeatable) T seconds (decimals allowed) after the
#              connecting sides start, `ip link set railR down` (or up) on the listening side's
#              end in every pair: the veth peer loses (regains) its carrier, so the link carries
#              nothing either way until it is up again
# Example: sudo scripts/netns-perf.sh -n 2 -r 5gbit -- bw -e 4M
#          sudo scripts/netns-perf.sh --rails 4 -r 400mbit --link-event 5:down:1 \
#            --link-event 12:up:1 -- bw -b 4M -e 4M -n 1000 --plugin-only --check --timeline 500
#          sudo scripts/netns-perf.sh --rails 2 -r 400mbit -- bw -b 1M -e 4M
set -euo pipefail

RATE=""
PERF=""
PAIRS=1
RAILS=""
EVENTS=()
# --rails and --link-event are long options: take them out before getopts sees the rest (up to
# a "--").
short=()
while (($#)); do
  case "$1" in
    --rails) (($# >= 2)) || { echo "netns-perf: --rails needs a value" >&2; exit 2; }
             RAILS="$2"; shift 2 ;;
    --rails=*) RAILS="${1#--rails=}"; shift ;;
    --link-event) (($# >= 2)) || { echo "netns-perf: --link-event needs a value" >&2; exit 2; }
                  EVENTS+=("$2"); shift 2 ;;
    --link-event=*) EVENTS+=("${1#--link-event=}"); shift ;;
    --) break ;;
    *) short+=("$1"); shift ;;
  esac
done
set -- "${short[@]+"${short[@]}"}" "$@"
while getopts "n:r:t:h" opt; do
  case "$opt" in
    n) PAIRS="$OPTARG" ;;
    r) RATE="$OPTARG" ;;
    t) PERF="$OPTARG" ;;
    h) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
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
if [[ -n "$RAILS" ]] && ! { [[ "$RAILS" =~ ^[1-9][0-9]?$ ]] && ((RAILS <= 16)); }; then
  echo "netns-perf: --rails takes 1..16 links per pair" >&2
  exit 2
fi
for event in "${EVENTS[@]+"${EVENTS[@]}"}"; do
  if [[ -z "$RAILS" ]] || ! [[ "$event" =~ ^[0-9]+(\.[0-9]+)?:(down|up):([0-9]+)$ ]] ||
    ((BASH_REMATCH[3] >= RAILS)); then
    echo "netns-perf: --link-event '$event': expected T:down|up:R with --rails and R < rails" >&2
    exit 2
  fi
done

# Names carry our pid so that parallel runs and leftovers of a killed run never collide.
TAG="nnf$$"
PORT=18515
WORK=$(mktemp -d)
NAMESPACES=()
LISTENERS=()
CONNECTORS=()
EVENT_PIDS=()

cleanup() {
  for pid in "${EVENT_PIDS[@]}" "${LISTENERS[@]}" "${CONNECTORS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  # Deleting a namespace deletes the veth ends inside it, and with them the pairs.
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$WORK"
}
# Cleanup on every way out: a signal ends the script (through the EXIT trap) rather than
# resuming it after the handler.
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

LINKS=()  # "namespace device" of every veth end, to wait for
link_up() {  # namespace, device
  ip -n "$1" link set "$2" up
  LINKS+=("$1 $2")
}

shape() {  # namespace, device: a token bucket on the sending side
  [[ -n "$RATE" ]] || return 0
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$RATE" burst 256kb latency 50ms
}

# Pair k: namespaces ${TAG}a$k (10.99.k.1) and ${TAG}b$k (10.99.k.2) on veth ${TAG}va$k/vb$k.
# With --rails N: veth rail0..rail<N-1> in both namespaces, rail r on 10.<99+r>.k.1 / .2.
for ((k = 0; k < PAIRS; ++k)); do
  ns_a="${TAG}a$k" ns_b="${TAG}b$k"
  # Registered before anything can fail, so that cleanup finds them.
  NAMESPACES+=("$ns_a") && ip netns add "$ns_a"
  NAMESPACES+=("$ns_b") && ip netns add "$ns_b"
  for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
  if [[ -z "$RAILS" ]]; then
    veth_a="${TAG}va$k" veth_b="${TAG}vb$k"
    ip link add "$veth_a" type veth peer name "$veth_b"
    ip link set "$veth_a" netns "$ns_a"
    ip link set "$veth_b" netns "$ns_b"
    ip -n "$ns_a" addr add "10.99.$k.1/24" dev "$veth_a"
    ip -n "$ns_b" addr add "10.99.$k.2/24" dev "$veth_b"
    link_up "$ns_a" "$veth_a"
    link_up "$ns_b" "$veth_b"
    # Shape both directions: a token bucket per sending side.
    shape "$ns_a" "$veth_a"
    shape "$ns_b" "$veth_b"
    continue
  fi
  # Only the rails carry addresses: no IPv6 link-local twin of each rail for libfabric to list.
  for ns in "$ns_a" "$ns_b"; do
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 ||
      true  # a kernel without IPv6 has nothing to disable
  done
  for ((r = 0; r < RAILS; ++r)); do
    # Both ends are made inside the namespaces: the same names in every pair, nothing on the host.
    ip link add "rail$r" netns "$ns_a" type veth peer name "rail$r" netns "$ns_b"
    ip -n "$ns_a" addr add "10.$((99 + r)).$k.1/24" dev "rail$r"
    ip -n "$ns_b" addr add "10.$((99 + r)).$k.2/24" dev "rail$r"
    link_up "$ns_a" "rail$r"
    link_up "$ns_b" "rail$r"
    shape "$ns_a" "rail$r"
    shape "$ns_b" "rail$r"
  done
done
# A veth end reads "down" for a moment after "up"; libfabric's tcp provider skips interfaces
# that are not running, and a process started in that moment finds no NIC at all.
for link in "${LINKS[@]}"; do
  read -r ns dev <<<"$link"
  for ((tries = 0; tries < 100; ++tries)); do
    [[ $(ip netns exec "$ns" cat "/sys/class/net/$dev/operstate") == up ]] && break
    sleep 0.05
  done
  [[ $(ip netns exec "$ns" cat "/sys/class/net/$dev/operstate") == up ]] ||
    { echo "netns-perf: $dev in $ns did not come up" >&2; exit 1; }
done
echo "netns-perf: $PAIRS pair(s) of namespaces over veth${RAILS:+, $RAILS rail(s) each}${RATE:+, shaped to $RATE}" >&2

# What each side's environment says, besides its own interface for the single-link case.
rail_env=()
if [[ -n "$RAILS" ]]; then
  rails_list=rail0
  for ((r = 1; r < RAILS; ++r)); do rails_list+=",rail$r"; done
  # FI_TCP_IFACE names one interface only: with several rails, tcp lists them all (and lo).
  if ((RAILS == 1)); then rail_env=(FI_TCP_IFACE=rail0); else rail_env=(-u FI_TCP_IFACE); fi
  rail_env+=(FI_PROVIDER=tcp NCCL_FABRIC_RAILS="$rails_list")
  echo "netns-perf: environment: ${rail_env[*]}" >&2
fi
side_env() {  # namespace side (a|b), pair: the env arguments for that side, one a line
  if [[ -n "$RAILS" ]]; then
    printf '%s\n' "${rail_env[@]}"
  else
    printf '%s\n' FI_PROVIDER=tcp FI_TCP_IFACE="${TAG}v$1$2"
  fi
}

# Listening sides first (they print the tables), then every connecting side at once.
for ((k = 0; k < PAIRS; ++k)); do
  mapfile -t env_a < <(side_env a "$k")
  ip netns exec "${TAG}a$k" env "${env_a[@]}" \
    "$PERF" "${ARGS[@]}" --provider tcp --listen "$PORT" >"$WORK/listen$k.txt" &
  LISTENERS+=($!)
done
for ((k = 0; k < PAIRS; ++k)); do
  mapfile -t env_b < <(side_env b "$k")
  ip netns exec "${TAG}b$k" env "${env_b[@]}" \
    "$PERF" "${ARGS[@]}" --provider tcp --connect "10.99.$k.1:$PORT" -q &
  CONNECTORS+=($!)
done
# Link events, timed from the connecting sides' start; each says what it did on stderr.
for event in "${EVENTS[@]+"${EVENTS[@]}"}"; do
  IFS=: read -r at action rail <<<"$event"
  (
    sleep "$at"
    for ((k = 0; k < PAIRS; ++k)); do ip -n "${TAG}a$k" link set "rail$rail" "$action"; done
    echo "netns-perf: t=${at} s after start: rail$rail $action" >&2
  ) &
  EVENT_PIDS+=($!)
done
status=0
for pid in "${CONNECTORS[@]}" "${LISTENERS[@]}"; do wait "$pid" || status=1; done
LISTENERS=() CONNECTORS=()
# A run that ended before its events: they have nothing left to act on.
for pid in "${EVENT_PIDS[@]+"${EVENT_PIDS[@]}"}"; do kill "$pid" 2>/dev/null || true; done
EVENT_PIDS=()
for ((k = 0; k < PAIRS; ++k)); do
  ((PAIRS == 1)) || echo "## pair $k: ${TAG}a$k (10.99.$k.1) <-> ${TAG}b$k (10.99.$k.2)"
  cat "$WORK/listen$k.txt"
  if [[ -n "$RAILS" ]]; then
    # Which links carried the data: bytes each side sent on each rail over the whole run
    # (plugin and raw engine, set-up and acknowledgements included).
    line="# bytes sent per rail (listening side / connecting side):"
    for ((r = 0; r < RAILS; ++r)); do
      tx_a=$(ip netns exec "${TAG}a$k" cat "/sys/class/net/rail$r/statistics/tx_bytes")
      tx_b=$(ip netns exec "${TAG}b$k" cat "/sys/class/net/rail$r/statistics/tx_bytes")
      line+=" rail$r $((tx_a / 1000000)) MB / $((tx_b / 1000000)) MB;"
    done
    echo "${line%;}"
  fi
done
exit $status
