#!/usr/bin/env bash
# The one script to run on a GPU machine. It runs PREBUILT binaries from
# $BUILD_DIR (default build-gpu): a -DKVTIER_CUDA=ON build made on a
# development machine and reduced by scripts/gpu_bundle.sh, so the GPU
# machine needs no compiler, CMake or headers (only the CUDA 13 runtime and
# cuBLAS, and the Debian libraries gpu_bundle.sh lists, unless it was run with
# --with-libs). Only when binaries are missing and cmake exists does it build.
# Then: the `gpu` tests (ctest -L gpu where ctest and the build's CTest files
# exist, else the test binaries directly), the CUDA decoder's benchmarks
# (paged decode kernel vs device copy, the seeds' cached vs uncached decode,
# 8B-shape TTFT recompute vs restore from its own kvtierd instances: HBM tier,
# host RAM, NVMe), the HBM/PCIe benchmark, and one report. Sized for about 8
# minutes on one H200. Without a GPU it runs the (skipping) tests and exits 0.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD_DIR:-build-gpu}
start=$(date +%s)
TESTS=(tests/gpu/gpu_cuda_device_test tests/gpu/gpu_daemon_test tests/kernels/kernels_gpu_test
       tests/decoder/decoder_gpu_test)
NEED=(daemon/kvtierd tools/kvtierctl "${TESTS[@]}" tools/bench/kvtier-hbm-bench
      client/decoder/kvtier-gpu-decoder-bench)

missing() { for f in "${NEED[@]}"; do [ -x "$BUILD/$f" ] || echo "$f"; done; }
if [ -n "$(missing)" ]; then
  if ! command -v cmake >/dev/null; then
    echo "== $BUILD lacks $(missing | tr '\n' ' ')and there is no cmake here:"
    echo "   build with -DKVTIER_CUDA=ON elsewhere and run scripts/gpu_bundle.sh BUILD $BUILD"
    exit 1
  fi
  JOBS=${JOBS:-$(nproc)}
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  echo "== no prebuilt binaries: configure + build ($BUILD, KVTIER_CUDA=ON, -j$JOBS)"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_CUDA=ON -DKVTIER_PYTHON=OFF \
    "${launcher[@]}" > /tmp/kvtier-gpu-configure.log 2>&1 || { tail -30 /tmp/kvtier-gpu-configure.log; exit 1; }
  cmake --build "$BUILD" -j"$JOBS" --target kvtierd kvtierctl gpu_cuda_device_test gpu_daemon_test \
    kernels_gpu_test decoder_gpu_test kvtier-hbm-bench kvtier-gpu-decoder-bench \
    > /tmp/kvtier-gpu-build.log 2>&1 || { grep -E "error|FAILED" /tmp/kvtier-gpu-build.log | head -30; exit 1; }
fi
ABS=$(cd "$BUILD" && pwd)
[ -d "$BUILD/lib" ] && export LD_LIBRARY_PATH="$ABS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Test binaries start kvtierd from the absolute path they were built at.
if [ -f "$BUILD/BUILD_ROOT" ]; then
  root=$(cat "$BUILD/BUILD_ROOT")
  if [ "$root" != "$ABS" ] && [ ! -x "$root/daemon/kvtierd" ]; then
    if mkdir -p "$(dirname "$root")" 2>/dev/null && ln -sfn "$ABS" "$root" 2>/dev/null; then
      echo "== linked $root -> $ABS (the tests' built-in kvtierd path)"
    else
      echo "   warning: cannot link $root -> $ABS: the daemon tests will not find kvtierd"
    fi
  fi
fi
for f in "${NEED[@]}"; do
  nf=$(ldd "$BUILD/$f" 2>/dev/null | awk '/not found/ {print $1}' | tr '\n' ' ')
  [ -n "$nf" ] && echo "   $f: missing shared libraries: $nf"
done

LOG="$BUILD/gpu-run"
mkdir -p "$LOG"
gpu="none"
if nvidia-smi -L > /dev/null 2>&1; then
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
fi
echo "== GPU: $gpu"
status=0

echo "== gpu tests"
if command -v ctest >/dev/null && [ -f "$BUILD/CTestTestfile.cmake" ]; then
  # -V keeps each test's output, so GTEST_SKIP lines (which ctest counts as
  # passed) show in the log.
  timeout 420 ctest --test-dir "$BUILD" -L gpu -V > "$LOG/tests.log" 2>&1 || status=1
  tests_summary=$(grep -E "tests passed" "$LOG/tests.log" | tail -1)
else
  : > "$LOG/tests.log"
  pass=0; fail=0
  for t in "${TESTS[@]}"; do
    timeout 200 "$BUILD/$t" > "$LOG/$(basename "$t").log" 2>&1; rc=$?
    line=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test" "$LOG/$(basename "$t").log" | tr '\n' ' ')
    echo "   $(basename "$t"): rc $rc; $line" | tee -a "$LOG/tests.log"
    if [ $rc -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); status=1; fi
  done
  tests_summary="$pass binaries passed, $fail failed (direct runs; logs in $LOG)"
fi
grep -hE "Test +#|tests passed|\[  FAILED  \] [A-Z]|compared|restored from" "$LOG"/*.log 2>/dev/null | sort -u | tail -30
echo "   skipped tests: $(cat "$LOG"/*.log | grep -cE '\[  SKIPPED \] [A-Za-z].*\(' || true)"
if [ "$gpu" = none ]; then
  echo "== no GPU (nvidia-smi -L failed): tests ran and skipped; nothing measured"
  exit 0
fi
if cat "$LOG"/*.log | grep -qE '\[  SKIPPED \] [A-Za-z].*\('; then
  echo "   (tests were skipped on a GPU machine: see $LOG)"; status=1
fi

BENCH="$BUILD/client/decoder/kvtier-gpu-decoder-bench"
echo "== decoder benchmarks: paged decode kernel vs device copy; seeds (124m, 4 + 200 tokens)"
timeout 60 "$BENCH" --mode=kernel 2>&1 | tee "$LOG/kernel.txt" || status=1
timeout 120 "$BENCH" --mode=seeds 2>&1 | tee "$LOG/seeds.txt" || status=1

echo "== TTFT, 8B shapes bf16: recompute vs restore from HBM / host RAM / NVMe; decode at 32k"
KVTIERD="$BUILD/daemon/kvtierd"; CTL="$BUILD/tools/kvtierctl"; TMP="$ABS/gpu-run/daemons"
rm -rf "$TMP"; mkdir -p "$TMP"
# shellcheck source=../../scripts/lib/kvtierd.sh
. scripts/lib/kvtierd.sh
trap kvtier_stop_all EXIT
# Like kvtier_start, but a daemon that does not come up only drops its row.
start_daemon() {
  local name=$1; shift
  "$KVTIERD" --socket="$TMP/$name.sock" --state_dir="$TMP/$name" --log_level=warn "$@" \
    >> "$TMP/$name.log" 2>&1 &
  KVTIER_PIDS+=("$!")
  for _ in $(seq 1200); do
    "$CTL" --endpoint="ipc://$TMP/$name.sock" stats > /dev/null 2>&1 && { endpoints+=("--${name}_endpoint=ipc://$TMP/$name.sock"); return 0; }
    kill -0 "$!" 2>/dev/null || break
    sleep 0.05
  done
  echo "   kvtierd $name did not start: $(tail -3 "$TMP/$name.log" | tr '\n' ' ')"; status=1
}
endpoints=()
start_daemon hbm --hbm_device=cuda --hbm_bytes=8GiB --host_bytes=256MiB --nvme_bytes=0
start_daemon host --hbm_device=none --host_bytes=8GiB --nvme_bytes=0
start_daemon nvme --hbm_device=none --host_bytes=64MiB --nvme_bytes=8GiB --promote_on_get=false
timeout 300 "$BENCH" --mode=ttft --prompt_tokens=8192,32768 --repeats=3 --decode_tokens=64 \
  "${endpoints[@]}" 2>&1 | tee "$LOG/ttft.txt" || status=1
kvtier_stop_all

echo "== kvtier-hbm-bench (daemon vs bare cudaMemcpyAsync)"
timeout 90 "$BUILD/tools/bench/kvtier-hbm-bench" --mib_per_iter=256 --iters=3 > "$LOG/hbm-bench.txt" 2>&1 || status=1
tail -12 "$LOG/hbm-bench.txt"

echo "== report"
echo "GPU: $gpu"
echo "gpu tests: $tests_summary"
grep -hE "^(kernel|seeds|ttft|decode):" "$LOG/kernel.txt" "$LOG/seeds.txt" "$LOG/ttft.txt" 2>/dev/null
echo "HBM/PCIe benchmark: $LOG/hbm-bench.txt ($(grep -c 'below 0.9' "$LOG/hbm-bench.txt" 2>/dev/null || echo 0) rows below the 0.9 target)"
echo "elapsed: $(( $(date +%s) - start )) s; exit $status"
exit $status
