#!/usr/bin/env bash
# The release gateway built with profile-guided optimization (PGO): the
# build the benchmark measures (scripts/bench.sh runs this first).
#
#   scripts/pgo-build.sh            # writes target/pgo/mcpmux
#
# 1. an instrumented gateway (`-Cprofile-generate`), in its own target
#    directory (target/pgo/generate), so that target/release is untouched;
# 2. the training run: the benchmark's --quick pass (benches/gateway) run
#    against that gateway. It drives what a gateway does all day: 2 KB and
#    32 KB tool calls over HTTP and stdio upstreams from 1, 16 and 64
#    clients, initialize, a 5,000-tool listing, tool search, fan-out of
#    resource updates to 1,000 streams, and a stalled upstream's refusals;
#    each instrumented process writes its counts when it exits;
# 3. llvm-profdata merges the counts (the llvm-profdata of rustc's own LLVM
#    version: the rustup component llvm-tools if it is installed, else
#    llvm-profdata-N from the system, which is installed with apt-get as
#    root when it is missing);
# 4. the gateway built again with the profile (`-Cprofile-use`), in
#    target/pgo/use, and copied to target/pgo/mcpmux.
#
# The same sources and release profile as `cargo build --release`; only the
# code layout and the optimizer's choices (what to inline, which branch is
# the likely one) follow the counts. Every crate is compiled with the
# profile, so the dependencies on the call path (hyper, tokio) are laid out
# for it too. The profile's file name carries a hash of its contents, so a
# new profile rebuilds everything and an unchanged one rebuilds nothing.
# About half an hour from a fresh clone on two cores (the benchmark binary
# and two release builds); about 20 minutes once the benchmark is built.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,/^# and two release builds/p' "$0"; exit 0 ;;
  *) echo "pgo-build: unknown argument $1" >&2; exit 64 ;;
esac

out=target/pgo
mkdir -p "$out"
out=$(cd "$out" && pwd)

# llvm-profdata of the LLVM that rustc is built on: a profile written by
# one LLVM version can only be merged by a tool that knows its format.
llvm_major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
if [ -z "$llvm_major" ]; then
  echo "pgo-build: rustc -vV names no LLVM version" >&2
  exit 1
fi
profdata=""
host=$(rustc -vV | sed -n 's/^host: //p')
component="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ -x "$component" ]; then
  profdata=$component
elif command -v "llvm-profdata-$llvm_major" >/dev/null; then
  profdata=$(command -v "llvm-profdata-$llvm_major")
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "pgo-build: installing llvm-$llvm_major for llvm-profdata" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "llvm-$llvm_major" >&2
  profdata=$(command -v "llvm-profdata-$llvm_major")
else
  echo "pgo-build: no llvm-profdata for LLVM $llvm_major: run 'rustup component add llvm-tools'," >&2
  echo "  or install llvm-$llvm_major (which has llvm-profdata-$llvm_major)" >&2
  exit 1
fi

# The training driver: the benchmark binary (floors, bare proxy, load
# client). It is built as scripts/bench.sh builds it.
bench=$(bash scripts/bench-exe.sh gateway)

raw="$out/raw"
rm -rf "$raw"
RUSTFLAGS="-Cprofile-generate=$raw" CARGO_TARGET_DIR="$out/generate" \
  cargo build --release --locked --bin mcpmux
echo "pgo-build: training (the benchmark's --quick pass against the instrumented gateway)" >&2
if ! "$bench" --bench --quick --mcpmux "$out/generate/release/mcpmux" \
  --out "$out/training.md" >"$out/training.log" 2>&1; then
  echo "pgo-build: the training run failed; its output is in $out/training.log" >&2
  exit 1
fi
if ! compgen -G "$raw/*.profraw" >/dev/null; then
  echo "pgo-build: the training run left no counts in $raw" >&2
  exit 1
fi
"$profdata" merge -o "$out/merged.profdata" "$raw"
sum=$(sha256sum "$out/merged.profdata" | cut -c1-16)
profile="$out/mcpmux-$sum.profdata"
mv "$out/merged.profdata" "$profile"
# Only the newest profile is kept.
find "$out" -maxdepth 1 -name 'mcpmux-*.profdata' ! -path "$profile" -delete

# Functions the training never ran have no counts, which is expected (they
# are laid out as cold); the warning for each would drown the build's output.
RUSTFLAGS="-Cprofile-use=$profile -Cllvm-args=-pgo-warn-missing-function=false" \
  CARGO_TARGET_DIR="$out/use" cargo build --release --locked --bin mcpmux
cp "$out/use/release/mcpmux" "$out/mcpmux"
echo "pgo-build: wrote $out/mcpmux" >&2
