#!/usr/bin/env bash
# Runs the benchmark matrix against a fresh single ringlog node and prints the table.
#
# Builds ringlog and ringlog-bench in release, starts `ringlog serve` on a temporary log dir
# and a free 127.0.0.1 port, runs `ringlog-bench matrix` (acks 0, 1, all × 100 B and 1 KiB by
# default), prints table.txt, and stops the node (also on failure or Ctrl-C).
#
#   scripts/bench.sh                                  the default matrix
#   scripts/bench.sh --duration 30s --warmup 5s       extra arguments go to `ringlog-bench matrix`
#   OUT=reports/run1 scripts/bench.sh                 where the report folder goes
#   RINGLOG_CORES=1 LOG_IO_MODE=buffered scripts/bench.sh
#   KEEP_DATA=1 scripts/bench.sh                      keep the node's log dir and log
#   RINGLOG_BIN=path/to/ringlog scripts/bench.sh      use that broker binary instead of building one
#
# Defaults: the node gets 1 core (RINGLOG_CORES), pinned to the first CPUs with taskset, and
# the generator the remaining CPUs; the report goes to target/bench-reports/<UTC date>.
set -euo pipefail
cd "$(dirname "$0")/.."

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
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    if [ "${KEEP_DATA:-0}" = 1 ]; then
        echo "node data and log kept in $dir" >&2
    else
        rm -rf "$dir"
    fi
}
trap cleanup EXIT INT TERM

# A port below the kernel's ephemeral range (ip_local_port_range), where no client's source
# port can take it; a taken one makes the node exit with "address already in use".
port=$((20000 + RANDOM % 10000))
listener="PLAINTEXT://127.0.0.1:$port"
io_mode=()
[ -n "${LOG_IO_MODE:-}" ] && io_mode=(--set "log.io.mode=$LOG_IO_MODE")

# Keep the node and the generator on separate CPUs: both pin one executor per CPU they may
# use, so without this they would share the first CPU.
cpus=$(nproc)
node_cpus=(); bench_cpus=()
if [ "$cpus" -gt "$cores" ]; then
    node_cpus=(taskset -c "0-$((cores - 1))")
    bench_cpus=(taskset -c "$cores-$((cpus - 1))")
fi

echo "==> starting ringlog on 127.0.0.1:$port ($cores core(s), data in $dir)" >&2
"${node_cpus[@]}" "$ringlog" serve --cores "$cores" \
    --set "log.dirs=$dir/data" --set "listeners=$listener" --set "advertised.listeners=$listener" \
    "${io_mode[@]}" >"$dir/ringlog.log" 2>&1 &
pid=$!

# Ready means every shard has opened its partitions and the listener accepts ("ready" line).
for _ in $(seq 1 300); do
    grep -q ' ready ' "$dir/ringlog.log" 2>/dev/null && break
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "ringlog exited before it was ready; its log:" >&2
        cat "$dir/ringlog.log" >&2
        exit 1
    fi
    sleep 0.1
done
grep -q ' ready ' "$dir/ringlog.log" || { echo "ringlog was not ready after 30 s" >&2; exit 1; }

if [ -n "${RINGLOG_BIN:-}" ]; then
    label="ringlog $RINGLOG_BIN, $cores core(s)"
else
    label="ringlog $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $cores core(s)"
fi
[ -n "${LOG_IO_MODE:-}" ] && label="$label, log.io.mode=$LOG_IO_MODE"

echo "==> ringlog-bench matrix -> $out" >&2
status=0
"${bench_cpus[@]}" "$target/release/ringlog-bench" matrix --bootstrap-server "127.0.0.1:$port" --output "$out" \
    --broker-label "$label" "$@" >/dev/null || status=$?

if [ -f "$out/table.txt" ]; then
    cat "$out/table.txt"
    echo
    echo "report: $out (table.txt, results.json, *.hgrm, latency-acks*.svg and .png)"
fi
if [ "$status" -ne 0 ]; then
    echo "ringlog-bench matrix exited $status (errors are listed in $out/results.json)" >&2
    echo "last lines of the node's log:" >&2
    tail -n 20 "$dir/ringlog.log" >&2
fi
exit "$status"
