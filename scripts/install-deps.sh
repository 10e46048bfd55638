#!/usr/bin/env bash
# Installs the Debian packages mpc builds, tests and trains with: the list in
# scripts/deps/debian-packages.txt (one package per line, '#' comments). Idempotent:
# does nothing when everything is already installed. Installs without Recommends, so
# the list must name everything the build finds (scripts/check-deps.sh proves it).
# Where the CUDA toolkit is, it also fetches the pinned cudnn-frontend headers the CUDA
# backend compiles against (scripts/deps/fetch-cudnn-frontend.sh: PyPI, into .deps/).
set -euo pipefail
cd "$(dirname "$0")"

mapfile -t packages < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' deps/debian-packages.txt | awk '{print $1}')

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The toolkit as CMake's FindCUDAToolkit looks for it (CUDA_PATH, nvcc on PATH,
# /usr/local/cuda): where it finds one, the CUDA backend is built and needs the headers.
if [ -x "${CUDA_PATH:-/nonexistent}/bin/nvcc" ] || command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  deps/fetch-cudnn-frontend.sh
fi
