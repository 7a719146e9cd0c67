#!/usr/bin/env bash
# What replication costs, side by side in one run: one node against the 3-node loopback
# cluster (scripts/cluster.sh, 3 replicas per partition, min.insync.replicas=2) at acks=all
# (the cluster by default and with replica.fsync.before.fetch), at acks=1 and at acks=0: the
# standard matrix of scripts/bench.sh on both; 100 B and 1 KiB messages from several
# producers, the disk's durable append measured beside them (scripts/durable_append.py).
#
#   scripts/bench_replication.sh                    one round of every case
#   ROUNDS=3 scripts/bench_replication.sh           alternating rounds (the cases in turn)
#   DURATION=10s PRODUCERS=4 PARTITIONS=3 scripts/bench_replication.sh
#   PEER=kafka scripts/bench_replication.sh         also a 3-node Apache Kafka cluster
#                                                   (scripts/peer-kafka.sh), RF 3, acks=all,
#                                                   with Kafka's defaults and with its
#                                                   `flush` profile, in each round
#   CASES="cluster-rf3-acks-all kafka-rf3-acks-all" scripts/bench_replication.sh
#                                                   only the cases named (as printed)
#   RATES="100=1500000 1024=160000" scripts/bench_replication.sh
#                                                   open loop: every case sends that many
#                                                   messages a second in all (per message
#                                                   size), latency counted from each
#                                                   intended send time; a size not named
#                                                   runs closed loop
#
# Every node runs unpinned with one shard and no busy polling, so three brokers and the
# generator share the machine's CPUs (the cluster writes every byte three times to the same
# disk). Each case gets fresh data directories. Prints one line per run: case, size,
# msgs/s, MB/s of payload, p50 and p99 ms, and the brokers' CPU-seconds per million
# messages (utime + stime of all their processes over the run, against every message
# acknowledged, warm-up included); the JSON of every run goes to $OUT.
#
# Environment: OUT (default target/bench-reports/replication-<UTC time>), RINGLOG_BIN and
# BENCH_BIN (default: release builds, built if missing).
set -Eeuo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-1}
duration=${DURATION:-10s}
producers=${PRODUCERS:-4}
partitions=${PARTITIONS:-3}
declare -A rates=()
for pair in ${RATES:-}; do rates[${pair%%=*}]=${pair#*=}; done
# shellcheck source=scripts/bench_env.sh
. scripts/bench_env.sh
bench_env replication
work=$(mktemp -d)
node_pid=
cleanup() {
    [ -z "$node_pid" ] || kill "$node_pid" 2>/dev/null || true
    CLUSTER_DIR="$work/cluster" RINGLOG="$ringlog" scripts/cluster.sh stop >/dev/null 2>&1 || true
    PEER_DIR="$work/kafka" scripts/peer-kafka.sh stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "bench_replication.sh: line $LINENO failed (exit $?)" >&2' ERR

# The pids of the brokers under test, one per line.
broker_pids() {
    [ -z "$node_pid" ] || echo "$node_pid"
    cat "$work"/cluster/node-*/pid "$work"/kafka/node-*/pid 2>/dev/null || true
}

# CPU ticks (utime + stime) the brokers used so far.
broker_ticks() {
    local pid total=0
    for pid in $(broker_pids); do
        total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
    done
    echo "$total"
}

# Runs ringlog-bench produce against $1 (bootstrap) for case $2, size $3, acks $4, with
# replication factor $5; appends the result line.
run() {
    local bootstrap=$1 case=$2 size=$3 acks=$4 replicas=$5
    local json="$out/$case-$size-r$round.json" ticks rate=()
    [ -z "${rates[$size]:-}" ] || rate=(--rate "${rates[$size]}")
    ticks=$(broker_ticks)
    "$bench" produce --bootstrap-server "$bootstrap" --topic "bench-$case-$size-$round" \
        --partitions "$partitions" --replication-factor "$replicas" \
        --topic-config min.insync.replicas="$((replicas > 1 ? 2 : 1))" \
        --producers "$producers" --message-size "$size" --acks="$acks" \
        --duration "$duration" --warmup 2s "${rate[@]}" --json >"$json" || true # errors are printed below
    if [ ! -s "$json" ]; then
        printf '%-24s %5s B  no result: the run failed (its error is above)\n' "$case" "$size"
        return 0
    fi
    python3 - "$json" "$case" "$size" "$(($(broker_ticks) - ticks))" "$(getconf CLK_TCK)" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
l = r["latency"]
cpu = int(sys.argv[4]) / int(sys.argv[5])
# acks=0 has nothing acknowledged: its CPU is per message sent, and it has no latency.
per_million = cpu / ((r["acked"] or r["sent"]) / 1e6)
latency = f"p50 {l['p50_ms']:6.3f} ms  p99 {l['p99_ms']:6.3f} ms" if r["acked"] else "no latency"
print(f"{sys.argv[2]:<24} {sys.argv[3]:>5} B  {r['msgs_per_s'] / 1e6:7.3f} M msgs/s"
      f"  {r['mb_per_s']:8.1f} MB/s  {latency}"
      f"  {per_million:6.3f} CPU s/M msgs" + (f"  errors {r['errors']}" if r["errors"] else ""))
EOF
}

single() { # $1 case, $2 acks
    local dir="$work/single" port=19292
    rm -rf "$dir" && mkdir -p "$dir"
    "$ringlog" serve --cores 1 --set "log.dirs=$dir/data" \
        --set "listeners=PLAINTEXT://127.0.0.1:$port" >"$dir/node.log" 2>&1 &
    node_pid=$!
    until grep -q ' ready ' "$dir/node.log"; do sleep 0.2; done
    for size in 100 1024; do run "127.0.0.1:$port" "$1" "$size" "$2" 1; done
    kill "$node_pid" && wait "$node_pid" || true
    node_pid=
    rm -rf "$dir" # gigabytes a second: the next case needs the room
}

cluster() { # $1 case, $2 acks, then `--set K=V` arguments for every node
    local case=$1 acks=$2
    shift 2
    CLUSTER_DIR="$work/cluster" RINGLOG="$ringlog" scripts/cluster.sh stop >/dev/null 2>&1 || true
    rm -rf "$work/cluster"
    CLUSTER_DIR="$work/cluster" RINGLOG="$ringlog" \
        scripts/cluster.sh start --nodes 3 --cores 1 "$@" >/dev/null
    for size in 100 1024; do run 127.0.0.1:9092 "$case" "$size" "$acks" 3; done
    CLUSTER_DIR="$work/cluster" RINGLOG="$ringlog" scripts/cluster.sh stop >/dev/null
    rm -rf "$work/cluster"
}

kafka() { # $1 case, $2 profile of scripts/peer-kafka.sh
    PEER_DIR="$work/kafka" scripts/peer-kafka.sh start --nodes 3 --profile "$2" \
        2>>"$out/peer-kafka.log" || { tail -n 20 "$out/peer-kafka.log" >&2; exit 1; }
    # The JVMs compile their hot paths first: one unreported run before the measured ones
    # (a cluster just started may answer its first requests with retriable errors).
    "$bench" produce --bootstrap-server 127.0.0.1:19192 --topic jit-warmup --partitions 3 \
        --replication-factor 3 --producers "$producers" --acks=-1 --duration 5s >/dev/null ||
        echo "(the warm-up run against Kafka had errors)" >&2
    for size in 100 1024; do run 127.0.0.1:19192 "$1" "$size" -1 3; done
    PEER_DIR="$work/kafka" scripts/peer-kafka.sh stop
}

wanted() { # $1 case: named in $CASES, or every case when it is empty
    [ -z "${CASES:-}" ] || [[ " $CASES " == *" $1 "* ]]
}

mkdir -p "$work/disk"
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD), $producers producers, $partitions partitions, $duration each${RATES:+, open loop at ${RATES} msgs/s}"
for round in $(seq 1 "$rounds"); do
    echo "## round $round; the disk: $(scripts/durable_append.py "$work/disk" --count 2000 | tail -1)"
    if wanted one-node-acks-all; then single one-node-acks-all -1; fi
    if wanted cluster-rf3-acks-all; then cluster cluster-rf3-acks-all -1; fi
    if wanted cluster-rf3-fsync-fetch; then
        cluster cluster-rf3-fsync-fetch -1 --set replica.fsync.before.fetch=true
    fi
    if wanted one-node-acks-1; then single one-node-acks-1 1; fi
    if wanted cluster-rf3-acks-1; then cluster cluster-rf3-acks-1 1; fi
    if wanted one-node-acks-0; then single one-node-acks-0 0; fi
    if wanted cluster-rf3-acks-0; then cluster cluster-rf3-acks-0 0; fi
    if [ "${PEER:-}" = kafka ]; then
        if wanted kafka-rf3-acks-all; then kafka kafka-rf3-acks-all default; fi
        if wanted kafka-rf3-flush-acks-all; then kafka kafka-rf3-flush-acks-all flush; fi
    fi
done
echo "JSON of every run: $out"
