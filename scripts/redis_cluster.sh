#!/usr/bin/env bash
# A loopback Redis Cluster for the shared cache's tests and benchmarks: 3
# masters + 3 replicas on free 127.0.0.1 ports, no persistence, each node in
# its own folder under <dir>; the seed list goes to <dir>/seeds.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/redis_cluster.sh start|stop|status <dir>
  start   start 6 redis-server nodes (3 masters, 3 replicas) bound to 127.0.0.1,
          create the cluster, wait until every node reports cluster_state:ok,
          write "host:port,host:port,..." to <dir>/seeds
  stop    kill every node started in <dir> (pid files) and wait for them
  status  print each node's pid, port, role and cluster_state; exit 1 if any is down
Environment:
  REDIS_CLUSTER_NODE_TIMEOUT_MS  cluster-node-timeout (default 1000)
  REDIS_CLUSTER_REPLICA_OBUF_HARD, _SOFT
                                 replica output-buffer limits (default 2gb, 1gb
                                 for 120 s): a resync after a hang must fit
  REDIS_CLUSTER_MAXMEMORY        maxmemory per node, policy allkeys-lru (default 1gb):
                                 the shared cache never deletes records itself, so
                                 a node without it grows until the machine swaps
                                 (an hour's soak reached 3.9 GB per node)
  REDIS_CLUSTER_WAIT_S           how long start waits for cluster_state:ok (default 60)
  REDIS_SERVER, REDIS_CLI        the binaries (default: redis-server, redis-cli on PATH)
EOF
}

NODES=6
NODE_TIMEOUT_MS="${REDIS_CLUSTER_NODE_TIMEOUT_MS:-1000}"
REPLICA_OBUF_HARD="${REDIS_CLUSTER_REPLICA_OBUF_HARD:-2gb}"
REPLICA_OBUF_SOFT="${REDIS_CLUSTER_REPLICA_OBUF_SOFT:-1gb}"
WAIT_S="${REDIS_CLUSTER_WAIT_S:-60}"
MAXMEMORY="${REDIS_CLUSTER_MAXMEMORY:-1gb}"
SERVER="${REDIS_SERVER:-redis-server}"
CLI="${REDIS_CLI:-redis-cli}"

die() { echo "redis_cluster.sh: $*" >&2; exit 1; }

# 2*NODES distinct free ports (client + cluster bus per node), all sockets
# held open together so the kernel never hands out one port twice.
free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Running, not a zombie: daemonized nodes are reaped by whatever pid 1 is,
# which may take its time.
alive() {
  [ -r "/proc/$1/stat" ] && ! awk '{exit ($3 == "Z") ? 0 : 1}' "/proc/$1/stat" 2>/dev/null
}

node_dirs() { ls -d "$1"/node-* 2>/dev/null || true; }

write_conf() {  # dir port bus_port
  cat >"$1/redis.conf" <<EOF
port $2
cluster-port $3
bind 127.0.0.1
protected-mode yes
daemonize yes
dir $1
pidfile $1/redis.pid
logfile $1/redis.log
cluster-enabled yes
cluster-config-file $1/nodes.conf
cluster-node-timeout $NODE_TIMEOUT_MS
cluster-replica-validity-factor 0
cluster-require-full-coverage no
# A master that was hung (SIGSTOP) and comes back as a replica resyncs in
# full; under a replay's write load Redis's default replica output-buffer
# limit (256 MB hard, 64 MB for 60 s) cut that resync four times in a row,
# and each retry re-sent everything (docs/OPERATIONS.md, "Sizing the
# cluster"). Sized to the data a node may hold, with room to spare.
client-output-buffer-limit replica $REPLICA_OBUF_HARD $REPLICA_OBUF_SOFT 120
maxmemory $MAXMEMORY
maxmemory-policy allkeys-lru
save ""
appendonly no
shutdown-on-sigterm nosave now
EOF
}

wait_ping() {  # port
  for _ in $(seq 1 100); do
    [ "$("$CLI" -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.1
  done
  return 1
}

state_of() { "$CLI" -h 127.0.0.1 -p "$1" cluster info 2>/dev/null | tr -d '\r' |
  sed -n 's/^cluster_state://p'; }

wait_all_ok() {  # dir
  local deadline=$(( $(date +%s) + WAIT_S )) d port bad
  while :; do
    bad=""
    for d in $(node_dirs "$1"); do
      port=$(cat "$d/port")
      [ "$(state_of "$port")" = ok ] || bad="$bad $port"
    done
    [ -z "$bad" ] && return 0
    [ "$(date +%s)" -ge "$deadline" ] &&
      die "cluster_state is not ok after ${WAIT_S}s on port(s):$bad (logs: $1/node-*/redis.log)"
    sleep 0.2
  done
}

cmd_start() {
  local dir="$1" ports i port bus d seeds=()
  command -v "$SERVER" >/dev/null || die "$SERVER not found (apt-get install redis-server)"
  for d in $(node_dirs "$dir"); do
    if [ -f "$d/redis.pid" ] && alive "$(cat "$d/redis.pid")"; then
      die "$dir already holds a running cluster (stop it first)"
    fi
  done
  rm -rf "$dir"/node-* "$dir/seeds"  # a stopped cluster's leftovers
  mkdir -p "$dir"
  # A start that fails half-way stops what it started.
  STARTING="$dir"
  trap '[ -z "${STARTING:-}" ] || cmd_stop "$STARTING" >/dev/null 2>&1 || true' EXIT
  # A port found free may be taken by another process before its node binds
  # it (tests start clusters in parallel): then all nodes start again on
  # fresh ports, up to 3 times.
  local attempt why=""
  for attempt in 1 2 3; do
    why=""
    seeds=()
    read -r -a ports <<<"$(free_ports $((2 * NODES)))"
    for i in $(seq 0 $((NODES - 1))); do
      port=${ports[$i]}; bus=${ports[$((i + NODES))]}
      d="$dir/node-$port"; mkdir -p "$d"; echo "$port" >"$d/port"
      write_conf "$d" "$port" "$bus"
      if ! "$SERVER" "$d/redis.conf"; then why="redis-server failed on port $port"; break; fi
      seeds+=("127.0.0.1:$port")
    done
    if [ -z "$why" ]; then
      for d in $(node_dirs "$dir"); do
        port=$(cat "$d/port")
        wait_ping "$port" || { why="node on port $port does not answer"; break; }
      done
    fi
    [ -z "$why" ] && break
    echo "redis_cluster.sh: attempt $attempt: $why: $(tail -n 3 "$d/redis.log" 2>/dev/null | tr '\n' ' ')" >&2
    cmd_stop "$dir" >/dev/null 2>&1 || true
    rm -rf "$dir"/node-*
  done
  [ -z "$why" ] || die "$why after 3 attempts (see the lines above)"
  "$CLI" --cluster create "${seeds[@]}" --cluster-replicas 1 --cluster-yes \
    >"$dir/create.log" 2>&1 ||
    die "redis-cli --cluster create failed (see $dir/create.log)"
  wait_all_ok "$dir"
  (IFS=,; echo "${seeds[*]}") >"$dir/seeds"
  STARTING=""
  echo "redis_cluster.sh: cluster up in $dir, seeds $(cat "$dir/seeds")"
}

cmd_stop() {
  local dir="$1" d pid pids=()
  for d in $(node_dirs "$dir"); do
    [ -f "$d/redis.pid" ] || continue
    pid=$(cat "$d/redis.pid")
    # Only a redis-server we started: the pid file may be stale.
    if alive "$pid" && grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null; then
      kill -CONT "$pid" 2>/dev/null || true  # a test may have stopped it
      kill "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null || true
  done
  echo "redis_cluster.sh: stopped ${#pids[@]} node(s) in $dir"
}

cmd_status() {
  local dir="$1" d port pid down=0 role
  [ -n "$(node_dirs "$dir")" ] || die "no cluster in $dir"
  for d in $(node_dirs "$dir"); do
    port=$(cat "$d/port"); pid=$(cat "$d/redis.pid" 2>/dev/null || echo "-")
    role=$("$CLI" -h 127.0.0.1 -p "$port" role 2>/dev/null | head -1 || true)
    if [ -z "$role" ]; then echo "127.0.0.1:$port pid=$pid down"; down=1; continue; fi
    echo "127.0.0.1:$port pid=$pid role=$role cluster_state=$(state_of "$port")"
  done
  return $down
}

case "${1:-}" in
  -h|--help|help) usage; exit 0 ;;
  start|stop|status)
    [ $# -eq 2 ] || { usage >&2; exit 2; }
    "cmd_$1" "$2" ;;
  *) usage >&2; exit 2 ;;
esac
