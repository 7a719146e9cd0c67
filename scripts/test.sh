#!/usr/bin/env bash
# The one test command for ringlog: installs what the tests need, then runs
# formatting and lint checks, the Rust tests, a release build of the broker,
# and the interop tests with real Kafka clients (kcat, confluent-kafka, kafka-python,
# Kafka's Java client and tools) against that build. Stops at the first failing step and
# says which.
#
#   scripts/test.sh                 everything, as CI runs it
#   scripts/test.sh -k kcat         extra arguments go to pytest
#   RINGLOG_SKIP_RUST=1 scripts/test.sh   skip fmt/clippy/cargo test (local iteration)
set -euo pipefail
cd "$(dirname "$0")/.."

started=$SECONDS
step() { printf '\n==> %s (at %ds)\n' "$*" $((SECONDS - started)); }
fail() { printf '\ntest.sh: FAILED: %s\n' "$*" >&2; exit 1; }

step "installing test dependencies"
if ! command -v kcat >/dev/null 2>&1; then
    [ "$(id -u)" -eq 0 ] || fail "kcat is missing; install Debian's package: sudo apt-get install kcat"
    apt-get update -qq >/dev/null || fail "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null \
        || fail "apt-get install kcat"
fi
kcat -V 2>&1 | grep -m1 '^Version' || fail "kcat does not run"
# broker/tests/network_partition.rs runs its nodes in network namespaces with iproute2's `ip`
# (as root; without root it skips, so only root needs it, and CI runs as root).
if ! command -v ip >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq >/dev/null || fail "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null \
        || fail "apt-get install iproute2"
fi
# scripts/interop/test_bench_tools.py measures the machine with fio and iperf3, as
# scripts/machine_limits.py does beside a benchmark.
for tool in fio iperf3; do
    command -v "$tool" >/dev/null 2>&1 && continue
    [ "$(id -u)" -eq 0 ] || fail "$tool is missing; install Debian's package: sudo apt-get install $tool"
    apt-get update -qq >/dev/null || fail "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool" >/dev/null \
        || fail "apt-get install $tool"
done
command -v python3 >/dev/null 2>&1 || fail "python3 is missing"
python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore \
    -r scripts/requirements.txt || fail "pip install -r scripts/requirements.txt"
# Kafka's Java client and tools (scripts/interop/test_java_client.py, test_kafka_tools.py):
# Java 17 and Maven, which fetches the jars once into the target dir.
for tool in java mvn; do
    command -v "$tool" >/dev/null 2>&1 && continue
    [ "$(id -u)" -eq 0 ] || fail "$tool is missing; install Debian's openjdk-17-jdk-headless and maven"
    apt-get update -qq >/dev/null || fail "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null \
        || fail "apt-get install openjdk-17-jdk-headless maven"
done
java -version 2>&1 | head -n 1
scripts/peer-kafka.sh fetch || fail "fetching Kafka's client and tools (scripts/peer-kafka.sh fetch)"

if [ "${RINGLOG_SKIP_RUST:-0}" != 1 ]; then
    step "cargo fmt --check"
    cargo fmt --all -- --check || fail "formatting differs: run \`cargo fmt --all\`"
    step "cargo clippy"
    cargo clippy --workspace --all-targets -- -D warnings || fail "clippy warnings"
    step "cargo test"
    cargo test --workspace || fail "cargo test"
fi

step "cargo build --release -p broker"
cargo build --release -p broker || fail "release build of the broker"
target_dir=${CARGO_TARGET_DIR:-target}
case $target_dir in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
RINGLOG_BIN="$target_dir/release/ringlog"
[ -x "$RINGLOG_BIN" ] || fail "no broker binary at $RINGLOG_BIN"
export RINGLOG_BIN

step "interop tests (pytest scripts/interop) against $RINGLOG_BIN"
junit="$(mktemp -d)/interop.xml"
status=0
python3 -m pytest -q scripts/interop --junitxml="$junit" "$@" || status=$?
# librdkafka may log after pytest's own summary; the counts are repeated as
# the very last line.
summary=$(python3 - "$junit" <<'PY' || true
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
n = lambda key: sum(int(s.get(key, 0)) for s in suites)
failed = n("failures") + n("errors")
skipped = n("skipped")
print(f"interop: {n('tests') - failed - skipped} passed, {failed} failed, {skipped} skipped")
PY
)
case $status in
    0) ;;
    5) fail "pytest collected no tests" ;;
    *) fail "interop tests (pytest exit $status)${summary:+; $summary}" ;;
esac
step "all tests passed in $((SECONDS - started))s"
echo "$summary"
