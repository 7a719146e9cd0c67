#!/usr/bin/env bash
# Side-by-side produce runs of two broker binaries, alternating A, B, A, B, ... on fresh data
# directories, so that the noise of a shared machine falls on both. One node at a time: the
# node on CPU 0 (1 shard), the generator on CPU 1. Prints one line per run (with the node's
# CPU-seconds per million messages, and the whole machine's) and writes every run's JSON
# summary to the output folder.
#
#   scripts/ab.sh OLD_BINARY NEW_BINARY OUT_DIR PAIRS -- <ringlog-bench produce arguments>
#
# e.g. acks=1 at full speed and at 5 M msgs/s (open loop), 100-byte messages, 3 pairs:
#   scripts/ab.sh /tmp/ringlog-before target/release/ringlog /tmp/ab 3 -- --acks 1 --duration 10s
#   scripts/ab.sh /tmp/ringlog-before target/release/ringlog /tmp/ab 3 -- --acks 1 --rate 5000000
# AB_OLD_SET and AB_NEW_SET add node settings (space-separated key=value) to one side, so one
# binary can be compared with itself under two settings:
#   AB_OLD_SET=log.io.mode=buffered scripts/ab.sh B B /tmp/ab 3 -- --acks 1
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 5 ] && [ "$5" = "--" ] || { sed -n '2,15p' "$0"; exit 2; }
old=$1 new=$2 out=$3 pairs=$4
shift 5
bench=${RINGLOG_BENCH:-${CARGO_TARGET_DIR:-target}/release/ringlog-bench}
port=${AB_PORT:-19092}
data_root=${AB_DATA:-$PWD/data-ab}
mkdir -p "$out"

run() { # label binary index bench-arguments...
    local label=$1 binary=$2 index=$3 dir="$data_root/$1-$3" settings=()
    shift 3
    local extra=${AB_OLD_SET:-}
    [ "$label" = new ] && extra=${AB_NEW_SET:-}
    for setting in $extra; do settings+=(--set "$setting"); done
    rm -rf "$dir"
    mkdir -p "$dir"
    taskset -c 0 "$binary" serve --cores 1 --set "log.dirs=$dir" \
        --set "listeners=PLAINTEXT://127.0.0.1:$port" "${settings[@]}" >"$dir.log" 2>&1 &
    local node=$!
    # Ready: the "ready" line, or for a binary older than that line, its "listening" line
    # and half a second for its start-up.
    for _ in $(seq 300); do
        grep -q ' ready ' "$dir.log" && break
        grep -q 'listening' "$dir.log" && { sleep 0.5; break; }
        sleep 0.1
    done
    taskset -c 1 "$bench" produce --bootstrap-server "127.0.0.1:$port" --topic ab --json \
        --broker-pid "$node" "$@" >"$out/$label-$index.json"
    # SIGTERM: a background job of a script ignores SIGINT.
    kill -TERM "$node"
    wait "$node" || true
    while ss -tln | grep -q ":$port "; do sleep 0.1; done
    rm -rf "$dir"
    sync
    sleep 2 # let the disk finish discarding the run's files
    python3 - "$out/$label-$index.json" "$label" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); l = r["latency"]; rt = r.get("round_trip") or {}
print(f"{sys.argv[2]:>4} {r['msgs_per_s'] / 1e6:6.2f} M msgs/s  p50 {l['p50_ms']:.3f}  "
      f"p99 {l['p99_ms']:.3f}  p99.9 {l['p999_ms']:.3f}  max {l['max_ms']:.2f} ms  "
      f"round trip p99 {rt.get('p99_ms', 0):.3f}  "
      f"node {r['broker_cpu_s_per_million'] or 0:.3f} CPU-s/M  "
      f"machine {r.get('machine_cpu_s_per_million') or 0:.3f}  errors {sum(r['errors'].values())}")
PY
}

for index in $(seq "$pairs"); do
    run old "$old" "$index" "$@"
    run new "$new" "$index" "$@"
done
