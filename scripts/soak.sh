#!/usr/bin/env bash
# The soak (docs/soak.md), from a fresh clone: builds the gateway, the test
# fixture and the soak binary (release by default, see --profile below),
# then runs it. Loopback only; it stops by itself after the load, the idle
# check and the report.
#   scripts/soak.sh --minutes 2
#   scripts/soak.sh --minutes 30 --out docs/soak
# Other arguments go to the soak: --clients C (default 200), --out DIR
# (default target/soak). `--profile test` runs the soak, the fixture and the
# gateway as `cargo test --all-targets` built them (unoptimized; what
# scripts/test.sh uses, so the suite builds nothing twice and no release
# binary). The default, `bench`, runs the release gateway. Exit 0 only when
# every check of the verifier passed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

profile=bench
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="${2:-}"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
if ! printf '%s\n' "${args[@]}" | grep -qx -- '--minutes'; then
  echo "usage: scripts/soak.sh --minutes N [--clients C] [--out DIR] [--profile bench|test]" >&2
  exit 64
fi
bash scripts/setup-system.sh
bash scripts/setup-interop.sh
case "$profile" in
  bench)
    # As in bench.sh: the bench target first (cargo builds it with the
    # dev-dependencies' features), the shipped binary after it.
    soak=$(bash scripts/bench-exe.sh soak)
    gateway=target/release/mcpmux
    fixture=target/release/mcpmux-fixture ;;
  test)
    # cargo builds both binaries for the soak target, with the
    # dev-dependencies' features: `cargo build` would recompile the gateway,
    # tokio and the rest for other features.
    soak=$(bash scripts/bench-exe.sh --test soak)
    gateway=target/debug/mcpmux
    fixture=target/debug/mcpmux-fixture ;;
  *) echo "soak.sh: --profile is bench or test, not '$profile'" >&2; exit 64 ;;
esac
if [ "$profile" = bench ]; then
  cargo build --release --locked --bin mcpmux --bin mcpmux-fixture
fi
exec "$soak" --bench --mcpmux "$gateway" --fixture "$fixture" "${args[@]}"
