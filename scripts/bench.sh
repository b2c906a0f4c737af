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

# The benchmark binary first, then the gateway (see scripts/bench-exe.sh).
bench=$(bash scripts/bench-exe.sh gateway)
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
