#!/usr/bin/env bash
# Instructions per message spent in the plugin itself on the hot path, counted by callgrind
# (repeatable on a noisy machine): fabric-net-perf msgrate through the plugin only, collecting
# only inside the shim's isend / irecv / test (entries.cc; the older single-ABI names too), and per rank the self cost of the plugin's code
# plus the glibc lock calls it makes, divided by the messages.
#   scripts/callgrind-hotpath.sh [PROVIDER] [SIZE] [MESSAGES]     (default shm 64 20000)
set -euo pipefail
cd "$(dirname "$0")/.."
provider=${1:-shm}
size=${2:-64}
messages=${3:-20000}
warmup=100
perf=$PWD/build/tools/fabric-net-perf/fabric-net-perf
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
(cd "$out" && valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=cg.%p \
  '--toggle-collect=nnf::abi::(anonymous namespace)::isend*' \
  '--toggle-collect=nnf::abi::(anonymous namespace)::irecv*' \
  '--toggle-collect=nnf::abi::(anonymous namespace)::test*' \
  '--toggle-collect=nnf::abi::entry::isend*' \
  '--toggle-collect=nnf::abi::entry::irecv*' \
  '--toggle-collect=nnf::abi::entry::test*' \
  "$perf" msgrate --plugin-only --provider "$provider" -b "$size" -e "$size" -n "$messages" \
  -w "$warmup" --comms 1 -q >/dev/null 2>"$out/valgrind.log") ||
  { tail -20 "$out/valgrind.log" >&2; exit 1; }
total=$((messages + warmup))
echo "plugin instructions per message, $provider, $size B, $total messages (isend/irecv + test polls):"
for file in "$out"/cg.*; do
  listing=$(callgrind_annotate --threshold=100 "$file" 2>/dev/null)
  self=$(awk '/libnccl-net-fabric\.so/ {gsub(",", "", $1); s += $1} END {print s + 0}' <<<"$listing")
  ((self > 0)) || continue  # the parent process, which only forks the ranks
  # glibc mutex calls made from the plugin's own frames (std::mutex); libfabric's are not ours.
  locks=$(callgrind_annotate --tree=caller --inclusive=yes --threshold=100 "$file" 2>/dev/null |
    { grep -B8 -E '^\s*[0-9,]+ \([ 0-9.]+%\)  \*  .*pthread_mutex_(lock|unlock)' || true; } |
    awk '/<.*gthr-default.h:nnf/ {gsub(",", "", $1); s += $1} END {print s + 0}')
  sends=$(awk '/Plugin::isend/ {gsub(",", "", $1); s += $1} END {print s + 0}' <<<"$listing")
  recvs=$(awk '/Plugin::irecv/ {gsub(",", "", $1); s += $1} END {print s + 0}' <<<"$listing")
  role=$([[ $sends -gt $recvs ]] && echo "sender   (isend + test)" || echo "receiver (irecv + test)")
  awk -v r="$role" -v s="$self" -v l="$locks" -v n="$total" \
    'BEGIN {printf "  %s: %6.1f plugin code + %5.1f glibc locks = %6.1f\n", r, s / n, l / n, (s + l) / n}'
done
