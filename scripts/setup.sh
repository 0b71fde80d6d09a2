#!/usr/bin/env bash
# Installs every Debian package kvtier needs (idempotent). The CUDA toolkit is
# expected preinstalled (nvcc on PATH); without it the build uses KVTIER_CUDA=AUTO
# and compiles the CPU paths only.
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"

PKGS=(
  build-essential cmake pkg-config ninja-build
  liburing-dev librocksdb-dev libabsl-dev
  libzmq3-dev cppzmq-dev
  libprotobuf-dev protobuf-compiler
  libxxhash-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libspdlog-dev nlohmann-json3-dev
  libopenblas-dev
  python3 python3-zmq python3-protobuf
  python3-dev pybind11-dev python3-numpy python3-torch python3-pytest
  dpkg-dev file
  clang libclang-rt-14-dev
  fio redis-server libhiredis-dev
  gnuplot-nox
  prometheus curl python3-yaml
  help2man python3-pip python3-venv python3-setuptools python3-wheel
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# redis-server's package may start a system instance; benchmarks start their own
# on a private port, so stop the packaged one to keep 127.0.0.1:6379 free.
# prometheus is here for promtool (scripts/check_monitoring.sh); its own
# server would scrape and listen on :9090, so it is stopped too.
if command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl stop redis-server >/dev/null 2>&1 || true
  $SUDO systemctl stop prometheus >/dev/null 2>&1 || true
fi
echo "setup: done"
