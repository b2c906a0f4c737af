#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the third-party MCP
# peers the tests run against, then checks formatting and lints, then runs
# every test (unit and integration), then two minutes of the soak on the
# binaries the tests were built with. No release build runs: on two cores
# it added about ten minutes to the suite, most of them after the tests had
# finished. scripts/bench.sh and the Dockerfile build the release binary.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Free disk space first: a build that runs out of it fails deep inside some
# crate's compile, and this line says why.
echo "test: $(df -h . | awk 'NR==2 {print $4 " free on " $6}')"
# A fresh clone in CI builds once: incremental caches would only take disk.
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi

# The tests, their peers and the browsers they drive write their temporary
# files (configs, records, browser profiles) under one directory of this
# run's, removed when the run ends however it ends.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/mcpmux-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export TMPDIR="$scratch"

bash scripts/setup-system.sh

# Each step's start, in seconds since the suite began, for reading a slow run.
step() { echo "test: [$SECONDS s] $*"; }

step "interop setup"
bash scripts/setup-interop.sh
step "format and lints"
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
step "building the tests"
cargo test --all-targets --locked --no-run
step "running the tests"
cargo test --all-targets --locked

# Two minutes of the soak (docs/soak.md): mixed faults under load, then the
# verifier. It runs the gateway, the fixture and the soak as the test build
# above built them (unoptimized: the verifier judges what was lost, leaked
# or left behind, not speed).
step "soak"
bash scripts/soak.sh --minutes 2 --profile test
