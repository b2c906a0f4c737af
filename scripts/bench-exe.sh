#!/usr/bin/env bash
# Builds one of the package's benchmarks as `cargo bench` builds it (with
# --test, as `cargo test --all-targets` does: unoptimized) and prints the
# path of its executable. Cargo's own messages go to stderr.
#
#   scripts/bench-exe.sh gateway         # what bench.sh, pgo-build.sh and
#                                        # profile-call.sh run
#   scripts/bench-exe.sh [--test] soak   # what soak.sh runs
#
# Build it before the release gateway: `cargo bench` builds the package's
# binaries with the dev-dependencies' features too (tokio's test-util among
# them), so a gateway built after it is the one `cargo build --release`
# ships.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command=bench
if [ "${1:-}" = --test ]; then
  command=test
  shift
fi
case "${1:-}" in
  gateway|soak) name=$1 ;;
  *) echo "usage: scripts/bench-exe.sh [--test] gateway|soak" >&2; exit 64 ;;
esac

exe=$(cargo "$command" --locked --bench "$name" --no-run --message-format=json \
  | grep '"kind":\["bench"\]' \
  | grep -o '"executable":"[^"]*"' \
  | tail -n 1 \
  | cut -d'"' -f4)
if [ -z "$exe" ]; then
  echo "bench-exe: cargo did not report the $name benchmark's executable" >&2
  exit 1
fi
echo "$exe"
