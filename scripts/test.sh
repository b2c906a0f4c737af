#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the third-party MCP
# peers the tests run against, then checks formatting and lints, then runs
# every test (unit and integration), then two minutes of the soak.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Free disk space first: a build that runs out of it fails deep inside some
# crate's compile, and this line says why.
echo "test: $(df -h . | awk 'NR==2 {print $4 " free on " $6}')"
# A fresh clone in CI builds once: incremental caches would only take disk.
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi

bash scripts/setup-system.sh
bash scripts/setup-interop.sh
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
# No container engine runs here, so CI runs the Dockerfile's build stage
# command itself: the image ships exactly this binary (tests/it/deploy.rs
# checks that the Dockerfile runs the same command).
echo "container build stage: cargo build --release --locked --bin mcpmux"
cargo build --release --locked --bin mcpmux
# The tests, their peers and the browsers they drive write their temporary
# files (configs, records, browser profiles) under one directory of this
# run's, removed when the run ends however it ends.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/mcpmux-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export TMPDIR="$scratch"
cargo test --all-targets --locked

# Two minutes of the soak (docs/soak.md): mixed faults under load, then the
# verifier. It runs the binaries the steps above built.
bash scripts/soak.sh --minutes 2 --profile test
