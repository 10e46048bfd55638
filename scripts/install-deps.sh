#!/usr/bin/env bash
# Installs the Debian packages mpc builds, tests and trains with. Idempotent: does
# nothing when everything is already installed.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libprotobuf-dev protobuf-compiler libabsl-dev libgtest-dev libgmock-dev
  libonnx-dev libdnnl-dev zlib1g-dev
  dataset-fashion-mnist
  python3-numpy python3-onnx python3-torch python3-torchvision
  fortunes
)

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
