#!/usr/bin/env bash
# What serving reads costs a partition's leader: its CPU per byte sent to two followers
# against its CPU per byte sent to two consumers, side by side in one run. One partition,
# one producer at a fixed open-loop rate with acks=1 (so the leader never waits for its
# readers), nodes unpinned with one shard each. Cases, in turn each round, on fresh data:
#   node-alone       one node, the producer only
#   node-consumers   one node, two consumers tailing the partition (ringlog-bench consume)
#   cluster-alone    the 3-node cluster (scripts/cluster.sh), the partition with 1 replica
#   cluster-rf3      the cluster, the partition with 3 replicas: two followers fetching
# For each case the leader's CPU-seconds per million messages (ringlog-bench --broker-pid,
# utime + stime over the measured window); then what each pair of readers adds, per GB of
# payload they were sent (two readers × messages × size): followers against consumers.
#
#   scripts/bench_fetch_cpu.sh                       one round, 100 B and 1 KiB
#   ROUNDS=3 SIZES=1024 scripts/bench_fetch_cpu.sh
#   RATE_100=1000000 RATE_1024=150000 SECONDS_PER_RUN=10 scripts/bench_fetch_cpu.sh
#
# The rates must be ones the readers keep up with: each line shows the messages sent and
# what each consumer read. The JSON of every run goes to $OUT.
# Environment: OUT, RINGLOG_BIN and BENCH_BIN as for scripts/bench_replication.sh.
set -Eeuo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-1}
seconds=${SECONDS_PER_RUN:-10}
sizes=${SIZES:-100 1024}
# shellcheck source=scripts/bench_env.sh
. scripts/bench_env.sh
bench_env fetch-cpu
work=$(mktemp -d)
node_pid=
cleanup() {
    [ -z "$node_pid" ] || kill "$node_pid" 2>/dev/null || true
    CLUSTER_DIR="$work/cluster" RINGLOG="$ringlog" scripts/cluster.sh stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "bench_fetch_cpu.sh: line $LINENO failed (exit $?)" >&2' ERR

rate_of() { # $1 size: the open-loop rate for it
    local var="RATE_$1"
    if [ -n "${!var:-}" ]; then echo "${!var}"; elif [ "$1" -le 100 ]; then echo 1000000; else echo 150000; fi
}

# The pid of the node leading partition 0 of topic $2, asked of bootstrap $1. Node N of
# scripts/cluster.sh has broker id N.
leader_pid() {
    local leader
    leader=$("$ringlog" topic describe --bootstrap-server "$1" "$2" |
        sed -n 's/.*Partition: 0\tLeader: \([0-9]*\).*/\1/p')
    if [ -n "$node_pid" ]; then echo "$node_pid"; else cat "$work/cluster/node-$leader/pid"; fi
}

# Case $2 against bootstrap $1: topic with $3 replicas, $4 consumers; appends its JSON
# summary line to $out/results.jsonl.
run() {
    local bootstrap=$1 case=$2 replicas=$3 readers=$4 size topic pid i
    shopt -s nullglob
    for size in $sizes; do
        topic="fetch-$case-$size-$round"
        "$ringlog" topic create --bootstrap-server "$bootstrap" "$topic" --partitions 1 \
            --replication-factor "$replicas" >/dev/null
        sleep 1 # the leader takes the partition
        pid=$(leader_pid "$bootstrap" "$topic")
        local consumers=()
        for i in $(seq 1 "$readers"); do
            "$bench" consume --bootstrap-server "$bootstrap" --topic "$topic" --from latest \
                --consumers 1 --duration "$((seconds + 4))s" --json >"$out/$case-$size-r$round-c$i.json" &
            consumers+=($!)
        done
        sleep 0.5
        "$bench" produce --bootstrap-server "$bootstrap" --topic "$topic" --acks 1 \
            --message-size "$size" --rate "$(rate_of "$size")" --duration "${seconds}s" \
            --warmup 2s --broker-pid "$pid" --json >"$out/$case-$size-r$round.json"
        for i in "${consumers[@]}"; do wait "$i" || true; done
        python3 - "$out/$case-$size-r$round.json" "$case" "$size" "$round" "$readers" \
            "$out"/"$case-$size-r$round"-c*.json <<'EOF' | tee -a "$out/results.jsonl" >/dev/null
import json, sys
r = json.load(open(sys.argv[1]))
read = []
for path in sys.argv[6:]:
    try:
        read.append(json.load(open(path))["measured_messages"])
    except (OSError, ValueError, KeyError):
        read.append(None)
print(json.dumps({"case": sys.argv[2], "size": int(sys.argv[3]), "round": int(sys.argv[4]),
                  "msgs_per_s": r["msgs_per_s"], "sent": r["acked"],
                  "cpu_per_million": r.get("broker_cpu_s_per_million"), "read": read}))
EOF
        tail -n 1 "$out/results.jsonl"
    done
}

node() { # $1 case, $2 consumers
    local dir="$work/node" port=19292
    rm -rf "$dir" && mkdir -p "$dir"
    "$ringlog" serve --cores 1 --overprovisioned --set "log.dirs=$dir/data" \
        --set "listeners=PLAINTEXT://127.0.0.1:$port" >"$dir/node.log" 2>&1 &
    node_pid=$!
    until grep -q ' ready ' "$dir/node.log"; do sleep 0.2; done
    run "127.0.0.1:$port" "$1" 1 "$2"
    kill "$node_pid" && wait "$node_pid" || true
    node_pid=
}

cluster() { # $1 case, $2 replicas
    CLUSTER_DIR="$work/cluster" RINGLOG="$ringlog" scripts/cluster.sh stop >/dev/null 2>&1 || true
    rm -rf "$work/cluster"
    CLUSTER_DIR="$work/cluster" RINGLOG="$ringlog" scripts/cluster.sh start --nodes 3 --cores 1 >/dev/null
    run 127.0.0.1:9092 "$1" "$2" 0
    CLUSTER_DIR="$work/cluster" RINGLOG="$ringlog" scripts/cluster.sh stop >/dev/null
}

echo "# $(date -u +%FT%TZ) $ringlog ($(git rev-parse --short HEAD) checked out), one partition, acks=1, ${seconds}s each"
for round in $(seq 1 "$rounds"); do
    echo "## round $round"
    node node-alone 0
    node node-consumers 2
    cluster cluster-alone 1
    cluster cluster-rf3 3
done
python3 - "$out/results.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault((r["size"], r["round"]), {})[r["case"]] = r["cpu_per_million"]
print("size  round  consumers: extra CPU-s/GB  followers: extra CPU-s/GB  followers/consumers")
ratios = {}
for (size, rnd), c in sorted(by.items()):
    gb = 2 * size * 1e6 / 1e9  # payload sent to two readers per million messages
    try:
        cons = (c["node-consumers"] - c["node-alone"]) / gb
        foll = (c["cluster-rf3"] - c["cluster-alone"]) / gb
    except (KeyError, TypeError):
        continue
    ratios.setdefault(size, []).append(foll / cons)
    print(f"{size:>5} {rnd:>5}  {cons:24.3f}  {foll:26.3f}  {foll / cons:19.2f}")
for size, rs in sorted(ratios.items()):
    print(f"{size} B: followers/consumers median {statistics.median(rs):.2f} ({len(rs)} rounds)")
EOF
echo "JSON of every run: $out"
