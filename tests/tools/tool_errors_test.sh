#!/usr/bin/env bash
# Every way a user can stumble gives a non-zero exit and one clear line naming what they set:
# a plugin that cannot load, an init that fails, an invalid NCCL_FABRIC_* value, an unknown
# provider, an option out of range. And a clean start exits 0 through the newest ABI.
#   tool_errors_test.sh INFO_BINARY PERF_BINARY
set -uo pipefail
info=$1
perf=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export FI_TCP_IFACE=lo
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# expect NAME STATUS PATTERN... -- COMMAND...: the exit status, and the last stderr line
# matching every PATTERN (grep -E).
expect() {
  local name=$1 want=$2
  shift 2
  local patterns=()
  while [[ $1 != -- ]]; do patterns+=("$1"); shift; done
  shift
  local status=0
  "$@" >"$out/stdout" 2>"$out/stderr" || status=$?
  local last
  last=$(tail -n 1 "$out/stderr")
  [[ $status -eq $want ]] || fail "$name: exit status $status, expected $want (last line: $last)"
  for pattern in "${patterns[@]}"; do
    grep -Eq -- "$pattern" <<<"$last" || fail "$name: last line '$last' lacks /$pattern/"
  done
  echo "ok: $name: $last"
}

expect "info, plugin missing" 1 '^fabric-net-info: cannot load the plugin' 'nonexistent' -- \
  env NNF_PLUGIN=/nonexistent/libnccl-net-fabric.so FI_PROVIDER=shm "$info"
expect "info, init fails" 1 '^fabric-net-info: plugin init failed \(ncclSystemError\)' \
  'NCCL_FABRIC_PROVIDER=nonexistent' -- env NCCL_FABRIC_PROVIDER=nonexistent "$info"
expect "info, bad value" 1 '^fabric-net-info: invalid configuration' 'NCCL_FABRIC_MAX_RECVS=99' \
  '1\.\.8' -- env NCCL_FABRIC_MAX_RECVS=99 "$info"
# One story: nothing planned or printed before the refusal, no "using defaults".
[[ ! -s "$out/stdout" && $(wc -l <"$out/stderr") -eq 1 ]] ||
  fail "info, bad value: more than the one line ($(cat "$out/stdout" "$out/stderr"))"
# A malformed rail grouping is refused by the plan, before anything is printed, as init refuses it.
expect "info, bad rails" 1 '^fabric-net-info: invalid configuration' 'NCCL_FABRIC_RAILS=";"' \
  'empty group' -- env FI_PROVIDER=shm 'NCCL_FABRIC_RAILS=;' "$info"
[[ ! -s "$out/stdout" ]] || fail "info, bad rails: printed before the refusal"
expect "info, offline, bad value" 1 'NCCL_FABRIC_MAX_RECVS=0' '1\.\.8' -- \
  env NCCL_FABRIC_MAX_RECVS=0 "$info" --topology /nonexistent.xml

expect "perf, bad value" 1 '^fabric-net-perf: invalid configuration' 'NCCL_FABRIC_MAX_RECVS=99' \
  '1\.\.8' -- env NCCL_FABRIC_MAX_RECVS=99 "$perf" bw
[[ $(wc -l <"$out/stderr") -eq 1 ]] || fail "perf, bad value: more than one line"
expect "perf, unknown provider" 1 '^fabric-net-perf: NCCL_FABRIC_PROVIDER=nonexistent' \
  'available: ' -- env -u FI_PROVIDER NCCL_FABRIC_PROVIDER=nonexistent "$perf" bw
! grep -q 'FI_PROVIDER=' "$out/stderr" || fail "perf names FI_PROVIDER, which the user never set"
expect "perf, FI_PROVIDER unknown" 1 '^fabric-net-perf: FI_PROVIDER=nonexistent' -- \
  env FI_PROVIDER=nonexistent "$perf" bw
expect "perf, --window 64" 2 "--window: '64'" '1\.\.32' -- "$perf" bw --window 64
expect "perf, --ranks 1" 2 '2\.\.16' -- "$perf" alltoall --ranks 1
expect "perf, -b 3G" 2 '0\.\.2G-1' -- "$perf" bw -b 3G
expect "perf, rma without an operation" 2 '^fabric-net-perf: rma: expected an operation' \
  'put, put-signal, get' -- "$perf" rma --check
expect "perf, rma --ranks 9" 2 'rma: --ranks 9 is more than 8' -- "$perf" rma put --ranks 9
expect "perf, rma over two hosts" 2 'rma: local ranks only' -- "$perf" rma get --listen

status=0
FI_PROVIDER=shm "$info" >"$out/stdout" 2>"$out/stderr" || status=$?
[[ $status -eq 0 ]] || fail "info, clean start: exit status $status ($(tail -n 1 "$out/stderr"))"
grep -q 'ncclNetPlugin_v12' "$out/stdout" || fail "info, clean start: not loaded through v12"
echo "ok: info, clean start through ncclNetPlugin_v12"
# The plan the tool prints is what the loaded plugin reports, device for device.
for provider in shm tcp; do
  FI_PROVIDER=$provider "$info" >"$out/stdout" 2>"$out/stderr" ||
    fail "info on $provider: $(tail -n 1 "$out/stderr")"
  devices=$(sed -n 's/^  \([0-9]*\) device(s)$/\1/p' "$out/stdout")
  planned=$(grep -c 'as planned$' "$out/stdout")
  [[ -n $devices && $devices -ge 1 && $planned -eq $devices ]] &&
    ! grep -q 'differs from the plan' "$out/stdout" ||
    fail "info on $provider: $planned of ${devices:-?} plugin device(s) as planned: $(grep -A3 '^  dev ' "$out/stdout")"
  echo "ok: info on $provider: the plugin's $devices device(s) are as planned"
done
