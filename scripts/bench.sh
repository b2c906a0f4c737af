#!/usr/bin/env bash
# The gateway benchmark, from a fresh clone: builds the benchmark binary and
# the release gateway, then runs it. Arguments go to the benchmark, e.g.
#   scripts/bench.sh --quick
#   scripts/bench.sh --out docs/benchmark.md
# See docs/benchmark.md for what it measures.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# `cargo bench` builds the package's binaries with the dev-dependencies'
# features too (tokio's test-util among them), so build the benchmark first
# and the gateway after it: target/release/mcpmux is then the binary that
# `cargo build --release` ships.
bench=$(cargo bench --locked --bench gateway --no-run --message-format=json \
  | grep '"kind":\["bench"\]' \
  | grep -o '"executable":"[^"]*"' \
  | tail -n 1 \
  | cut -d'"' -f4)
if [ -z "$bench" ]; then
  echo "bench.sh: cargo did not report the benchmark's executable" >&2
  exit 1
fi
cargo build --release --locked --bin mcpmux
exec "$bench" --bench --mcpmux target/release/mcpmux "$@"
