#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the third-party MCP
# peers the tests run against, then checks formatting and lints, then runs
# every test (unit and integration).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup-interop.sh
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --all-targets --locked
