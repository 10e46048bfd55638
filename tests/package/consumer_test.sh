#!/usr/bin/env bash
# The installed CMake package, as a consumer sees it (ctest label "package";
# docs/embedding.md). Installs this build into a fresh prefix, checks what was installed
# (only public headers; a config with no build paths and no compile flags or definitions
# forced on consumers), moves the prefix elsewhere (relocation: nothing may point back at
# the first location), then configures examples/train_in_process against the moved prefix
# with the build's own generator and compiler, builds it with -Wall -Wextra -Werror and
# runs it, then does the same with examples/inference_service (its `check`: 8 concurrent
# clients, answers compared with the installed `mpc run`'s on the model train_in_process
# exported), once per library variant (static, shared).
#
#   consumer_test.sh CMAKE GENERATOR MAKE_PROGRAM CXX_COMPILER SOURCE_DIR BUILD_DIR SPEC [VARIANT...]
#
# Works in <BUILD_DIR>/package_test (removed when the test passes, kept for a look when
# it fails).
set -euo pipefail
cmake=$1 generator=$2 make_program=$3 cxx=$4 source_dir=$5 build_dir=$6 spec=$7
shift 7
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(static shared)

work=$build_dir/package_test
fail() { echo "consumer_test: FAILED: $*" >&2; exit 1; }
step() { echo "== $* ($(date +%T))"; }

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
moved=$work/moved-prefix

step "cmake --install $build_dir --prefix $prefix"
"$cmake" --install "$build_dir" --prefix "$prefix" > "$work/install.log" || { cat "$work/install.log"; fail "install"; }

step "checking the installed tree"
# Headers: mpc.h alone, and it includes only the standard library and abseil.
headers=$(cd "$prefix/include" && find . -type f -o -type l | sort)
[ "$headers" = "./mpc/mpc.h" ] || fail "installed headers are not just mpc/mpc.h: $headers"
if grep -E '^#include "' "$prefix/include/mpc/mpc.h" | grep -v '"absl/'; then
  fail "mpc.h includes a header that is not installed"
fi
package=$prefix/lib/cmake/mpc
for f in mpcConfig.cmake mpcConfigVersion.cmake mpcTargets.cmake; do
  [ -f "$package/$f" ] || fail "$package/$f was not installed"
done
# Relocatable: no path of the source tree, the build tree or the prefix in the package.
for dir in "$source_dir" "$build_dir" "$prefix"; do
  if grep -rnF "$dir" "$package"; then fail "the package names $dir"; fi
done
# No flags or definitions forced on consumers' compiles.
if grep -nE 'INTERFACE_COMPILE_(OPTIONS|DEFINITIONS)' "$package"/mpcTargets*.cmake; then
  fail "an exported target sets compile options or definitions for its consumers"
fi
grep -q 'add_library(mpc::mpc_static STATIC IMPORTED)' "$package/mpcTargets.cmake" || fail "no mpc::mpc_static"
grep -q 'add_library(mpc::mpc_shared SHARED IMPORTED)' "$package/mpcTargets.cmake" || fail "no mpc::mpc_shared"

step "moving the prefix to $moved"
mv "$prefix" "$moved"

for variant in "${variants[@]}"; do
  case $variant in
    static) use_static=ON ;;
    shared) use_static=OFF ;;
    *) fail "unknown variant $variant" ;;
  esac
  consumer=$work/consumer-$variant
  step "$variant: configuring examples/train_in_process against the moved prefix"
  "$cmake" -S "$source_dir/examples/train_in_process" -B "$consumer" -G "$generator" \
    -DCMAKE_MAKE_PROGRAM="$make_program" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror" -DCMAKE_PREFIX_PATH="$moved" -DMPC_USE_STATIC=$use_static \
    > "$consumer.configure.log" 2>&1 || { cat "$consumer.configure.log"; fail "$variant: configure"; }
  step "$variant: building"
  "$cmake" --build "$consumer" > "$consumer.build.log" 2>&1 || { cat "$consumer.build.log"; fail "$variant: build"; }
  exe=$consumer/train_in_process
  # The variant asked for is the one linked, from the moved prefix.
  libmpc=$(ldd "$exe" | grep -F 'libmpc.so' || true)
  if [ $variant = static ]; then
    [ -z "$libmpc" ] || fail "static: the program loads $libmpc"
  else
    case $libmpc in *"$moved/lib/libmpc.so"*) ;; *) fail "shared: the program loads '$libmpc', not the moved prefix's libmpc.so" ;; esac
  fi
  step "$variant: running"
  "$exe" "$spec" "$work/run-$variant" 20 || fail "$variant: train_in_process exited with $?"

  # examples/inference_service on the model train_in_process just trained and exported:
  # 8 concurrent clients on its socket (and its stdin loop), every answer checked bit for
  # bit against the installed `mpc run` on the same inputs.
  service=$work/service-$variant
  step "$variant: configuring examples/inference_service against the moved prefix"
  "$cmake" -S "$source_dir/examples/inference_service" -B "$service" -G "$generator" \
    -DCMAKE_MAKE_PROGRAM="$make_program" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror" -DCMAKE_PREFIX_PATH="$moved" -DMPC_USE_STATIC=$use_static \
    > "$service.configure.log" 2>&1 || { cat "$service.configure.log"; fail "$variant: inference_service configure"; }
  step "$variant: building inference_service"
  "$cmake" --build "$service" > "$service.build.log" 2>&1 || { cat "$service.build.log"; fail "$variant: inference_service build"; }
  step "$variant: inference_service check (8 clients against mpc run)"
  "$service/inference_service" check "$work/run-$variant/trained.onnx" "$moved/bin/mpc" "$service/check" \
    --clients 8 --requests 40 --threads 8 || fail "$variant: inference_service check exited with $?"
done

rm -rf "$work"
echo "consumer_test: OK (${variants[*]})"
