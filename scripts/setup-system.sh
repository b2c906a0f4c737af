#!/usr/bin/env bash
# Installs the Debian packages the integration tests run real parts of:
# HAProxy and Redis (the multi-replica tests) and Chromium (the operator
# page's browser test); and the DejaVu font the soak report's plots draw their
# text with. Needs root (CI runs as root); idempotent: when every program is
# already on PATH and every file in place it installs nothing.
set -euo pipefail

# program on PATH -> Debian package that provides it
declare -A wanted=(
  [haproxy]=haproxy
  [redis-server]=redis-server
  [chromium]=chromium
)

# file -> Debian package that provides it
declare -A wanted_files=(
  [/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf]=fonts-dejavu-core
)

missing=()
for program in "${!wanted[@]}"; do
  command -v "$program" >/dev/null 2>&1 || missing+=("${wanted[$program]}")
done
for file in "${!wanted_files[@]}"; do
  [ -f "$file" ] || missing+=("${wanted_files[$file]}")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup-system: ready (haproxy, redis-server, chromium, fonts-dejavu-core)"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "setup-system: missing ${missing[*]}; run this script as root (apt-get install)" >&2
  exit 1
fi
echo "setup-system: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts redis-server and haproxy as services on install; the tests
# start their own on port 0, so stop the packaged ones if an init system ran them.
for service in redis-server haproxy; do
  if command -v service >/dev/null 2>&1; then service "$service" stop >/dev/null 2>&1 || true; fi
done
echo "setup-system: ready (haproxy, redis-server, chromium, fonts-dejavu-core)"
