#!/usr/bin/env bash
# Quick start, command 1: installs what kvtier needs, builds it, starts kvtierd
# with its built-in defaults, runs the same long prompt through the decoder
# twice (the first run computes and stores its KV pages, the second restores
# them from the daemon), prints both TTFTs and `kvtierctl stats`, and stops
# the daemon. KVTIER_DEMO_TOKENS sets the prompt length (default 2048).
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh

BIN=build
TOKENS="${KVTIER_DEMO_TOKENS:-2048}"
# The same prompt twice, as two separate client processes: 124M-parameter
# Llama-style model (random weights), fp16 KV pages of 256 tokens.
generate_twice() {
  for run in 1 2; do
    echo "== run $run: kvtier-generate --size=124m --random_prompt_tokens=$TOKENS"
    "$BIN/client/decoder/kvtier-generate" --size=124m --random_prompt_tokens="$TOKENS" \
      --max_new_tokens=8 --print_ids
    echo
  done
}

"$BIN/tools/kvtierctl" stats >/dev/null 2>&1 && {
  echo "demo: a kvtierd is already running on the default socket; using it"
  generate_twice
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
generate_twice
echo "== kvtierctl stats"
"$BIN/tools/kvtierctl" stats
