#!/usr/bin/env bash
# A local cluster of ringlog nodes on loopback: every node is broker and controller (Kafka's
# combined mode), the nodes form one metadata quorum (`controller.quorum.voters`), and each
# has its own data directory, formatted once with one cluster id.
#
#   scripts/cluster.sh start [--nodes N] [--cores C] [--set K=V]...
#                                                      N nodes (default 3), C shards each (1),
#                                                      every node with the settings given
#   scripts/cluster.sh stop                            SIGTERM every node
#   scripts/cluster.sh status                          each node's pid and the controller
#   scripts/cluster.sh kill N                          SIGKILL node N
#   scripts/cluster.sh restart N                       start node N again (stopped or killed);
#                                                      returns once it serves
#
# Clients connect to 127.0.0.1:9092 (node 2: 9093, node 3: 9094, ...); controllers listen on
# 19093, 19094, ... Node N's data is in $CLUSTER_DIR/node-N/data and its log in
# $CLUSTER_DIR/node-N/node.log. A second `start` reuses the formatted directories.
#
# Environment: CLUSTER_DIR (default ./data-cluster), RINGLOG (the binary, default
# ${CARGO_TARGET_DIR:-target}/release/ringlog, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

cluster_dir=${CLUSTER_DIR:-$PWD/data-cluster}
ringlog=${RINGLOG:-${CARGO_TARGET_DIR:-$PWD/target}/release/ringlog}
client_port=9092
controller_port=19093

usage() { sed -n '2,15p' "$0"; exit 2; }

nodes_of() { # the node directories that exist, in order
    find "$cluster_dir" -maxdepth 1 -name 'node-*' -type d 2>/dev/null | sort -V
}

# Starts node $1 in the background with the settings `start` saved, appending to its log.
launch() {
    local id=$1 dir="$cluster_dir/node-$1"
    # shellcheck source=/dev/null
    . "$cluster_dir/settings"
    : >>"$dir/node.log"
    local setting sets=()
    for setting in $extra; do sets+=(--set "$setting"); done
    # The nodes share the machine's CPUs: pinned, every node's shard 0 would take the same one.
    "$ringlog" serve --cores "$cores" --overprovisioned "${sets[@]}" \
        --set "node.id=$id" \
        --set "log.dirs=$dir/data" \
        --set "listeners=PLAINTEXT://127.0.0.1:$((client_port + id - 1))" \
        --set "controller.quorum.voters=$voters" \
        >>"$dir/node.log" 2>&1 &
    echo $! >"$dir/pid"
}

# Waits until node $1 logs that it serves, after line $2 of its log.
wait_ready() {
    local id=$1 after=$2 dir="$cluster_dir/node-$1" waited=0
    until tail -n "+$((after + 1))" "$dir/node.log" | grep -q ' ready '; do
        if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
            echo "node $id exited; its log:" >&2
            tail -20 "$dir/node.log" >&2
            exit 1
        fi
        sleep 0.2
        waited=$((waited + 1))
        [ "$waited" -lt 600 ] || { echo "node $id not ready in 120 s" >&2; exit 1; }
    done
    echo "node $id: 127.0.0.1:$((client_port + id - 1)) (controller 127.0.0.1:$((controller_port + id - 1)))"
}

log_lines() { # lines in node $1's log so far
    local log="$cluster_dir/node-$1/node.log"
    if [ -f "$log" ]; then wc -l <"$log"; else echo 0; fi
}

start() {
    local nodes=3 cores=1 extra=""
    while [ $# -gt 0 ]; do
        case $1 in
            --nodes) nodes=$2; shift 2 ;;
            --cores) cores=$2; shift 2 ;;
            --set) extra+="${extra:+ }$2"; shift 2 ;;
            *) usage ;;
        esac
    done
    [ -x "$ringlog" ] || cargo build --release -p broker --bin ringlog
    mkdir -p "$cluster_dir"
    local voters="" id
    for id in $(seq "$nodes"); do
        voters+="${voters:+,}$id@127.0.0.1:$((controller_port + id - 1))"
    done
    printf 'voters=%s\ncores=%s\nextra="%s"\n' "$voters" "$cores" "$extra" >"$cluster_dir/settings"
    local cluster_id
    if [ -f "$cluster_dir/cluster.id" ]; then
        cluster_id=$(cat "$cluster_dir/cluster.id")
    else
        cluster_id=$("$ringlog" random-uuid)
        echo "$cluster_id" >"$cluster_dir/cluster.id"
    fi
    local -A after
    for id in $(seq "$nodes"); do
        local dir="$cluster_dir/node-$id"
        mkdir -p "$dir"
        if [ ! -f "$dir/data/meta.properties" ]; then
            "$ringlog" format --cluster-id "$cluster_id" \
                --set "log.dirs=$dir/data" --set "node.id=$id" >/dev/null
        fi
        after[$id]=$(log_lines "$id")
        # Each node waits for a quorum of the others before it serves: start them all.
        launch "$id"
    done
    for id in $(seq "$nodes"); do
        wait_ready "$id" "${after[$id]}"
    done
}

# The pid of node $1 if it runs.
running() {
    local pidfile="$cluster_dir/node-$1/pid"
    [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && cat "$pidfile"
}

kill_node() {
    local id=${1:?node id} pid
    [ -d "$cluster_dir/node-$id" ] || { echo "no node $id" >&2; exit 1; }
    pid=$(running "$id") || { echo "node $id is not running" >&2; exit 1; }
    kill -KILL "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    rm -f "$cluster_dir/node-$id/pid"
    echo "node $id killed"
}

restart_node() {
    local id=${1:?node id}
    [ -f "$cluster_dir/node-$id/data/meta.properties" ] || { echo "no node $id" >&2; exit 1; }
    if running "$id" >/dev/null; then
        echo "node $id is running" >&2
        exit 1
    fi
    local after
    after=$(log_lines "$id")
    launch "$id"
    wait_ready "$id" "$after"
}

stop() {
    local dir
    for dir in $(nodes_of); do
        [ -f "$dir/pid" ] || continue
        kill -TERM "$(cat "$dir/pid")" 2>/dev/null || true
    done
    for dir in $(nodes_of); do
        [ -f "$dir/pid" ] || continue
        local pid waited=0
        pid=$(cat "$dir/pid")
        while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 300 ]; do
            sleep 0.1
            waited=$((waited + 1))
        done
        kill -KILL "$pid" 2>/dev/null || true
        rm -f "$dir/pid"
    done
}

status() {
    local dir
    for dir in $(nodes_of); do
        local state=stopped
        [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null && state="pid $(cat "$dir/pid")"
        echo "$(basename "$dir"): $state"
    done
    local id
    for dir in $(nodes_of); do
        id=${dir##*node-}
        if running "$id" >/dev/null; then
            "$ringlog" cluster describe --bootstrap-server "127.0.0.1:$((client_port + id - 1))" \
                2>/dev/null && return
        fi
    done
}

case ${1:-} in
    start) shift; start "$@" ;;
    stop) stop ;;
    status) status ;;
    kill) kill_node "${2:-}" ;;
    restart) restart_node "${2:-}" ;;
    *) usage ;;
esac
