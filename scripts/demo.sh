#!/usr/bin/env bash
# Quick start, command 1: installs what kvtier needs, builds it, starts kvtierd
# with its built-in defaults, runs the demo client (store a prompt's pages,
# read them back byte-exact), prints `kvtierctl stats`, and stops the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh

BIN=build
"$BIN/tools/kvtierctl" stats >/dev/null 2>&1 && {
  echo "demo: a kvtierd is already running on the default socket; using it"
  "$BIN/tools/kvtier-demo"
  "$BIN/tools/kvtierctl" stats
  exit 0
}

LOG="$(mktemp -t kvtierd.XXXXXX.log)"
"$BIN/daemon/kvtierd" >"$LOG" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  "$BIN/tools/kvtierctl" stats >/dev/null 2>&1 && break
  kill -0 $PID 2>/dev/null || { cat "$LOG"; echo "demo: kvtierd failed to start"; exit 1; }
  sleep 0.1
done
echo "== kvtierd started (pid $PID, log $LOG)"
echo "== first request stores the prompt's pages, the second finds and reads them back"
"$BIN/tools/kvtier-demo"
echo
echo "== kvtierctl stats"
"$BIN/tools/kvtierctl" stats
