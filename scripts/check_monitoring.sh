#!/usr/bin/env bash
# Checks the monitoring kit against a live daemon: starts a private kvtierd on
# loopback (host + NVMe tiers, two tenants, one with a quota, a shared cache on
# a loopback Redis Cluster, /metrics on a free 127.0.0.1 port), replays a short
# synthetic trace through it with kvtier-stress (LOOKUP/GET/PUT), fetches
# /metrics with curl and checks:
#   1. `promtool check metrics` on the scrape (names, types, units);
#   2. `promtool check rules` on packaging/monitoring/kvtier-alerts.yml, and on
#      the dashboard's expressions turned into recording rules (PromQL syntax);
#      `promtool test rules` on its unit tests (kvtier-alerts.test.yml);
#   3. every metric name the alert rules and the Grafana dashboard query has
#      samples in the scrape (scripts/lib/promql_names.py);
# then stops the daemon (SIGTERM, exit 0) and the cluster.
# Exit 0: all passed; 1: a check failed; 77: skipped (promtool, curl,
# redis-server or python3-yaml missing: scripts/setup.sh installs them).
#   BUILD_DIR=build bash scripts/check_monitoring.sh
set -euo pipefail
# shellcheck source=lib/usage.sh
. "$(dirname "$0")/lib/usage.sh"
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
KVTIERD="${KVTIERD:-$BUILD_DIR/daemon/kvtierd}"
CTL="${CTL:-$BUILD_DIR/tools/kvtierctl}"
STRESS="${STRESS:-$BUILD_DIR/tools/stress/kvtier-stress}"
PY=/usr/bin/python3
MON=packaging/monitoring

skip() { echo "check_monitoring: SKIP: $*"; exit 77; }
command -v promtool >/dev/null || skip "promtool is not installed (Debian package prometheus)"
command -v curl >/dev/null || skip "curl is not installed"
command -v redis-server >/dev/null || skip "redis-server is not installed (the shared cache's metrics)"
"$PY" -c 'import yaml' 2>/dev/null || skip "python3-yaml is not installed"
for b in "$KVTIERD" "$CTL" "$STRESS"; do
  [ -x "$b" ] || { echo "check_monitoring: $b is not built" >&2; exit 1; }
done

TMP=$(mktemp -d /tmp/kvtier-mon-XXXXXX)
cleanup() {
  kvtier_stop_all
  bash scripts/redis_cluster.sh stop "$TMP/cluster" >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
# shellcheck source=lib/kvtierd.sh
source scripts/lib/kvtierd.sh
trap cleanup EXIT
fail() { echo "check_monitoring: FAIL: $*" >&2; exit 1; }

echo "== shared cache: a loopback Redis Cluster"
bash scripts/redis_cluster.sh start "$TMP/cluster" >"$TMP/cluster.log" 2>&1 ||
  { cat "$TMP/cluster.log" >&2; fail "the Redis Cluster did not start"; }
head -c32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/secret"
echo >>"$TMP/secret"
chmod 600 "$TMP/secret"
cat >"$TMP/tenants.json" <<'EOF'
{"tenants": [
  {"name": "ops", "token": "ops-secret-1", "admin": true},
  {"name": "team-a", "token": "team-a-secret", "quota": {"host": "8MiB"}}
]}
EOF
chmod 600 "$TMP/tenants.json"

echo "== kvtierd: host + NVMe tiers, shared cache, /metrics on 127.0.0.1 (any free port)"
export KVTIER_TENANT=ops KVTIER_TOKEN=ops-secret-1  # kvtierctl, in kvtier_start too
kvtier_start mon --tenants_file="$TMP/tenants.json" --host_bytes=32MiB --host_slab_bytes=1MiB \
  --hugepages=off --nvme_bytes=128MiB --nvme_dir="$TMP/nvme" \
  --remote_seeds="$(cat "$TMP/cluster/seeds")" --remote_secret_file="$TMP/secret" \
  --metrics_port=-1 --log_level=info
EP="ipc://$TMP/mon.sock"
PORT=$("$CTL" --endpoint="$EP" stats --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["daemon"]["metrics_port"])')
[ "$PORT" -gt 0 ] || fail "STATS reports no metrics port"
echo "   metrics on http://127.0.0.1:$PORT/metrics"

echo "== traffic: a short synthetic trace for each tenant (LOOKUP, GET, PUT)"
for t in ops:ops-secret-1 team-a:team-a-secret; do
  "$STRESS" --trace=synthetic:requests=40,seed=7 --endpoint="$EP" --tenant="${t%%:*}" \
    --token="${t#*:}" --page_bytes=256KiB --progress=off >"$TMP/stress-${t%%:*}.log" 2>&1 ||
    { cat "$TMP/stress-${t%%:*}.log" >&2; fail "kvtier-stress failed for ${t%%:*}"; }
done
grep -E "hit rate|requests/s" "$TMP/stress-ops.log" | head -n 3 | sed 's/^/   /' || true

echo "== scrape"
curl -sf --max-time 10 "http://127.0.0.1:$PORT/metrics" -o "$TMP/metrics.txt" ||
  fail "curl could not fetch /metrics"
echo "   $(grep -vc '^#' "$TMP/metrics.txt") samples, $(grep -c '^# TYPE' "$TMP/metrics.txt") families"

echo "== promtool check metrics"
promtool check metrics <"$TMP/metrics.txt" || fail "promtool check metrics objects (above)"

echo "== promtool check rules: the alert rules and the dashboard's expressions"
promtool check rules "$MON/kvtier-alerts.yml" || fail "promtool check rules objects to $MON/kvtier-alerts.yml"
promtool test rules "$MON/kvtier-alerts.test.yml" || fail "the alert rules' unit tests failed"
"$PY" scripts/lib/promql_names.py dashboard-rules "$MON/grafana-kvtier.json" "$TMP/dashboard-rules.yml"
promtool check rules "$TMP/dashboard-rules.yml" >"$TMP/dashboard-check.log" 2>&1 ||
  { cat "$TMP/dashboard-check.log" >&2; fail "a dashboard expression is not valid PromQL"; }
tail -n 2 "$TMP/dashboard-check.log" | sed 's/^/   dashboard: /'

echo "== every metric queried exists on /metrics"
"$PY" scripts/lib/promql_names.py check "$TMP/metrics.txt" "$MON/kvtier-alerts.yml" \
  "$MON/grafana-kvtier.json" >"$TMP/names.log" || { cat "$TMP/names.log" >&2; fail "metric names missing"; }
tail -n 1 "$TMP/names.log" | sed 's/^/   /'

echo "== stop"
kill -TERM "$KVTIER_LAST_PID"
rc=0
wait "$KVTIER_LAST_PID" || rc=$?
KVTIER_PIDS=()
[ "$rc" -eq 0 ] || { cat "$TMP/mon.log" >&2; fail "kvtierd exited $rc on SIGTERM"; }
echo "check_monitoring: all checks passed"
