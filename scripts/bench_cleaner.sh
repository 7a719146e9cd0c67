#!/usr/bin/env bash
# What the log cleaner costs produce: open-loop produce at a fixed rate into a compacted topic
# with small segments and a small key space, so that the cleaner always has segments to
# rewrite, against the same run on a node whose cleaner is off (log.cleaner.enable=false);
# busy and idle alternate, each on a fresh data directory, PAIRS times. Prints one line per
# run (rate, p50, p99, p99.9, and for busy runs the cleaner's throughput) and the medians.
#
#   scripts/bench_cleaner.sh                  5 pairs, the rate found by a calibration run
#   scripts/bench_cleaner.sh 7                7 pairs
#   RATE=2000000 scripts/bench_cleaner.sh     a given rate (msgs/s), no calibration run
#
# Calibration: one closed-loop run of the same workload with the cleaner off; the rate is
# half of what it reached. Node and generator are placed as everywhere in docs/BENCHMARKS.md:
# the node on CPU 0 with one shard (its cleaner shares that core with produce and fetch),
# ringlog-bench on CPU 1. Workload: one partition, 100-byte values, keys from a space of
# KEYS (ringlog-bench --keys), acks=1, DURATION measured after 2 s of warm-up; topic:
# cleanup.policy=compact, segment.bytes=SEGMENT_BYTES; node: log.cleaner.backoff.ms=100.
# 16 MiB segments seal every 0.1-0.2 s at half speed, so each cleaning round has new ones;
# with 1 MiB segments the idle runs themselves slowed down as their segment count grew
# (p99 5 ms over 6 s, 190-540 ms over 10 s), which would hide the cleaner's cost.
#
# The cleaner's throughput comes from the node's "cleaned log" lines (one per cleaning round
# of a partition: bytes_read, the bytes of the segments the round read to rewrite, and
# elapsed_us, the round's time, the offset map's reads included): MB/s while cleaning is
# their bytes over their time (Kafka's "MB of log processed in N seconds"), MB/s over the
# run is their bytes over the node's life, "ready" to "shutting down" (the produce run and
# a second or two around it). One shard, so both are per shard.
#
# Each run waits until the machine is quiet (no more than QUIET_BUSY_PERCENT, default 10, of
# the CPUs busy over 2 s, at most 30 minutes) and its line says how busy it was ("others").
#
# The disk is measured before the first run and after the last (scripts/durable_append.py
# --write-only, 64 KiB O_DIRECT writes from CPU 0, acks=1's bound).
#
# Environment: CLEANER_IO (log.cleaner.io.max.bytes.per.second of the busy runs, bytes a
# second for the node; default: Kafka's, no limit), NODE_SETTINGS (more node settings for
# every run, space-separated key=value), KEYS (default 1000), SEGMENT_BYTES (default 16777216), DURATION (default 10s),
# ACKS (default 1), OUT (default target/bench-reports/cleaner-<UTC time>: every run's JSON
# summary and node log), PORT (default 19093), RINGLOG_BIN and BENCH_BIN (default: release
# builds, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

pairs=${1:-5}
keys=${KEYS:-1000}
segment_bytes=${SEGMENT_BYTES:-16777216}
duration=${DURATION:-10s}
acks=${ACKS:-1}
cleaner_io=${CLEANER_IO:-1.7976931348623157E308}
port=${PORT:-19093}
node_settings=
for setting in ${NODE_SETTINGS:-}; do node_settings+=" --set $setting"; done
quiet_busy_percent=${QUIET_BUSY_PERCENT:-10}
# shellcheck source=scripts/bench_env.sh
. scripts/bench_env.sh
bench_env cleaner
work=$(mktemp -d -t ringlog-cleaner.XXXXXX)
node=
cleanup() {
    if [ -n "$node" ]; then
        kill -TERM "$node" 2>/dev/null || true
        wait "$node" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

disk() { # label
    mkdir -p "$work/disk"
    taskset -c 0 python3 scripts/durable_append.py "$work/disk" --write-only --count 3000 |
        sed "s/^/disk ($1): /"
    rm -rf "$work/disk"
}

# Waits until the machine is quiet: both CPUs at least (100 - QUIET_BUSY_PERCENT) % idle
# over 2 s, with no node or generator of this script running; prints the busy share it
# found (work of others, which any run beside it would share the CPUs with).
quiet() {
    local waited=0 busy
    while :; do
        busy=$(python3 - <<'EOF'
import time
def sample():
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)
idle0, total0 = sample()
time.sleep(2)
idle1, total1 = sample()
print(round(100 * (1 - (idle1 - idle0) / (total1 - total0))))
EOF
        )
        if [ "$busy" -le "$quiet_busy_percent" ] || [ "$waited" -ge 1800 ]; then break; fi
        waited=$((waited + 2))
    done
    echo "$busy"
}

# Runs the node (cleaner on or off) and one produce run against it; leaves
# $out/<name>.json and $out/<name>.log. Extra arguments go to ringlog-bench produce.
run() { # name cleaner(true|false) bench-arguments...
    local name=$1 cleaner=$2 dir="$work/data"
    shift 2
    quiet >"$out/$name.busy"
    rm -rf "$dir"
    mkdir -p "$dir"
    taskset -c 0 "$ringlog" serve --cores 1 --set "log.dirs=$dir" \
        --set "listeners=PLAINTEXT://127.0.0.1:$port" \
        --set log.cleaner.backoff.ms=100 --set "log.cleaner.enable=$cleaner" \
        --set "log.cleaner.io.max.bytes.per.second=$cleaner_io" $node_settings \
        >"$out/$name.log" 2>&1 &
    node=$!
    for _ in $(seq 300); do
        grep -q ' ready ' "$out/$name.log" && break
        sleep 0.1
    done
    taskset -c 1 "$bench" produce --bootstrap-server "127.0.0.1:$port" --topic compacted \
        --topic-config cleanup.policy=compact --topic-config "segment.bytes=$segment_bytes" \
        --keys "$keys" --acks "$acks" --warmup 2s --duration "$duration" --broker-pid "$node" \
        --json "$@" \
        >"$out/$name.json"
    # SIGTERM: a background job of a script ignores SIGINT.
    kill -TERM "$node"
    wait "$node" || true
    node=
    while ss -tln | grep -q ":$port "; do sleep 0.1; done
    rm -rf "$dir"
    sync
    sleep 2 # let the disk finish discarding the run's files
}

# Figures of the runs, in Python: `line NAME CASE` prints one run's line, `summary PAIRS`
# the medians.
cat >"$work/figures.py" <<'EOF'
import json, re, statistics, sys
from datetime import datetime

def stamp(text, pattern):
    found = re.search(r"^(\S+)Z .*" + pattern, text, re.M)
    return datetime.fromisoformat(found.group(1)) if found else None

def cleaner(out, name):
    """Rounds, MB read, MB/s while cleaning and MB/s over the node's life, from its log."""
    text = open(f"{out}/{name}.log").read()
    rounds = [(int(b), int(us)) for b, us in
              re.findall(r"cleaned log.*?bytes_read=(\d+).*?elapsed_us=(\d+)", text)]
    if not rounds:
        return None
    read_mb = sum(b for b, _ in rounds) / 1e6
    busy_s = sum(us for _, us in rounds) / 1e6
    life_s = (stamp(text, "shutting down") - stamp(text, " ready ")).total_seconds()
    return len(rounds), read_mb, read_mb / busy_s, read_mb / life_s

def run(out, name):
    return json.load(open(f"{out}/{name}.json"))

out, command = sys.argv[1], sys.argv[2]
if command == "line":
    name, case = sys.argv[3:5]
    r = run(out, name)
    l = r['latency']
    others = open(f"{out}/{name}.busy").read().strip()
    line = (f"{case:<5} others {others:>2} %  {r['msgs_per_s'] / 1e6:6.3f} M msgs/s ({r['wire_mb_per_s']:5.0f} MB/s)  "
            f"p50 {l['p50_ms']:6.3f}  p99 {l['p99_ms']:6.3f}  p99.9 {l['p999_ms']:6.3f} ms  "
            f"errors {sum(r['errors'].values())}")
    if r.get('broker_cpu_s_per_million') is not None:
        line += f"  node CPU {r['broker_cpu_s_per_million']:.3f} s per M msgs"
    c = cleaner(out, name)
    if c:
        line += (f"  cleaner: {c[0]} rounds, {c[1]:.0f} MB read, {c[2]:.0f} MB/s while "
                 f"cleaning, {c[3]:.0f} MB/s over the run")
    print(line)
else:
    pairs = int(sys.argv[3])
    median = statistics.median
    p99 = {case: [run(out, f"{case}-{i}")['latency']['p99_ms'] for i in range(1, pairs + 1)]
           for case in ("busy", "idle")}
    for case, values in p99.items():
        print(f"p99 {case}: {', '.join('%.3f' % x for x in values)} ms, "
              f"median {median(values):.3f}")
    ratio = median(p99['busy']) / median(p99['idle'])
    verdict = "met" if ratio <= 1.2 else "not met"
    print(f"median p99 busy / idle: {ratio:.2f}x (target 1.2x: {verdict})")
    rounds = [cleaner(out, f"busy-{i}") for i in range(1, pairs + 1)]
    rounds = [c for c in rounds if c]
    if rounds:
        print(f"cleaner per shard: median {median(c[2] for c in rounds):.0f} MB/s while "
              f"cleaning, {median(c[3] for c in rounds):.0f} MB/s over the run")
EOF
report() { python3 "$work/figures.py" "$out" line "$1" "$2"; }

disk before
if [ -n "${RATE:-}" ]; then
    rate=$RATE
else
    run calibration false
    report calibration idle
    rate=$(python3 -c "import json,sys; print(int(json.load(open(sys.argv[1]))['msgs_per_s'] / 2))" \
        "$out/calibration.json")
fi
echo "rate: $rate msgs/s (open loop), keys $keys, segment.bytes $segment_bytes, acks $acks," \
    "log.cleaner.io.max.bytes.per.second $cleaner_io"
for index in $(seq "$pairs"); do
    # Alternate which goes first, so that a drift of the machine falls on both.
    if [ $((index % 2)) = 1 ]; then order="busy idle"; else order="idle busy"; fi
    for case in $order; do
        cleaner=true
        [ "$case" = idle ] && cleaner=false
        run "$case-$index" "$cleaner" --rate "$rate"
        report "$case-$index" "$case"
    done
done
disk after

python3 "$work/figures.py" "$out" summary "$pairs"
echo "reports: $out"
