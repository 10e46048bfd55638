#!/usr/bin/env bash
# Builds what the H100 machine runs and packs it under .device/ (gitignored), so a session
# that is lent a GPU spends its device minutes running, not building. The device machine
# has the CUDA toolkit, a driver and PyTorch, but not protobuf, abseil, ONNX or oneDNN
# (docs/gpu.md), so the bundle carries those shared libraries beside the stripped
# binaries; the CUDA libraries (cudart, cuBLASLt, cuDNN) are the device's own. The
# cudnn-frontend headers (fused attention) are compiled into the binaries here, so nothing
# of them travels; they are fetched here first (idempotent) for a fresh build directory.
#
#   scripts/gpu/make_bundle.sh          # build-gpu/ (Release, sm_90) -> .device/
#   then, with the device tool:  run(command="bash scripts/gpu/verify.sh all", carry=[".device"])
#
# What travels must stay under the device tool's 64 MiB: binaries and libraries go in one
# xz tarball (oneDNN alone is 40 MB uncompressed), the Fashion-MNIST files (already gzip)
# beside it.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${MPC_GPU_BUILD_DIR:-build-gpu}

scripts/deps/fetch-cudnn-frontend.sh  # the headers the CUDA backend compiles against (above)
# An existing build directory is used as configured (MPC_GPU_BUILD_DIR=build reuses the
# development build); a new one is configured for release.
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DMPC_ASAN_TEST=OFF >/dev/null
fi
ninja -C "$build" -t targets all | grep -q '^mpc_gpu_tests:' ||
  { echo "make_bundle: $build has no CUDA targets (configured without the CUDA toolkit?)" >&2; exit 1; }
targets=(mpc mpc-train mpc_gpu_tests)
if ninja -C "$build" -t targets all | grep -q '^cublaslt_matmul_rate:'; then targets+=(cublaslt_matmul_rate); fi
if ninja -C "$build" -t targets all | grep -q '^dnnl_matmul_rate:'; then targets+=(dnnl_matmul_rate); fi
ninja -C "$build" -j2 "${targets[@]}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for t in "${targets[@]}"; do
  f=$(find "$build" -maxdepth 3 -type f -name "$t" -perm -u+x | head -1)
  [ -n "$f" ] || { echo "make_bundle: built target $t not found under $build" >&2; exit 1; }
  strip -o "$stage/bin/$t" "$f"
done
# Every shared library the binaries need except the C runtime and CUDA's own.
for b in "$stage"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) continue ;;
    # libOpenCL (the ICD loader oneDNN links) travels: the device image need not have it.
    libcuda*|libcublas*|libcudnn*|libnvrtc*|libnccl*) continue ;;
  esac
  cp -L "$lib" "$stage/lib/"
done
# libstdc++ goes along in a side folder: verify.sh uses it only if the device's is older.
mkdir -p "$stage/lib-stdcxx"
cp -L "$(g++ -print-file-name=libstdc++.so.6)" "$stage/lib-stdcxx/"
git rev-parse HEAD > "$stage/COMMIT"
date -u +%FT%TZ > "$stage/BUILT"

mkdir -p .device/data
rm -f .device/bundle.tar.xz
tar -C "$stage" -cJf .device/bundle.tar.xz .
cp -u /usr/share/datasets/fashion-mnist/*.gz .device/data/
grep -qx '/.device/' .gitignore || echo '/.device/' >> .gitignore
du -sh .device .device/* | sed 's/^/make_bundle: /'
total=$(du -sb .device | cut -f1)
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
echo "make_bundle: .device + tracked files = $(( (total + tree) / 1048576 )) MiB (limit 64)"
