#!/usr/bin/env bash
# The gateway benchmark, from a fresh clone: builds the benchmark binary and
# the gateway, then runs it. Arguments but --plain go to the benchmark, e.g.
#   scripts/bench.sh --quick
#   scripts/bench.sh --out docs/benchmark.md
# See docs/benchmark.md for what it measures.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The gateway measured is the profile-guided build (scripts/pgo-build.sh,
# target/pgo/mcpmux); `--plain` measures `cargo build --release`'s
# target/release/mcpmux instead (the build the container image ships
# today). The report's machine table names the build it measured.
plain=false
args=()
for arg in "$@"; do
  case "$arg" in
    --plain) plain=true ;;
    *) args+=("$arg") ;;
  esac
done

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
if $plain; then
  cargo build --release --locked --bin mcpmux
  gateway=target/release/mcpmux
  export MCPMUX_BUILD="cargo build --release"
else
  bash scripts/pgo-build.sh
  gateway=target/pgo/mcpmux
  export MCPMUX_BUILD="profile-guided (scripts/pgo-build.sh)"
fi
exec "$bench" --bench --mcpmux "$gateway" "${args[@]}"
