#!/usr/bin/env bash
# Runs the benchmark matrix against a fresh single ringlog node and prints the table.
#
# Builds ringlog and ringlog-bench in release, starts `ringlog serve` on a temporary log dir
# and a free 127.0.0.1 port, runs `ringlog-bench matrix` (acks 0, 1, all × 100 B and 1 KiB by
# default, with the node's CPU-seconds per million messages), prints table.txt, and stops
# the node (also on failure or Ctrl-C).
#
#   scripts/bench.sh                                  the default matrix
#   scripts/bench.sh --duration 30s --warmup 5s       extra arguments go to `ringlog-bench matrix`
#   OUT=reports/run1 scripts/bench.sh                 where the report folder goes
#   RINGLOG_CORES=1 LOG_IO_MODE=buffered scripts/bench.sh
#   KEEP_DATA=1 scripts/bench.sh                      keep the node's log dir and log
#   RINGLOG_BIN=path/to/ringlog scripts/bench.sh      use that broker binary instead of building one
#   scripts/bench.sh --peer kafka                     the same matrix against Apache Kafka too
#   ROUNDS=3 scripts/bench.sh --peer kafka            ringlog, Kafka, ringlog, ... (medians)
#   KAFKA_PROFILE=flush scripts/bench.sh --peer kafka Kafka fsyncing every append (peer-kafka.sh)
#   WARMUP_RUN=30s scripts/bench.sh --peer kafka      how long each broker runs before its matrix
#   MACHINE_LIMITS=0 scripts/bench.sh                 skip measuring the disk and loopback first
#
# Before ringlog's matrix (each round), scripts/machine_limits.py measures the disk (fio) and
# loopback TCP (iperf3) from the node's and the generator's CPUs into machine.json, and
# table.txt ends with each run's bytes of batches as a share of the smaller of the two.
#
# With --peer kafka, scripts/peer-kafka.sh runs Apache Kafka (one node, pinned to the node's
# CPUs as ringlog is) and each broker gets a fresh data directory for each round; after the
# matrix, Kafka's kafka-producer-perf-test runs against each broker too (PERF_RECORDS
# records, default 20 M, at acks=1 and all), then a consumer and the e2e latency run. The
# report folder holds one sub-folder per
# broker and round and a table.txt with both brokers and their ratio per cell
# (scripts/bench_compare.py).
#
# Defaults: the node gets 1 core (RINGLOG_CORES), pinned to the first CPUs with taskset, and
# the generator the remaining CPUs; the report goes to target/bench-reports/<UTC date>.
set -euo pipefail
cd "$(dirname "$0")/.."

peer=
if [ "${1:-}" = --peer ]; then
    peer=${2:-}
    [ "$peer" = kafka ] || { echo "bench.sh: --peer takes kafka" >&2; exit 2; }
    shift 2
fi
rounds=${ROUNDS:-1}

target=${CARGO_TARGET_DIR:-target}
out=${OUT:-$target/bench-reports/$(date -u +%Y%m%dT%H%M%SZ)}
cores=${RINGLOG_CORES:-1}

if [ -n "${RINGLOG_BIN:-}" ]; then
    ringlog=$RINGLOG_BIN
    echo "==> building ringlog-bench (release); broker: $ringlog" >&2
    cargo build --release -p bench --bin ringlog-bench >&2
else
    ringlog=$target/release/ringlog
    echo "==> building ringlog and ringlog-bench (release)" >&2
    cargo build --release -p broker --bin ringlog -p bench --bin ringlog-bench >&2
fi
[ -x "$ringlog" ] || { echo "no broker binary at $ringlog" >&2; exit 1; }

dir=$(mktemp -d -t ringlog-bench.XXXXXX)
pid=
stop_node() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    pid=
}
cleanup() {
    stop_node
    [ -n "$peer" ] && PEER_DIR="$dir/kafka" scripts/peer-kafka.sh stop 2>/dev/null
    if [ "${KEEP_DATA:-0}" = 1 ]; then
        echo "node data and log kept in $dir" >&2
    else
        rm -rf "$dir"
    fi
}
trap cleanup EXIT INT TERM

io_mode=()
[ -n "${LOG_IO_MODE:-}" ] && io_mode=(--set "log.io.mode=$LOG_IO_MODE")

# Keep the node and the generator on separate CPUs: both pin one executor per CPU they may
# use, so without this they would share the first CPU.
cpus=$(nproc)
node_cpus=(); bench_cpus=(); peer_cpus=()
if [ "$cpus" -gt "$cores" ]; then
    node_cpus=(taskset -c "0-$((cores - 1))")
    bench_cpus=(taskset -c "$cores-$((cpus - 1))")
    peer_cpus=(--cpus "0-$((cores - 1))")
fi

if [ -n "${RINGLOG_BIN:-}" ]; then
    label="ringlog $RINGLOG_BIN, $cores core(s)"
else
    label="ringlog $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $cores core(s)"
fi
[ -n "${LOG_IO_MODE:-}" ] && label="$label, log.io.mode=$LOG_IO_MODE"

status=0
matrix() { # report-dir bootstrap broker-pid label matrix-args...
    local report=$1 bootstrap=$2 broker_pid=$3 name=$4
    shift 4
    if [ -n "$peer" ]; then
        # Both brokers run a while before they are measured: a JVM compiles its hot paths
        # in its first seconds, which is not what a running Kafka costs.
        echo "==> warming $name up (${WARMUP_RUN:-10s} at acks=1)" >&2
        "${bench_cpus[@]}" "$target/release/ringlog-bench" produce --bootstrap-server "$bootstrap" \
            --topic bench-warmup --acks 1 --duration "${WARMUP_RUN:-10s}" --warmup 0s >/dev/null \
            || status=$?
    fi
    echo "==> ringlog-bench matrix against $name -> $report" >&2
    "${bench_cpus[@]}" "$target/release/ringlog-bench" matrix --bootstrap-server "$bootstrap" \
        --output "$report" --broker-label "$name" --broker-pid "$broker_pid" "$@" >/dev/null \
        || status=$?
}

# Kafka's own generator (kafka-producer-perf-test) against the same broker, so that the
# figures do not rest on ringlog-bench alone: 100-byte records at acks=1 and acks=all with
# the generator's batch size and linger, each line of its summary and the broker's CPU
# seconds over the run into perf-test.txt.
perf_test() { # report-dir bootstrap broker-pid
    local report=$1 bootstrap=$2 broker_pid=$3 acks cpu_before cpu_after line
    local classpath
    classpath=$(scripts/peer-kafka.sh classpath)
    mkdir -p "$report"
    for acks in 1 all; do
        echo "==> kafka-producer-perf-test acks=$acks against $bootstrap" >&2
        cpu_before=$(awk '{print $14 + $15}' "/proc/$broker_pid/stat")
        line=$("${bench_cpus[@]}" java -Xmx1g -cp "$classpath" org.apache.kafka.tools.ProducerPerformance \
            --topic "perf-test-$acks" --num-records "${PERF_RECORDS:-20000000}" --record-size 100 \
            --throughput -1 --command-property "bootstrap.servers=$bootstrap" "acks=$acks" \
            batch.size=65536 linger.ms=5 2>/dev/null | tail -n 1) || status=$?
        cpu_after=$(awk '{print $14 + $15}' "/proc/$broker_pid/stat")
        echo "acks=$acks cpu_s=$(( (cpu_after - cpu_before) / 100 )).$(printf '%02d' $(( (cpu_after - cpu_before) % 100 ))) $line" \
            >>"$report/perf-test.txt"
    done
}

# Reading and end-to-end latency against the same broker: 10 M 100-byte messages in 4
# partitions read back from the earliest offset by one consumer, and produce-to-fetch
# latency at 100 k msgs/s; each run's JSON summary into the report folder.
read_tests() { # report-dir bootstrap
    local report=$1 bootstrap=$2 bench=("${bench_cpus[@]}" "$target/release/ringlog-bench")
    echo "==> consume and e2e against $bootstrap" >&2
    "${bench[@]}" produce --bootstrap-server "$bootstrap" --topic read-test --partitions 4 \
        --producers 4 --acks 1 --messages 10000000 --warmup 0s >/dev/null || status=$?
    "${bench[@]}" consume --bootstrap-server "$bootstrap" --topic read-test --from earliest \
        --messages 10000000 --json >"$report/consume.json" || status=$?
    "${bench[@]}" e2e --bootstrap-server "$bootstrap" --topic e2e-test --rate 100000 \
        --duration 10s --json >"$report/e2e.json" || status=$?
}

# The machine's limit for produce over loopback, measured while no node runs: with the node
# and the generator on CPUs of their own. fio and iperf3 (Debian packages) are installed when
# missing, as root, as scripts/bench_consume.sh installs fio.
machine_limits() { # report-dir
    local report=$1 tool
    [ "${MACHINE_LIMITS:-1}" != 0 ] && [ ${#node_cpus[@]} -gt 0 ] || return 0
    for tool in fio iperf3; do
        command -v "$tool" >/dev/null 2>&1 && continue
        if [ "$(id -u)" -eq 0 ]; then
            apt-get update -qq >/dev/null &&
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool" >/dev/null
        fi
        if ! command -v "$tool" >/dev/null 2>&1; then
            echo "==> the machine's limits not measured: $tool is missing (apt-get install $tool)" >&2
            return 0
        fi
    done
    echo "==> the machine's limits: the disk and loopback TCP (scripts/machine_limits.py)" >&2
    mkdir -p "$report"
    python3 scripts/machine_limits.py "$dir" --node-cpu 0 --client-cpu "$cores" --json \
        >"$report/machine.json" || { status=$?; rm -f "$report/machine.json"; }
}

run_ringlog() { # report-dir matrix-args...
    local report=$1 data="$dir/ringlog-$RANDOM"
    shift
    machine_limits "$report"
    # A port below the kernel's ephemeral range (ip_local_port_range), where no client's
    # source port can take it; a taken one makes the node exit with "address already in use".
    local port=$((20000 + RANDOM % 10000))
    local listener="PLAINTEXT://127.0.0.1:$port"
    echo "==> starting ringlog on 127.0.0.1:$port ($cores core(s), data in $data)" >&2
    mkdir -p "$data"
    "${node_cpus[@]}" "$ringlog" serve --cores "$cores" \
        --set "log.dirs=$data/data" --set "listeners=$listener" \
        --set "advertised.listeners=$listener" "${io_mode[@]}" >"$data/ringlog.log" 2>&1 &
    pid=$!
    # Ready means every shard has opened its partitions and the listener accepts.
    for _ in $(seq 1 300); do
        grep -q ' ready ' "$data/ringlog.log" 2>/dev/null && break
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "ringlog exited before it was ready; its log:" >&2
            cat "$data/ringlog.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    grep -q ' ready ' "$data/ringlog.log" || { echo "ringlog was not ready after 30 s" >&2; exit 1; }
    local before=$status
    matrix "$report" "127.0.0.1:$port" "$pid" "$label" "$@"
    if [ -f "$report/machine.json" ] && [ -f "$report/results.json" ]; then
        { echo; python3 scripts/machine_limits.py --shares "$report/machine.json" "$report/results.json"; } \
            >>"$report/table.txt" || status=$?
    fi
    if [ -n "$peer" ]; then
        perf_test "$report" "127.0.0.1:$port" "$pid"
        read_tests "$report" "127.0.0.1:$port"
    fi
    if [ "$status" -ne "$before" ]; then
        echo "last lines of the node's log:" >&2
        tail -n 20 "$data/ringlog.log" >&2
    fi
    stop_node
    rm -rf "$data"
}

run_kafka() { # report-dir matrix-args...
    local report=$1
    shift
    PEER_DIR="$dir/kafka" scripts/peer-kafka.sh start --profile "${KAFKA_PROFILE:-default}" \
        "${peer_cpus[@]}"
    local kafka_pid
    kafka_pid=$(PEER_DIR="$dir/kafka" scripts/peer-kafka.sh pid)
    matrix "$report" 127.0.0.1:19192 "$kafka_pid" \
        "$(PEER_DIR="$dir/kafka" scripts/peer-kafka.sh version), $cores CPU(s), profile ${KAFKA_PROFILE:-default}" "$@"
    perf_test "$report" 127.0.0.1:19192 "$kafka_pid"
    read_tests "$report" 127.0.0.1:19192
    PEER_DIR="$dir/kafka" scripts/peer-kafka.sh stop
}

if [ -z "$peer" ]; then
    run_ringlog "$out" "$@"
    if [ -f "$out/table.txt" ]; then
        cat "$out/table.txt"
        echo
        echo "report: $out (table.txt, results.json, *.hgrm, latency-acks*.svg and .png)"
    fi
else
    for round in $(seq 1 "$rounds"); do
        run_ringlog "$out/ringlog-$round" "$@"
        run_kafka "$out/kafka-$round" "$@"
    done
    python3 scripts/bench_compare.py "$out" >"$out/table.txt"
    # Both brokers' curves in one plot per acks setting (the first round's histograms).
    for acks in 1 all; do
        curves=()
        for hgrm in "$out"/ringlog-1/acks$acks-*b.hgrm "$out"/kafka-1/acks$acks-*b.hgrm; do
            [ -f "$hgrm" ] || continue
            broker=$(basename "$(dirname "$hgrm")" -1)
            size=${hgrm##*-}
            curves+=("$broker ${size%b.hgrm} B=$hgrm")
        done
        [ ${#curves[@]} -gt 0 ] || continue
        "$target/release/ringlog-bench" plot --output "$out/latency-acks$acks" \
            --title "acks=$acks: produce latency by percentile, ringlog and Kafka" \
            --subtitle "round 1 of $rounds; $(date -u +%Y-%m-%d)" "${curves[@]}" || status=$?
    done
    cat "$out/table.txt"
    echo
    echo "report: $out (table.txt, latency-acks*.svg/png; ringlog-N/ and kafka-N/: each round's report)"
fi
if [ "$status" -ne 0 ]; then
    echo "ringlog-bench matrix exited $status (errors are listed in the results.json files)" >&2
fi
exit "$status"
