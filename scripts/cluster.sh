#!/usr/bin/env bash
# A local cluster of ringlog nodes on loopback: every node is broker and controller (Kafka's
# combined mode), the nodes form one metadata quorum (`controller.quorum.voters`), and each
# has its own data directory, formatted once with one cluster id.
#
#   scripts/cluster.sh start [--nodes N] [--cores C]   N nodes (default 3), C shards each (1)
#   scripts/cluster.sh stop
#   scripts/cluster.sh status                          each node's pid and the controller
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

usage() { sed -n '2,12p' "$0"; exit 2; }

nodes_of() { # the node directories that exist, in order
    find "$cluster_dir" -maxdepth 1 -name 'node-*' -type d 2>/dev/null | sort -V
}

start() {
    local nodes=3 cores=1
    while [ $# -gt 0 ]; do
        case $1 in
            --nodes) nodes=$2; shift 2 ;;
            --cores) cores=$2; shift 2 ;;
            *) usage ;;
        esac
    done
    [ -x "$ringlog" ] || cargo build --release -p broker --bin ringlog
    mkdir -p "$cluster_dir"
    local voters="" id
    for id in $(seq "$nodes"); do
        voters+="${voters:+,}$id@127.0.0.1:$((controller_port + id - 1))"
    done
    local cluster_id
    if [ -f "$cluster_dir/cluster.id" ]; then
        cluster_id=$(cat "$cluster_dir/cluster.id")
    else
        cluster_id=$("$ringlog" random-uuid)
        echo "$cluster_id" >"$cluster_dir/cluster.id"
    fi
    for id in $(seq "$nodes"); do
        local dir="$cluster_dir/node-$id"
        mkdir -p "$dir"
        if [ ! -f "$dir/data/meta.properties" ]; then
            "$ringlog" format --cluster-id "$cluster_id" \
                --set "log.dirs=$dir/data" --set "node.id=$id" >/dev/null
        fi
        # Each node waits for a quorum of the others before it serves: start them all.
        "$ringlog" serve --cores "$cores" \
            --set "node.id=$id" \
            --set "log.dirs=$dir/data" \
            --set "listeners=PLAINTEXT://127.0.0.1:$((client_port + id - 1))" \
            --set "controller.quorum.voters=$voters" \
            >>"$dir/node.log" 2>&1 &
        echo $! >"$dir/pid"
    done
    for id in $(seq "$nodes"); do
        local dir="$cluster_dir/node-$id" waited=0
        until grep -q ' ready ' "$dir/node.log"; do
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
    done
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
    "$ringlog" cluster describe --bootstrap-server "127.0.0.1:$client_port" 2>/dev/null || true
}

case ${1:-} in
    start) shift; start "$@" ;;
    stop) stop ;;
    status) status ;;
    *) usage ;;
esac
