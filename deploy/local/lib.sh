# shellcheck shell=bash
# Shared definitions for deploy/local/{up,down,status,env}. Sourced, never run.
#
# Everything the local stack writes lives under $RD_STATE_DIR (default
# /tmp/rocketdelay-local): pid files, generated configs, data and logs. Jars downloaded
# from Maven Central are cached in deploy/local/.cache, which git ignores.
#
# Ports are deliberately not the standard ones, so the stack never collides with a Redis,
# Postgres or RocketMQ already running on this machine. Each can be overridden.

set -euo pipefail

LOCAL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$LOCAL_DIR/versions.env"

RD_STATE_DIR="${RD_STATE_DIR:-/tmp/rocketdelay-local}"
RD_CACHE_DIR="${RD_CACHE_DIR:-$LOCAL_DIR/.cache}"
RD_NAMESRV_PORT="${RD_NAMESRV_PORT:-19876}"
RD_BROKER_PORT="${RD_BROKER_PORT:-20911}" # the broker also listens on port-2 (fast channel) and port+1 (HA)
RD_REDIS_PORT="${RD_REDIS_PORT:-16379}"
RD_PG_PORT="${RD_PG_PORT:-15432}"
# Optional Redis topologies (deploy/local/up sentinel | redis-cluster): a Sentinel
# deployment (primary, replica, three sentinels) and a three-primary Cluster (each node's
# cluster bus listens on its port + 10000).
RD_SENTINEL_REDIS_PORT="${RD_SENTINEL_REDIS_PORT:-16380}" # the primary; the replica on +1
RD_SENTINEL_PORT="${RD_SENTINEL_PORT:-26380}"             # three sentinels: +0, +1, +2
RD_SENTINEL_MASTER="${RD_SENTINEL_MASTER:-rdprimary}"
RD_CLUSTER_PORT="${RD_CLUSTER_PORT:-17001}" # three primaries: +0, +1, +2
RD_PG_PASSWORD="${RD_PG_PASSWORD:-rocketdelay-local}"
# How long each component may take to become ready before `up` gives up.
RD_READY_TIMEOUT="${RD_READY_TIMEOUT:-120}"

LOG_DIR="$RD_STATE_DIR/logs"
PID_DIR="$RD_STATE_DIR/pids"
ROCKETMQ_LIB="$RD_CACHE_DIR/rocketmq-$ROCKETMQ_VERSION/lib"
ROCKETMQ_HOME_DIR="$RD_STATE_DIR/rocketmq"
PG_DATA="$RD_STATE_DIR/postgres/data"
PG_SOCKET_DIR="$RD_STATE_DIR/postgres/socket"

# Delay level profiles. They must match the scheduler's `levels` setting.
LEVELS_default="1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
LEVELS_test="1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 15s 20s 30s"
# The broker's timer messages (RocketMQ 5, scheduler.mode timer): the longest delay of one
# timer message per profile; the test profile's is short so multi-timer-hop delays take
# seconds. RD_TIMER_WHEEL=false starts a broker without timers.
TIMER_MAX_SEC_default=259200
TIMER_MAX_SEC_test=20
TIMER_MAX_SEC_custom=259200

# JVM flags RocketMQ needs on JDK 17, and small heaps for a one-machine stack.
JAVA_OPENS=(--add-opens java.base/jdk.internal.ref=ALL-UNNAMED --add-opens java.base/java.nio=ALL-UNNAMED
  --add-opens java.base/java.util=ALL-UNNAMED --add-exports java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED)

say() { printf '[local] %s\n' "$*" >&2; }
die() { printf '[local] ERROR: %s\n' "$*" >&2; exit 1; }

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1; }

namesrv_addr() { echo "127.0.0.1:$RD_NAMESRV_PORT"; }
redis_url() { echo "redis://127.0.0.1:$RD_REDIS_PORT/0"; }
postgres_url() { echo "postgres://rocketdelay:$RD_PG_PASSWORD@127.0.0.1:$RD_PG_PORT/rocketdelay?sslmode=disable"; }

# pid_alive NAME: true when the pid recorded for NAME is a live process that is ours
# (its command line mentions our state directory or our port), so a recycled pid is
# never mistaken for one of our servers.
pid_alive() {
  local name="$1" pid
  pid="$(pid_of "$name")" || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$(pid_marker "$name")"
}

# running NAME: the process just started for NAME (cmd &, its pid recorded) has not ended:
# it exists and is not a zombie. Used while waiting for a server that up started itself,
# where pid_alive's command-line check can be wrong: until the forked shell's exec
# (which a loaded machine can delay) /proc shows up's own command line, and during each
# exec (setsid, nohup, java) it is briefly empty.
running() {
  local pid state
  pid="$(pid_of "$1")" || return 1
  state="$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null)" || return 1
  state="${state%% *}"
  [[ -n $state && $state != Z && $state != X ]]
}

pid_of() {
  local name="$1" file
  case "$name" in
    postgres) file="$PG_DATA/postmaster.pid" ;;
    *) file="$PID_DIR/$name.pid" ;;
  esac
  [[ -s "$file" ]] || return 1
  head -n1 "$file"
}

pid_marker() {
  case "$1" in
    namesrv) echo "$ROCKETMQ_HOME_DIR/namesrv.conf" ;;
    broker) echo "$ROCKETMQ_HOME_DIR/broker.conf" ;;
    redis) echo ":$RD_REDIS_PORT" ;;
    postgres) echo "$PG_DATA" ;;
    *) echo ":$(port_of "$1")" ;; # the topologies' processes
  esac
}

# The processes of the optional topologies, and their ports.
SENTINEL_PROCS=(sentinel-primary sentinel-replica sentinel-0 sentinel-1 sentinel-2)
CLUSTER_PROCS=(cluster-0 cluster-1 cluster-2)
port_of() {
  case "$1" in
    sentinel-primary) echo "$RD_SENTINEL_REDIS_PORT" ;;
    sentinel-replica) echo $((RD_SENTINEL_REDIS_PORT + 1)) ;;
    sentinel-[0-9]) echo $((RD_SENTINEL_PORT + ${1#sentinel-})) ;;
    cluster-[0-9]) echo $((RD_CLUSTER_PORT + ${1#cluster-})) ;;
  esac
}
sentinel_addrs() { echo "127.0.0.1:$RD_SENTINEL_PORT,127.0.0.1:$((RD_SENTINEL_PORT + 1)),127.0.0.1:$((RD_SENTINEL_PORT + 2))"; }
cluster_addrs() { echo "127.0.0.1:$RD_CLUSTER_PORT,127.0.0.1:$((RD_CLUSTER_PORT + 1)),127.0.0.1:$((RD_CLUSTER_PORT + 2))"; }

log_of() {
  echo "$LOG_DIR/$1.log"
}

# port_in_use PORT: a live process holds PORT, so a server could not bind it: a listener,
# or a connection whose local port it is (how a client's ephemeral port blocks a bind).
# The closing states are left out: they are what a killed server leaves behind, and they
# do not stop the servers here, which bind with SO_REUSEADDR.
port_in_use() {
  ss -Htan state listening state established state syn-sent state close-wait "sport = :$1" 2>/dev/null | grep -q .
}

# mqadmin ARGS...: RocketMQ's admin tool from the cached jars.
mqadmin() {
  ROCKETMQ_HOME="$ROCKETMQ_HOME_DIR" java -Xms64m -Xmx128m "${JAVA_OPENS[@]}" \
    -Duser.home="$ROCKETMQ_HOME_DIR/admin" -Drocketmq.home.dir="$ROCKETMQ_HOME_DIR" \
    -cp "$ROCKETMQ_LIB/*" org.apache.rocketmq.tools.command.MQAdminStartup "$@" 2>&1
}
