#!/usr/bin/env bash
# Collects what tests/gpu/run.sh needs from a -DKVTIER_CUDA=ON build into one
# small directory (binaries stripped, same relative paths), so a GPU machine
# without compilers, CMake or headers runs them:
#   scripts/gpu_bundle.sh [BUILD_DIR=build-cuda] [OUT_DIR=build-gpu] [--with-libs]
#   BUILD_DIR=build-gpu tests/gpu/run.sh          # on the GPU machine
# OUT_DIR matches /build*/ in .gitignore: hand it to the GPU machine as an
# ignored path to carry. It records the build's absolute path (BUILD_ROOT):
# test binaries start kvtierd from the path they were built with, and run.sh
# links that path to the bundle when it differs.
# Shared libraries are not copied by default; the script lists them in three
# groups: the C/C++ runtime (on every Linux), the CUDA 13 toolkit (cudart,
# cuBLAS: the GPU machine needs them, too large to carry) and Debian packages
# a bare CUDA machine may lack. --with-libs copies that last group into
# OUT_DIR/lib (run.sh puts it on LD_LIBRARY_PATH).
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
WITH_LIBS=0
ARGS=()
for a in "$@"; do
  if [ "$a" = --with-libs ]; then WITH_LIBS=1; else ARGS+=("$a"); fi
done
SRC=${ARGS[0]:-build-cuda}
OUT=${ARGS[1]:-build-gpu}
[ -f "$SRC/CMakeCache.txt" ] || { echo "gpu_bundle: $SRC is not a build directory" >&2; exit 1; }
grep -q '^KVTIER_CUDA:STRING=ON' "$SRC/CMakeCache.txt" ||
  echo "gpu_bundle: warning: $SRC was not configured with -DKVTIER_CUDA=ON" >&2

# Everything run.sh runs, relative to the build directory.
FILES=(
  daemon/kvtierd
  tools/kvtierctl
  tests/gpu/gpu_cuda_device_test
  tests/gpu/gpu_daemon_test
  tests/kernels/kernels_gpu_test
  tests/decoder/decoder_gpu_test
  tools/bench/kvtier-hbm-bench
  kernels/kvtier-kernels-bench
  client/decoder/kvtier-gpu-decoder-bench
  client/decoder/kvtier-generate
)
missing=()
for f in "${FILES[@]}"; do [ -x "$SRC/$f" ] || missing+=("$f"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu_bundle: not built in $SRC: ${missing[*]}" >&2
  echo "  build them: ninja -C $SRC kvtierd kvtierctl gpu_cuda_device_test gpu_daemon_test kernels_gpu_test decoder_gpu_test kvtier-hbm-bench kvtier-kernels-bench kvtier-gpu-decoder-bench kvtier-generate" >&2
  exit 1
fi
if [ "$(cd "$SRC" && pwd)" = "$(mkdir -p "$OUT" && cd "$OUT" && pwd)" ]; then
  echo "gpu_bundle: the output must differ from the build directory" >&2; exit 1
fi
rm -rf "$OUT"
mkdir -p "$OUT"
for f in "${FILES[@]}"; do
  mkdir -p "$OUT/$(dirname "$f")"
  strip -o "$OUT/$f" "$SRC/$f"
done
(cd "$SRC" && pwd) > "$OUT/BUILD_ROOT"
printf '%s\n' "${FILES[@]}" > "$OUT/FILES"

# The shared libraries, by group.
libs=$(for f in "${FILES[@]}"; do ldd "$SRC/$f"; done | awk '$3 ~ /^\// {print $1 " " $3}' | sort -u)
base='^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux.*|libresolv)\.so'
echo "== shared libraries the binaries load"
echo "-- C/C++ runtime (present on any Linux):"
echo "$libs" | awk '{print $1}' | grep -E "$base" | tr '\n' ' '; echo
echo "-- CUDA toolkit (must be on the GPU machine: CUDA 13 runtime + cuBLAS):"
echo "$libs" | grep -E '/cuda' | awk '{print "   " $1 " (" $2 ")"}'
echo "-- Debian packages a bare CUDA machine may lack:"
extra=$(echo "$libs" | grep -vE '/cuda' | grep -vE "$base" || true)
echo "$extra" | while read -r name path; do
  [ -n "$name" ] || continue
  pkg=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -1 | cut -d: -f1 || true)
  printf '   %-40s %6s  %s\n' "$name" "$(du -h "$(readlink -f "$path")" | cut -f1)" "${pkg:-?}"
done
if [ "$WITH_LIBS" = 1 ]; then
  mkdir -p "$OUT/lib"
  echo "$extra" | while read -r name path; do
    [ -n "$name" ] && cp -L "$path" "$OUT/lib/$name"
  done
fi
echo "== bundle $OUT: $(du -sh "$OUT" | cut -f1) (built at $(cat "$OUT/BUILD_ROOT"))"
