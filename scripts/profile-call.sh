#!/usr/bin/env bash
# What one 2 KB tools/call costs the gateway (or the bare proxy), counted by
# valgrind's callgrind: instructions per call and, with --cache, simulated
# cache misses per call. A developer's tool for issue 30's work, not a test:
# the benchmark (scripts/bench.sh) is what measures time.
#
#   scripts/profile-call.sh [--proxy] [--cache] [--d1 KB] [--calls N] [--clients C] [--out DIR] [--mcpmux PATH]
#
# The profiled process runs twice in front of the same HTTP floor (the
# benchmark's): once for a short session of warm-up calls, once for as many
# plus N; the difference of the two, divided by N, is the cost of a call
# with start-up, the handshake and shutdown taken out. aws-lc's entropy
# start-up runs a varying number of instructions, so its functions (the
# jitter entropy source and its mixing) are left out of both totals.
#
# --proxy   profile the bare proxy instead of mcpmux
# --cache   simulate the caches as well (32 KB L1 data and instruction
#           caches, 8-way, 64-byte lines, as on the machines we bench on):
#           L1 misses per call, reads and writes apart
# --d1 KB   with --cache (which it implies), an L1 data cache of KB
#           kilobytes instead (a power of two, 8-way). Misses that vanish
#           at 64 or 128 KB are a call's data coming back after more than
#           32 KB of other data: how much a call touches, not how much it
#           reads anew. The bare proxy's per-call misses at 64 KB are near
#           zero; compare the gateway's.
# --calls N the calls the longer run makes beyond the shorter (1000); compare
#           builds at the same N (the gateway's periodic work is in the count)
# --clients C  C sessions calling at once, each on its own connection (1):
#           the cost of a call under load, where work a call shares with
#           others (a wake-up, a read that finds several requests) is
#           shared. Each client makes the warm-up calls, and N / C more in
#           the longer run. valgrind runs one thread at a time, so this
#           counts the work, not how the threads overlap.
# --out DIR keep both callgrind outputs there, for callgrind_annotate
# --mcpmux PATH  profile that gateway binary (say, one built from an earlier
#           commit) instead of building this tree's
#
# Installs valgrind with apt-get when it is missing (as root).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

target=mcpmux
mcpmux=""
cache=()
d1=32
calls=1000
clients=1
warm=50
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --proxy) target=proxy ;;
    --cache) cache=(--cache-sim=yes) ;;
    --d1) d1="$2"; cache=(--cache-sim=yes); shift ;;
    --calls) calls="$2"; shift ;;
    --clients) clients="$2"; shift ;;
    --out) out="$2"; shift ;;
    --mcpmux) mcpmux="$2"; shift ;;
    -h|--help) sed -n '2,/^# Installs valgrind/p' "$0"; exit 0 ;;
    *) echo "profile-call: unknown argument $1" >&2; exit 64 ;;
  esac
  shift
done
case "$calls" in ''|*[!0-9]*|0) echo "profile-call: --calls needs a positive number" >&2; exit 64 ;; esac
case "$clients" in ''|*[!0-9]*|0) echo "profile-call: --clients needs a positive number" >&2; exit 64 ;; esac
if [ "$clients" -gt "$calls" ]; then
  echo "profile-call: --clients may not exceed --calls" >&2
  exit 64
fi
# Every client makes as many calls; the difference is what they add up to.
calls=$(( calls / clients * clients ))
case "$d1" in
  ''|*[!0-9]*) echo "profile-call: --d1 needs a size in KB" >&2; exit 64 ;;
esac
if [ "$d1" -lt 8 ] || [ $((d1 & (d1 - 1))) -ne 0 ]; then
  echo "profile-call: --d1 needs a power of two of at least 8 (KB)" >&2
  exit 64
fi
if [ ${#cache[@]} -gt 0 ]; then
  cache+=(--D1=$((d1 * 1024)),8,64 --I1=32768,8,64)
fi

if ! command -v valgrind >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "profile-call: valgrind is missing; run as root to install it (apt-get)" >&2
    exit 1
  fi
  echo "profile-call: installing valgrind" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind >/dev/null
fi

# As scripts/bench.sh: the benchmark binary first, then the release gateway.
bench=$(bash scripts/bench-exe.sh gateway)
if [ -z "$mcpmux" ]; then
  cargo build --release --locked --bin mcpmux
  mcpmux=target/release/mcpmux
fi
[ -x "$mcpmux" ] || { echo "profile-call: no gateway binary at $mcpmux" >&2; exit 64; }

work=$(mktemp -d)
[ -n "$out" ] || out="$work"
mkdir -p "$out"
floor_pid=""
target_pid=""
# On any exit, early ones too (a failed run of calls), nothing is left running.
cleanup() {
  [ -n "$target_pid" ] && kill "$target_pid" 2>/dev/null || true
  [ -n "$floor_pid" ] && kill "$floor_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The floor: it prints `listening ADDR` and stops when its stdin closes.
mkfifo "$work/floor.in"
"$bench" floor http --threads 2 < "$work/floor.in" > "$work/floor.out" &
floor_pid=$!
exec {floor_in}> "$work/floor.in"
floor=""
for _ in $(seq 1 100); do
  floor=$(sed -n 's/^listening //p' "$work/floor.out")
  [ -n "$floor" ] && break
  sleep 0.1
done
[ -n "$floor" ] || { echo "profile-call: the floor did not start" >&2; exit 1; }

# One profiled run making `$1` calls; its callgrind output goes to `$2`.
profile() {
  local n=$1 file=$2 addr="" tool wait=()
  if [ "$target" = mcpmux ]; then
    printf 'auth: { mode: off }\nupstreams:\n  fh:\n    url: "http://%s/mcp"\n    transport: "streamable-http"\n    required: true\n' \
      "$floor" > "$work/gateway.yaml"
    valgrind --tool=callgrind "${cache[@]}" --callgrind-out-file="$file" \
      "$mcpmux" serve --config "$work/gateway.yaml" --listen 127.0.0.1:0 \
      --log-format json > /dev/null 2> "$work/target.err" &
    target_pid=$!
    tool=fh__echo
    wait=(--wait)
    for _ in $(seq 1 600); do
      addr=$(grep -o '"addr":"127.0.0.1:[0-9]*"' "$work/target.err" | head -n 1 | cut -d'"' -f4 || true)
      [ -n "$addr" ] && break
      sleep 0.1
    done
  else
    mkfifo "$work/proxy.in"
    valgrind --tool=callgrind "${cache[@]}" --callgrind-out-file="$file" \
      "$bench" proxy --upstream "$floor" --threads 2 < "$work/proxy.in" > "$work/target.out" 2> "$work/target.err" &
    target_pid=$!
    exec {proxy_in}> "$work/proxy.in"
    tool=echo
    for _ in $(seq 1 600); do
      addr=$(sed -n 's/^listening //p' "$work/target.out")
      [ -n "$addr" ] && break
      sleep 0.1
    done
  fi
  [ -n "$addr" ] || { echo "profile-call: $target did not start; its log:" >&2; cat "$work/target.err" >&2; exit 1; }
  if [ "$clients" -eq 1 ]; then
    "$bench" calls --addr "$addr" --tool "$tool" --count "$n" "${wait[@]}"
  else
    # One call first waits for the upstream (the same in both runs), then
    # the clients call at once, `n / clients` each.
    "$bench" calls --addr "$addr" --tool "$tool" --count 1 "${wait[@]}"
    local pids=() pid failed=0
    for _ in $(seq 1 "$clients"); do
      "$bench" calls --addr "$addr" --tool "$tool" --count "$((n / clients))" &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
    [ "$failed" -eq 0 ] || { echo "profile-call: a client's calls failed" >&2; exit 1; }
  fi
  kill -TERM "$target_pid"
  wait "$target_pid" || true
  target_pid=""
  if [ "$target" = proxy ]; then exec {proxy_in}>&-; rm -f "$work/proxy.in"; fi
}

# Each event's total over the run, aws-lc's entropy start-up left out.
totals() {
  callgrind_annotate --threshold=100 --auto=no "$1" 2>/dev/null | awk '
    /^Events shown:/ { n = split($0, name, " ") - 2; for (i = 1; i <= n; i++) name[i] = name[i + 2]; next }
    /PROGRAM TOTALS|jent|rol64|xoshiro|uint32rotl|ptr_to_le/ { next }
    {
      line = $0
      gsub(/\([^)]*\)/, "", line)
      if (split(line, field, " ") <= n) next
      for (i = 1; i <= n; i++) if (field[i] !~ /^([0-9][0-9,]*|\.)$/) next
      for (i = 1; i <= n; i++) { v = field[i]; if (v == ".") v = 0; gsub(",", "", v); sum[i] += v }
    }
    END { for (i = 1; i <= n; i++) printf "%s %d\n", name[i], sum[i] }'
}

profile "$((warm * clients))" "$out/short.callgrind"
profile "$(((warm * clients) + calls))" "$out/long.callgrind"
echo "per 2 KB call through $target (callgrind, $calls calls, $clients at once):"
paste <(totals "$out/short.callgrind") <(totals "$out/long.callgrind") \
  | awk -v n="$calls" '{ v = ($4 - $2) / n; if (v > -0.5 && v < 0.5) v = 0; printf "  %-6s %10.0f\n", $1, v }'
if [ "$out" != "$work" ]; then
  echo "callgrind outputs: $out/short.callgrind, $out/long.callgrind"
fi
