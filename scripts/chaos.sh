#!/usr/bin/env bash
# The long form of broker/tests/chaos.rs: an hour (by default) of kill -9 and restarts,
# SIGSTOP/SIGCONT pauses and network partitions against three replicating nodes under a
# steady acks=all workload, then the checker (no acknowledged record lost, order kept, one
# leader per epoch, replicas byte for byte the same). Prints the seed first; a failure
# prints it again with the fault schedule and the evidence, and the same seed replays the
# same schedule and writes.
#
#   scripts/chaos.sh                 an hour of faults, a random seed
#   scripts/chaos.sh 600             ten minutes
#   scripts/chaos.sh 3600 12345      an hour with seed 12345 (a replay)
#
# Needs: root (every node runs in a network namespace of its own and a partition is
# blackhole routes between them; the test sets and restores net.ipv4.ip_forward), iproute2's
# `ip` (`apt-get install iproute2`), and cargo to build the test (debug profile, as
# `cargo test` builds it; CARGO_TARGET_DIR is honoured). The run prints a line per fault as
# it goes. An hour's run keeps about 3 million records on each of the three nodes: about
# 1 GB of /tmp, and a few hundred MB of memory for the check at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-3600}
seed=${2:-$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')}
case $seconds in '' | *[!0-9]*) echo "chaos.sh: SECONDS is a whole number: $seconds" >&2; exit 2 ;; esac
case $seed in '' | *[!0-9]*) echo "chaos.sh: SEED is a whole number: $seed" >&2; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "chaos.sh: must run as root (network namespaces)" >&2; exit 2; }
command -v ip >/dev/null 2>&1 || { echo "chaos.sh: iproute2's ip is missing" >&2; exit 2; }

echo "chaos.sh: seed $seed, $seconds s of faults"
status=0
# CI=1: a test that cannot create network namespaces fails instead of skipping.
CI=1 CHAOS_SEED=$seed CHAOS_SECONDS=$seconds \
    cargo test -p broker --test chaos -- --nocapture || status=$?
if [ "$status" -ne 0 ]; then
    echo "chaos.sh: FAILED with seed $seed; replay: scripts/chaos.sh $seconds $seed" >&2
    exit "$status"
fi
echo "chaos.sh: passed, seed $seed, $seconds s of faults"
