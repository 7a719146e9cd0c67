#!/usr/bin/env bash
# Apache Kafka beside ringlog: fetches Kafka's broker from Maven Central (once, into a
# cache), formats KRaft storage and runs one node, or a 3-node KRaft cluster, on loopback
# ports of its own. Every node is broker and controller (combined mode, as ringlog nodes).
#
#   scripts/peer-kafka.sh start [--nodes 1|3] [--profile default|flush] [--cpus LIST]
#   scripts/peer-kafka.sh stop
#   scripts/peer-kafka.sh status | pid | version
#   scripts/peer-kafka.sh fetch      only fetch the jars (Kafka's client and tools, for tests)
#   scripts/peer-kafka.sh classpath  the jars' class path (fetching them first)
#
# Clients connect to 127.0.0.1:19192 (nodes 2 and 3: 19193, 19194); controllers listen on
# 19292-19294. The configuration written for each node is in $PEER_DIR/node-N/server.properties
# and is Kafka's default but for what a loopback test needs: listeners, one replica for
# internal topics when there is one node, no initial rebalance delay. The JVM gets Kafka's own
# start script settings (1 GiB heap, G1 with 20 ms pause target).
#
# Profiles: `default` leaves log.flush.* at Kafka's defaults, so acks=all means written to
# the page cache of every in-sync replica, never fsynced by the request. `flush` sets
# log.flush.interval.messages=1: Kafka then fsyncs the log after every append, in the
# request's thread, at every acks level; it is the nearest Kafka has to ringlog's fsynced
# acks=all, but it is not group commit (each append waits for its own fsync).
#
# Environment: PEER_DIR (default ./data-peer-kafka: node data, logs, pids), PEER_CACHE
# (default ${CARGO_TARGET_DIR:-target}/peer-kafka: the jars, so a second run is offline),
# KAFKA_HEAP_OPTS (default -Xms1g -Xmx1g).
set -euo pipefail
cd "$(dirname "$0")/.."

peer_dir=${PEER_DIR:-$PWD/data-peer-kafka}
cache=${PEER_CACHE:-${CARGO_TARGET_DIR:-$PWD/target}/peer-kafka}
client_port=19192
controller_port=19292

usage() { sed -n '2,10p' "$0"; exit 2; }

fetch() {
    if [ -f "$cache/lib/.complete" ]; then
        return
    fi
    command -v mvn >/dev/null || { echo "peer-kafka: mvn is missing (apt-get install maven)" >&2; exit 1; }
    echo "peer-kafka: fetching Apache Kafka into $cache" >&2
    rm -rf "$cache/lib"
    mvn -q -B -f scripts/peer-kafka/pom.xml dependency:copy-dependencies \
        -DoutputDirectory="$cache/lib" -Dmaven.repo.local="$cache/m2" >&2
    touch "$cache/lib/.complete"
}

# Kafka's own start script settings (kafka-run-class.sh, kafka-server-start.sh).
jvm() {
    # shellcheck disable=SC2086 # KAFKA_HEAP_OPTS holds several options
    echo ${KAFKA_HEAP_OPTS:--Xms1g -Xmx1g} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
        -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
        -Djava.awt.headless=true -Dlog4j2.configurationFile="$peer_dir/log4j2.properties"
}

java_run() { # class args...
    # shellcheck disable=SC2046 # one word per option
    java $(jvm) -cp "$cache/lib/*" "$@"
}

write_config() { # node nodes profile
    local node=$1 nodes=$2 profile=$3 dir="$peer_dir/node-$1" voters="" i
    for i in $(seq 1 "$nodes"); do
        voters+="${voters:+,}$i@127.0.0.1:$((controller_port + i - 1))"
    done
    mkdir -p "$dir"
    local replicas=$((nodes < 3 ? nodes : 3))
    cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$((client_port + node - 1)),CONTROLLER://127.0.0.1:$((controller_port + node - 1))
advertised.listeners=PLAINTEXT://127.0.0.1:$((client_port + node - 1))
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
offsets.topic.replication.factor=$replicas
transaction.state.log.replication.factor=$replicas
transaction.state.log.min.isr=$((replicas < 2 ? 1 : 2))
share.coordinator.state.topic.replication.factor=$replicas
share.coordinator.state.topic.min.isr=$((replicas < 2 ? 1 : 2))
group.initial.rebalance.delay.ms=0
EOF
    if [ "$profile" = flush ]; then
        echo "log.flush.interval.messages=1" >>"$dir/server.properties"
    fi
}

start() {
    local nodes=1 profile=default cpus=""
    while [ $# -gt 0 ]; do
        case $1 in
            --nodes) nodes=$2; shift 2 ;;
            --profile) profile=$2; shift 2 ;;
            --cpus) cpus=$2; shift 2 ;;
            *) usage ;;
        esac
    done
    case $nodes in 1|3) ;; *) usage ;; esac
    case $profile in default|flush) ;; *) usage ;; esac
    if [ -n "$(pids)" ]; then
        echo "peer-kafka: already running (scripts/peer-kafka.sh stop)" >&2
        exit 1
    fi
    fetch
    rm -rf "$peer_dir"
    mkdir -p "$peer_dir"
    cat >"$peer_dir/log4j2.properties" <<'EOF'
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
EOF
    local cluster_id node
    cluster_id=$(java_run kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
    local pin=()
    [ -n "$cpus" ] && pin=(taskset -c "$cpus")
    for node in $(seq 1 "$nodes"); do
        write_config "$node" "$nodes" "$profile"
        java_run kafka.tools.StorageTool format -t "$cluster_id" \
            -c "$peer_dir/node-$node/server.properties" >"$peer_dir/node-$node/format.log" 2>&1 \
            || { cat "$peer_dir/node-$node/format.log" >&2; exit 1; }
        # exec: the pid kept is the JVM's.
        # shellcheck disable=SC2046 # one word per option
        (exec "${pin[@]}" java $(jvm) -cp "$cache/lib/*" kafka.Kafka \
            "$peer_dir/node-$node/server.properties" >"$peer_dir/node-$node/kafka.log" 2>&1) &
        echo $! >"$peer_dir/node-$node/pid"
    done
    for node in $(seq 1 "$nodes"); do
        local log="$peer_dir/node-$node/kafka.log" waited=0
        until grep -q "Kafka Server started" "$log"; do
            if ! kill -0 "$(cat "$peer_dir/node-$node/pid")" 2>/dev/null; then
                echo "peer-kafka: node $node exited; its log:" >&2
                tail -n 40 "$log" >&2
                exit 1
            fi
            waited=$((waited + 1))
            [ "$waited" -lt 1200 ] || { echo "peer-kafka: node $node not started after 120 s" >&2; exit 1; }
            sleep 0.1
        done
    done
    echo "peer-kafka: $(kafka_version), $nodes node(s), profile $profile," \
        "bootstrap 127.0.0.1:$client_port, pids $(pids | tr '\n' ' ')" >&2
}

kafka_version() {
    echo "Apache Kafka $(ls "$cache/lib" | sed -n 's/^kafka-clients-\(.*\)\.jar$/\1/p')"
}

pids() {
    local f
    for f in "$peer_dir"/node-*/pid; do
        [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && cat "$f"
    done
    return 0
}

stop() {
    local pid
    for pid in $(pids); do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in $(pids); do
        for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    rm -f "$peer_dir"/node-*/pid
}

case ${1:-} in
    start) shift; start "$@" ;;
    stop) stop ;;
    fetch) fetch ;;
    classpath) fetch; echo "$cache/lib/*" ;;
    pid) pids | head -n 1 ;;
    version) kafka_version ;;
    status) if [ -n "$(pids)" ]; then echo "running: $(pids | tr '\n' ' ')"; else echo "stopped"; exit 1; fi ;;
    *) usage ;;
esac
