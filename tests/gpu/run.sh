#!/usr/bin/env bash
# The one script to run on a GPU machine: builds with -DKVTIER_CUDA=ON into
# build-gpu, runs the `gpu` tests (CUDA device, CUDA IPC between processes,
# the daemon's GPU data path), the kernels' GPU tests when present, and the
# HBM/PCIe benchmark (kvtier-hbm-bench), then prints a short report. Sized to
# finish in under 8 minutes on one H200. Without a GPU it builds, says so and
# exits 0.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
start=$(date +%s)

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
echo "== configure + build ($BUILD, KVTIER_CUDA=ON, -j$JOBS)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_CUDA=ON "${launcher[@]}" \
  > /tmp/kvtier-gpu-configure.log 2>&1 || { tail -30 /tmp/kvtier-gpu-configure.log; exit 1; }
# What this script needs must build; the rest (the kernels' gpu tests among
# it) is built keep-going, so one broken unrelated target does not stop the run.
cmake --build "$BUILD" -j"$JOBS" --target kvtierd kvtierctl gpu_cuda_device_test \
  gpu_daemon_test kvtier-hbm-bench > /tmp/kvtier-gpu-build.log 2>&1 \
  || { grep -E "error|FAILED" /tmp/kvtier-gpu-build.log | head -30; exit 1; }
cmake --build "$BUILD" -j"$JOBS" -- -k 0 >> /tmp/kvtier-gpu-build.log 2>&1 \
  || echo "   note: some other targets failed to build (/tmp/kvtier-gpu-build.log); continuing"

if ! nvidia-smi -L > /dev/null 2>&1; then
  echo "== no GPU on this machine (nvidia-smi -L failed): built with CUDA, nothing run on hardware"
  ctest --test-dir "$BUILD" -L gpu --output-on-failure 2>&1 | tail -5
  exit 0
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
echo "== GPU: $gpu"

status=0
echo "== ctest -L gpu"
timeout 300 ctest --test-dir "$BUILD" -L gpu --output-on-failure > "$BUILD/gpu-ctest.log" 2>&1 \
  || status=1
grep -E "tests passed|tests failed|Test +#|Failed|SKIPPED|Skipped" "$BUILD/gpu-ctest.log" | tail -20
if grep -q "Skipped" "$BUILD/gpu-ctest.log"; then
  echo "   (tests were skipped on a GPU machine: see $BUILD/gpu-ctest.log)"; status=1
fi

bench=$BUILD/tools/bench/kvtier-hbm-bench
echo "== kvtier-hbm-bench (daemon vs bare cudaMemcpyAsync)"
timeout 240 "$bench" --mib_per_iter=256 --iters=5 | tee "$BUILD/hbm-bench.txt" || status=1

for k in "$BUILD"/kernels/bench/kvtier-kernels-bench "$BUILD"/kernels/kvtier-kernels-bench; do
  if [ -x "$k" ]; then
    echo "== kernels benchmark ($k)"
    timeout 120 "$k" 2>&1 | tail -25 || status=1
    break
  fi
done

echo "== report"
echo "GPU: $gpu"
echo "gpu tests: $(grep -E 'tests passed' "$BUILD/gpu-ctest.log" | tail -1)"
echo "HBM/PCIe benchmark: $BUILD/hbm-bench.txt ($(grep -c 'below 0.9' "$BUILD/hbm-bench.txt" 2>/dev/null || echo 0) rows below the 0.9 target)"
echo "elapsed: $(( $(date +%s) - start )) s; exit $status"
exit $status
