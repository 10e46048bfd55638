#!/usr/bin/env bash
# Puts the pinned cudnn-frontend headers (scripts/deps/cudnn-frontend.txt) into
# .deps/cudnn-frontend/include (gitignored), where backends/cuda/CMakeLists.txt finds them.
# They are a build-time dependency of the CUDA backend only, so scripts/install-deps.sh
# calls this only where the CUDA toolkit is. Idempotent: nothing happens when the pinned
# version is already there (.deps/cudnn-frontend/VERSION). The wheel comes from PyPI
# through pip, hash-checked; only its headers and licence files are kept.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
req=$root/scripts/deps/cudnn-frontend.txt
dest=$root/.deps/cudnn-frontend
version=$(sed -n 's/^nvidia-cudnn-frontend==\([0-9.]*\).*/\1/p' "$req")
[ -n "$version" ] || { echo "fetch-cudnn-frontend: no 'nvidia-cudnn-frontend==X.Y.Z' line in $req" >&2; exit 1; }
if [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ] && [ -f "$dest/include/cudnn_frontend.h" ]; then
  exit 0
fi

# Any interpreter with pip will do: the wheel is chosen by the flags below, not by it.
py=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -m pip --version >/dev/null 2>&1; then py=$candidate; break; fi
done
[ -n "$py" ] || { echo "fetch-cudnn-frontend: no python3 with pip found (apt-get install python3-pip)" >&2; exit 1; }

echo "fetch-cudnn-frontend: fetching nvidia-cudnn-frontend $version headers into ${dest#"$root"/}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The wheel tags are fixed so that the hash in $req matches on every machine.
if ! "$py" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
     --platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp --abi cp311 \
     --require-hashes -r "$req" -d "$tmp/wheel"; then
  echo "fetch-cudnn-frontend: pip could not download the pinned wheel (is PyPI reachable?);" \
       "the CUDA backend cannot be configured without these headers" >&2
  exit 1
fi
"$py" - "$tmp/wheel" "$tmp/out" <<'PY'
# Unpacks include/*.h, *.hpp and the licence files; refuses paths that leave the folder.
import glob, os, sys, zipfile
wheel_dir, out = sys.argv[1], sys.argv[2]
wheels = glob.glob(os.path.join(wheel_dir, "*.whl"))
if len(wheels) != 1:
    sys.exit(f"fetch-cudnn-frontend: expected one wheel, found {wheels}")
with zipfile.ZipFile(wheels[0]) as z:
    for name in z.namelist():
        parts = name.split("/")
        if name.startswith("/") or ".." in parts or name.endswith("/"):
            continue
        if parts[0] == "include" and (name.endswith((".h", ".hpp")) or "LICENSE" in parts[-1]):
            target = os.path.join(out, name)
        elif ".dist-info" in parts[0] and len(parts) == 3 and parts[1] == "licenses":
            target = os.path.join(out, "licenses", parts[2])
        else:
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(name) as src, open(target, "wb") as dst:
            dst.write(src.read())
if not os.path.isfile(os.path.join(out, "include", "cudnn_frontend.h")):
    sys.exit("fetch-cudnn-frontend: the wheel has no include/cudnn_frontend.h")
PY
echo "$version" > "$tmp/out/VERSION"
# Replace the folder in one step, so an interrupted run never leaves half a tree.
mkdir -p "$root/.deps"
rm -rf "$dest.old"
[ -d "$dest" ] && mv "$dest" "$dest.old"
mv "$tmp/out" "$dest"
rm -rf "$dest.old"
