#!/usr/bin/env bash
# How large the gateway's futures are, as rustc lays them out: a developer's
# tool for issue 30's work, beside scripts/profile-call.sh. A call's request
# future lives in its connection's task, and every level of `async fn` on
# the call's path keeps its arguments and the locals it holds across an
# await; bytes it holds are bytes a call writes, and a state that no call
# touched since the connection's last call is not in the cache.
#
#   scripts/future-sizes.sh [--all] [--layout NAME] [--match REGEX]
#
# Prints the size of every `async fn` body of the gateway on a 2 KB call's
# path over HTTP (the default REGEX), largest first, and of the `async`
# blocks there, named by their file and line.
#
# --all          every `async fn` body and block of the gateway, not only the
#                call path's
# --match REGEX  those whose path (as `downstream::http::post`, or
#                `async block at src/router/forward.rs:121`) matches REGEX
# --layout NAME  the whole layout of the one `async fn` body named NAME
#                (as `router::forward::Flight::finish`): each suspend
#                point's variant with the arguments (`upvar`) and locals it
#                holds; an argument listed both as an upvar and as a local
#                is copied from one to the other when the body starts
#
# rustc prints layouts only with its unstable -Zprint-type-sizes, which the
# stable toolchain accepts when RUSTC_BOOTSTRAP=1 is set. That is for this
# diagnostic build alone, in its own target directory (target/type-sizes,
# release profile without debug info or LTO): the gateway is never built so.
# The first run compiles every dependency (several minutes on two cores);
# later runs recompile the gateway's crate only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

pattern='async block at src/(downstream/(http|dispatch)|router/forward)\.rs|downstream::http::post|downstream::dispatch::handle|router::Router::(request|request_here|traced_or_not|serve|serve_call|forward)$|router::forward::|upstream::transport::http::|upstream::connection::Connection::send_request_direct'
layout=""
while [ $# -gt 0 ]; do
  case "$1" in
    --all) pattern='.' ;;
    --match)
      [ $# -ge 2 ] || { echo "future-sizes: --match needs a REGEX" >&2; exit 64; }
      pattern="$2"; shift ;;
    --layout)
      [ $# -ge 2 ] || { echo "future-sizes: --layout needs a NAME" >&2; exit 64; }
      layout="$2"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "future-sizes: unknown argument $1" >&2; exit 64 ;;
  esac
  shift
done

dir=target/type-sizes
out="$dir/sizes.txt"
mkdir -p "$dir"
# Only the gateway's crate is built again: its layouts are what is printed.
rm -rf "$dir"/release/.fingerprint/mcpmux-*
echo "future-sizes: building the gateway's library with -Zprint-type-sizes" >&2
if ! RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR="$dir" CARGO_PROFILE_RELEASE_DEBUG=0 \
  CARGO_PROFILE_RELEASE_LTO=false \
  cargo rustc --locked --release --lib -- -Zprint-type-sizes > "$out" 2> "$dir/build.log"; then
  tail -n 20 "$dir/build.log" >&2
  echo "future-sizes: the build failed (its log: $dir/build.log)" >&2
  exit 1
fi
grep -q '^print-type-size type: `{async fn body of' "$out" \
  || { echo "future-sizes: rustc printed no layouts (see $dir/build.log)" >&2; exit 1; }

if [ -n "$layout" ]; then
  # The body's own entry: from its type line to the next type's.
  awk -v want="{async fn body of $layout()}" '
    /^print-type-size type: / {
      if (shown) exit
      start = index($0, "`") + 1
      rest = substr($0, start)
      name = substr(rest, 1, index(rest, "`") - 1)
      on = (name == want)
    }
    on { sub(/^print-type-size /, ""); print; shown = 1 }
    END { if (!shown) exit 1 }' "$out" \
    || { echo "future-sizes: no async fn body named $layout" >&2; exit 1; }
  exit 0
fi

echo "bytes  async fn body, or async block at its place in src/"
sed -n -e 's/^print-type-size type: `{async fn body of \(.*\)()}`: \([0-9]*\) bytes.*/\2 \1/p' \
  -e 's/^print-type-size type: `{async block@\(src\/[^ ]*\):[0-9]*: [^}]*}`: \([0-9]*\) bytes.*/\2 async block at \1/p' "$out" \
  | sort -u | sort -k1,1nr \
  | { grep -E "^[0-9]+ .*($pattern)" || true; } \
  | awk '{ size = $1; sub(/^[0-9]+ /, ""); printf "%6d  %s\n", size, $0 }'
