# Sourced by the benchmark scripts: the binaries under test and where reports go.
#
#   bench_env NAME    sets $target, $out (OUT, default $target/bench-reports/NAME-<UTC time>,
#                     created), $ringlog and $bench (RINGLOG_BIN and BENCH_BIN, default the
#                     release builds, built when missing)
bench_env() {
    target=${CARGO_TARGET_DIR:-$PWD/target}
    out=${OUT:-$target/bench-reports/$1-$(date -u +%Y%m%dT%H%M%SZ)}
    ringlog=${RINGLOG_BIN:-$target/release/ringlog}
    bench=${BENCH_BIN:-$target/release/ringlog-bench}
    if [ ! -x "$ringlog" ] || [ ! -x "$bench" ]; then
        cargo build --release -p broker --bin ringlog -p bench --bin ringlog-bench
    fi
    mkdir -p "$out"
}
