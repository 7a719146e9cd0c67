#!/usr/bin/env bash
# Consumers reading back from the earliest offset, ringlog against Apache Kafka, side by
# side in one run: 4 producers write MESSAGES 100-byte messages into 4 partitions (acks=1),
# then CONSUMERS consumer connections (default 1) read them all back: each a fixed share
# of the partitions, or with GROUP set, as members of that consumer group, which assigns
# them. Cases, in turn each round, each on a
# fresh node and data directory, the node on CPU 0 and the generator on CPU 1:
#   ringlog          defaults (direct I/O, a 64 MiB batch cache per shard): the reads go to
#                    the disk once the data outgrew the cache
#   ringlog-cache    log.cache.max.bytes=$CACHE_BYTES (default 2 GiB): the data still cached
#   base-cache       the same with the binary $BASE_BIN, when it is set (to compare builds)
#   kafka-warm       Kafka's defaults (scripts/peer-kafka.sh): the page cache holds what
#                    was just written
#   kafka-cold       the same after `echo 3 > /proc/sys/vm/drop_caches`: Kafka reads the disk
# and, beside them, the disk's own O_DIRECT read bandwidth (fio, 1 MiB reads).
#
#   scripts/bench_consume.sh                 one round
#   ROUNDS=2 MESSAGES=10000000 scripts/bench_consume.sh
#   CASES="ringlog-cache base-cache" BASE_BIN=/path/to/ringlog scripts/bench_consume.sh
#                                            only the cases named
#   CONSUMERS=4 GROUP=readers scripts/bench_consume.sh
#
# Prints one line per case: msgs/s, the fetch p99 and the node's CPU-seconds over the read;
# the JSON of every read goes to $OUT (default target/bench-reports/consume-<UTC time>).
# Needs root (drop_caches), fio (installed with apt-get when missing), Java and Maven
# (peer-kafka.sh).
set -Eeuo pipefail
cd "$(dirname "$0")/.."
trap 'echo "bench_consume.sh: line $LINENO failed (exit $?)" >&2' ERR

rounds=${ROUNDS:-1}
messages=${MESSAGES:-10000000}
consumers=${CONSUMERS:-1}
group_args=()
if [ -n "${GROUP:-}" ]; then group_args=(--group "$GROUP"); fi
cache_bytes=${CACHE_BYTES:-2147483648}
# shellcheck source=scripts/bench_env.sh
. scripts/bench_env.sh
bench_env consume
# Checked before the cases, so that a missing tool cannot fail the run after them.
if ! command -v fio >/dev/null; then
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null
fi
work=$(mktemp -d)
node_pid=
cleanup() {
    [ -z "$node_pid" ] || kill "$node_pid" 2>/dev/null || true
    PEER_DIR="$work/kafka" scripts/peer-kafka.sh stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

# Writes the messages to $1 (bootstrap), reads them back, and prints case $2's line; $3 is
# the node's pid, $4 "cold" to drop the page cache between writing and reading.
write_then_read() {
    local bootstrap=$1 case=$2 pid=$3 cold=${4:-} json="$out/$2-r$round.json" before after
    # The topic first, with one message: a partition's leader may refuse the first writes
    # for a moment after the topic is created (Kafka answers NOT_LEADER_OR_FOLLOWER), and
    # the generator does not retry.
    taskset -c 1 "$bench" produce --bootstrap-server "$bootstrap" --topic read-test \
        --partitions 4 --producers 1 --acks 1 --messages 1 --warmup 0s >/dev/null || true
    sleep 1
    taskset -c 1 "$bench" produce --bootstrap-server "$bootstrap" --topic read-test \
        --partitions 4 --producers 4 --acks 1 --messages "$messages" --warmup 0s \
        --json >"$work/write.json" ||
        { echo "$case: the write had errors: $(cat "$work/write.json")" >&2; return 1; }
    if [ "$cold" = cold ]; then
        sync
        echo 3 >/proc/sys/vm/drop_caches
    fi
    before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    taskset -c 1 "$bench" consume --bootstrap-server "$bootstrap" --topic read-test \
        --from earliest --messages "$messages" --consumers "$consumers" "${group_args[@]}" \
        --json >"$json"
    after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    python3 - "$json" "$case" "$((after - before))" "$(getconf CLK_TCK)" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
cpu = int(sys.argv[3]) / int(sys.argv[4])
print(f"{sys.argv[2]:<14} {r['msgs_per_s'] / 1e6:6.2f} M msgs/s  {r['mb_per_s']:7.1f} MB/s"
      f"  fetch p99 {r['latency']['p99_ms']:6.2f} ms  node {cpu:5.2f} CPU s"
      f"  read in {r['measured_s']:.2f} s" + (f"  errors {r['errors']}" if r["errors"] else ""))
EOF
}

ringlog_case() { # $1 case, $2 the binary, then `--set K=V` arguments
    local case=$1 binary=$2 dir="$work/$1" port=$((20000 + RANDOM % 10000))
    shift 2
    mkdir -p "$dir"
    taskset -c 0 "$binary" serve --cores 1 --set "log.dirs=$dir/data" \
        --set "listeners=PLAINTEXT://127.0.0.1:$port" "$@" >"$dir/node.log" 2>&1 &
    node_pid=$!
    until grep -q ' ready ' "$dir/node.log"; do sleep 0.2; done
    write_then_read "127.0.0.1:$port" "$case" "$node_pid"
    kill "$node_pid" && wait "$node_pid" || true
    node_pid=
    rm -rf "$dir"
}

kafka_case() { # $1 case, $2 "cold" or nothing
    PEER_DIR="$work/kafka" scripts/peer-kafka.sh start --nodes 1 --cpus 0 2>/dev/null
    # A node just started may answer its first requests with retriable errors, and its JIT
    # compiles the hot paths first: an unreported write before the measured one.
    taskset -c 1 "$bench" produce --bootstrap-server 127.0.0.1:19192 --topic warm-up \
        --acks 1 --duration 3s >/dev/null || echo "(the warm-up write to Kafka had errors)" >&2
    write_then_read 127.0.0.1:19192 "$1" "$(PEER_DIR="$work/kafka" scripts/peer-kafka.sh pid)" "${2:-}"
    PEER_DIR="$work/kafka" scripts/peer-kafka.sh stop
}

echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD), $messages messages of 100 B, 4 partitions," \
    "$consumers consumer(s)${GROUP:+ in group $GROUP}"
wanted() { # $1 case: named in $CASES, or every case when it is empty
    [ -z "${CASES:-}" ] || [[ " $CASES " == *" $1 "* ]]
}

for round in $(seq 1 "$rounds"); do
    echo "## round $round"
    if wanted ringlog; then ringlog_case ringlog "$ringlog"; fi
    if wanted ringlog-cache; then
        ringlog_case ringlog-cache "$ringlog" --set "log.cache.max.bytes=$cache_bytes"
    fi
    if [ -n "${BASE_BIN:-}" ] && wanted base-cache; then
        ringlog_case base-cache "$BASE_BIN" --set "log.cache.max.bytes=$cache_bytes"
    fi
    if wanted kafka-warm; then kafka_case kafka-warm; fi
    if wanted kafka-cold; then kafka_case kafka-cold cold; fi
done
fio --name=read --filename="$work/fio.dat" --size=2g --rw=read --bs=1m --direct=1 \
    --ioengine=io_uring --iodepth=1 --time_based --runtime=5 --cpus_allowed=0 2>/dev/null |
    sed -n 's/^ *READ: bw=[^(]*(\([^)]*\)).*/disk: O_DIRECT 1 MiB reads (fio) \1/p'
