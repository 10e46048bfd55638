#!/usr/bin/env bash
# Installs the Debian packages mpc builds, tests and trains with: the list in
# scripts/deps/debian-packages.txt (one package per line, '#' comments). Idempotent:
# does nothing when everything is already installed. Installs without Recommends, so
# the list must name everything the build finds (scripts/check-deps.sh proves it).
set -euo pipefail
cd "$(dirname "$0")"

mapfile -t packages < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' deps/debian-packages.txt | awk '{print $1}')

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
