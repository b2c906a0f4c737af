#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the third-party MCP
# peers the tests run against, then checks formatting and lints, then runs
# every test (unit and integration), then two minutes of the soak; the
# release build the soak runs is built in the background meanwhile.
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
release_pid=
finish() {
  # A failed step leaves the background release build running: end it (its
  # own process group: cargo and the compilers it started).
  if [ -n "$release_pid" ]; then kill -- "-$release_pid" 2>/dev/null || true; fi
  rm -rf "$scratch"
}
trap finish EXIT
export TMPDIR="$scratch"

bash scripts/setup-system.sh

# Each step's start, in seconds since the suite began, for reading a slow run.
step() { echo "test: [$SECONDS s] $*"; }

# No container engine runs here, so CI runs the Dockerfile's build stage
# command itself: the image ships exactly this binary (tests/it/deploy.rs
# checks that the Dockerfile runs the same command), and the soak at the end
# runs it. It builds in the background at the least CPU priority while the
# steps below run: they take the cores whenever they want them, and it takes
# what they leave idle (the downloads of the interop setup, compiles and
# links on one core, the tests waiting on their child processes). Its
# profile directory has its own cargo lock, so the builds do not wait on
# each other.
step "container build stage: cargo build --release --locked --bin mcpmux (in the background)"
release_log="$scratch/release-build.log"
set -m
nice -n 19 cargo build --release --locked --bin mcpmux >"$release_log" 2>&1 &
release_pid=$!
set +m

step "interop setup"
bash scripts/setup-interop.sh
step "format and lints"
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
step "building the tests"
cargo test --all-targets --locked --no-run
step "running the tests"
cargo test --all-targets --locked

step "container build stage: waiting for cargo build --release --locked --bin mcpmux"
release_status=0
wait "$release_pid" || release_status=$?
release_pid=
cat "$release_log"
if [ "$release_status" -ne 0 ]; then
  echo "test: the release build failed (exit $release_status)" >&2
  exit "$release_status"
fi

# Two minutes of the soak (docs/soak.md): mixed faults under load, then the
# verifier. It runs the binaries the steps above built.
step "soak"
bash scripts/soak.sh --minutes 2 --profile test
