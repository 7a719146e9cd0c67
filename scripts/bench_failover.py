#!/usr/bin/env python3
"""Replication lag and failover under full load, on the 3-node loopback cluster.

Each round starts scripts/cluster.sh (3 nodes, one shard each, unpinned), or with
PEER=kafka Apache Kafka's 3-node KRaft cluster (scripts/peer-kafka.sh start --nodes 3,
Kafka's defaults), and runs `ringlog-bench produce` at full speed against it: RF 3,
min.insync.replicas=2, acks=all, PRODUCERS producers over PARTITIONS partitions. While it
runs:

- replication lag, sampled every 50 ms: for each partition, each follower's log end
  offset and then the leader's (ListOffsets latest asked as Kafka's debugging replica id
  -2, which every replica answers from its own log), lag = leader − follower, in
  messages. The two answers are up to a fraction of a millisecond apart, which overstates
  the lag by at most the messages written in between.
- failover: at KILL_AT seconds the leader of partition 0 is killed with SIGKILL
  (scripts/cluster.sh kill); a probe on the survivors then asks Metadata every 10 ms for
  a new leader and, once there is one, writes one record there with acks=all until it is
  acknowledged. Printed: the time to a new leader and to the first acknowledged write,
  from the kill, and whether the killed node was also the active controller (its
  successor is elected first; the active controller is asked of the controllers with
  DescribeQuorum before the kill).

  scripts/bench_failover.py                      one round
  ROUNDS=3 SIZE=1024 scripts/bench_failover.py
  PEER=kafka ROUNDS=3 scripts/bench_failover.py  the same against Apache Kafka

Environment: ROUNDS (1), SIZE (message bytes, 100), PRODUCERS (4), PARTITIONS (3),
DURATION (seconds of load, 20), KILL_AT (seconds into the load, 10), SETTINGS (K=V
settings of every ringlog node, space-separated), PEER (unset: ringlog; kafka), RINGLOG_BIN
and BENCH_BIN (default: the release builds, built if missing).
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts" / "interop"))
import kafka_wire as wire  # noqa: E402

NODES = (1, 2, 3)
TOPIC = "failover"
SAMPLE_EVERY_S = 0.05
PROBE_EVERY_S = 0.01
FAILOVER_LIMIT_S = 60.0


def env_int(name, default):
    return int(os.environ.get(name, default))


class Ringlog:
    """scripts/cluster.sh: clients on 9092-9094, controllers on 19093-19095."""

    name = "ringlog"
    client_port = 9092
    controller_port = 19093

    def __init__(self, work, settings):
        self.env = dict(os.environ, CLUSTER_DIR=str(work / "cluster"), RINGLOG=RINGLOG)
        self.settings = settings
        self.work = work

    def script(self, *args):
        subprocess.run([str(ROOT / "scripts" / "cluster.sh"), *args], env=self.env,
                       check=True, stdout=subprocess.DEVNULL)

    def start(self):
        self.script("start", "--nodes", "3", "--cores", "1",
                    *[arg for setting in self.settings for arg in ("--set", setting)])

    def kill(self, node_id):
        self.script("kill", str(node_id))

    def stop(self):
        self.script("stop")
        subprocess.run(["rm", "-rf", str(self.work / "cluster")], check=True)


class Kafka:
    """scripts/peer-kafka.sh --nodes 3: clients on 19192-19194, controllers on 19292-19294."""

    name = "kafka"
    client_port = 19192
    controller_port = 19292

    def __init__(self, work, settings):
        if settings:
            raise SystemExit("SETTINGS apply to ringlog nodes only")
        self.peer_dir = work / "peer-kafka"
        self.env = dict(os.environ, PEER_DIR=str(self.peer_dir))

    def script(self, *args):
        subprocess.run([str(ROOT / "scripts" / "peer-kafka.sh"), *args], env=self.env,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self):
        self.script("start", "--nodes", "3")
        # The script returns once the ports listen; a broker serves topics only once the
        # controller has unfenced it, which Metadata shows as the broker listed.
        node = Node(1, self.client_port)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            meta = node.metadata()
            if meta is not None and len(meta["brokers"]) == len(NODES):
                break
            time.sleep(0.2)
        node.close()

    def kill(self, node_id):
        pid_file = self.peer_dir / f"node-{node_id}" / "pid"
        pid = int(pid_file.read_text())
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}").exists():
            time.sleep(0.05)
        pid_file.unlink()

    def stop(self):
        self.script("stop")
        subprocess.run(["rm", "-rf", str(self.peer_dir)], check=True)


class Node:
    """One persistent connection to a node's port, reopened after a failure."""

    def __init__(self, node_id, base_port):
        self.node_id = node_id
        self.port = base_port + node_id - 1
        self.sock = None
        self.correlation_id = 0

    def call(self, frame_of, parse, timeout=5.0, flexible_header=False):
        """Sends frame_of(correlation id), returns parse(body); None if the node is gone."""
        try:
            if self.sock is None:
                self.sock = wire.connect(self.port, timeout)
            self.correlation_id += 1
            self.sock.sendall(frame_of(self.correlation_id))
            _, body = wire.read_response(self.sock, timeout, flexible_header)
            return parse(body)
        except (OSError, wire.ConnectionClosed, TimeoutError, ValueError):
            self.close()
            return None

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def metadata(self):
        return self.call(lambda c: wire.metadata_v4_request([TOPIC], c),
                         lambda body: wire.parse_metadata_v1(body, 4))

    def log_end(self, partition):
        """The log end offset of this node's replica of `partition`, or None."""
        answer = self.call(
            lambda c: wire.list_offsets_request(5, TOPIC, partition, -1, c, replica_id=-2),
            lambda body: wire.parse_list_offsets(5, body),
        )
        if answer is None:
            return None
        error, _, offset, _ = answer[(TOPIC, partition)]
        return offset if error == 0 else None

    def produce_one(self, partition):
        """Writes one record with acks=all; its error code, or None if the node is gone."""
        batch = wire.record_batch([(b"probe", b"after-the-kill")])
        answer = self.call(
            lambda c: wire.produce_v3_request(TOPIC, partition, batch, c, acks=-1,
                                              timeout_ms=2000),
            wire.parse_produce_v3,
        )
        return None if answer is None else answer[0][(TOPIC, partition)][0]

    def quorum_leader(self):
        """Asked of a controller: the metadata quorum's leader (the active controller)."""
        return self.call(describe_quorum_request, parse_quorum_leader, flexible_header=True)


def describe_quorum_request(correlation_id):
    """DescribeQuorum v0 (flexible) for the metadata log's one partition."""
    partition = wire.int32(0) + wire.uvarint(0)
    topic = (wire.compact_string("__cluster_metadata") + wire.compact_array([partition])
             + wire.uvarint(0))
    body = wire.compact_array([topic]) + wire.uvarint(0)
    return wire.request(55, 0, correlation_id, body, flexible=True)


def parse_quorum_leader(body):
    """The leader id of a DescribeQuorum v0 answer's first partition, or None."""
    r = wire.Reader(body)
    if r.int16() != 0 or r.uvarint() < 2:
        return None
    r.compact_string()
    if r.uvarint() < 2:
        return None
    r.int32()  # partition index
    if r.int16() != 0:
        return None
    leader = r.int32()
    return leader if leader >= 0 else None


def leaders(node):
    """{partition: leader} of the topic as `node` sees it, or None. (Metadata's controller
    is not the active one on Kafka, which names any broker: see `active_controller`.)"""
    meta = node.metadata()
    if meta is None or TOPIC not in meta["topics"]:
        return None
    topic = meta["topics"][TOPIC]
    return {p["index"]: p["leader"] for p in topic["partitions"]}


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0


def active_controller(controllers):
    """The metadata quorum's leader, as the first controller that knows it answers."""
    for controller in controllers.values():
        leader = controller.quorum_leader()
        if leader is not None:
            return leader
    return None


def one_round(cluster, work, size, producers, partitions, duration, kill_at):
    cluster.start()
    load_errors = open(work / "load.err", "w+")
    nodes = {i: Node(i, cluster.client_port) for i in NODES}
    controllers = {i: Node(i, cluster.controller_port) for i in NODES}
    load = subprocess.Popen(
        [BENCH, "produce", "--bootstrap-server", f"127.0.0.1:{cluster.client_port}",
         "--topic", TOPIC, "--partitions", str(partitions), "--replication-factor", "3",
         "--topic-config", "min.insync.replicas=2", "--producers", str(producers),
         "--message-size", str(size), "--acks=-1", "--duration", f"{duration}s",
         "--warmup", "0s"],
        stdout=subprocess.DEVNULL, stderr=load_errors)
    try:
        started = time.monotonic()
        placement = None
        while placement is None or len(placement) < partitions or -1 in placement.values():
            if load.poll() is not None:
                load_errors.seek(0)
                raise RuntimeError(f"the load stopped: {load_errors.read().strip()}")
            if time.monotonic() - started > 30:
                raise RuntimeError("the topic has no leaders after 30 s")
            time.sleep(0.05)
            placement = leaders(nodes[1])
        # Lag under full load, until the kill.
        lags = []
        first_ends = last_ends = None  # (time, the leaders' log ends summed)
        while time.monotonic() - started < kill_at:
            leader_ends = 0
            for partition, leader in placement.items():
                followers = [n for n in NODES if n != leader]
                ends = {n: nodes[n].log_end(partition) for n in followers}
                leader_end = nodes[leader].log_end(partition)
                leader_ends += leader_end or 0
                for n, end in ends.items():
                    if end is not None and leader_end is not None:
                        lags.append(max(0, leader_end - end))
            last_ends = (time.monotonic(), leader_ends)
            first_ends = first_ends or last_ends
            time.sleep(SAMPLE_EVERY_S)
        # Failover: partition 0's leader as the cluster sees it now.
        current = leaders(nodes[placement[0]])
        controller = active_controller(controllers)
        victim = (current or placement)[0]
        if current != placement:
            print(f"(leaders moved during the load: {placement} then {current})", flush=True)
        # Timed from the signal: the script returns once the process is gone, which can take
        # a second when its in-flight disk writes must finish first.
        killed = time.monotonic()
        cluster.kill(victim)
        nodes[victim].close()
        controllers[victim].close()
        survivors = [n for n in NODES if n != victim]
        new_leader_s = first_write_s = None
        while time.monotonic() - killed < FAILOVER_LIMIT_S and first_write_s is None:
            placement_now = leaders(nodes[survivors[0]])
            leader = (placement_now or {}).get(0, -1)
            if leader in survivors:
                if new_leader_s is None:
                    new_leader_s = time.monotonic() - killed
                if nodes[leader].produce_one(0) == 0:
                    first_write_s = time.monotonic() - killed
            time.sleep(PROBE_EVERY_S)
        load.wait(timeout=duration + 60)
    finally:
        if load.poll() is None:
            load.kill()
        for node in [*nodes.values(), *controllers.values()]:
            node.close()
        cluster.stop()
        load_errors.close()
    return {
        "lag_samples": len(lags),
        "lag_p50": percentile(lags, 0.50),
        "lag_p99": percentile(lags, 0.99),
        "lag_max": max(lags, default=0),
        "victim": victim,
        "victim_was_controller": controller == victim,
        "new_leader_s": new_leader_s,
        "first_write_s": first_write_s,
        "msgs_per_s": (last_ends[1] - first_ends[1]) / max(last_ends[0] - first_ends[0], 1e-9),
    }


def seconds(value):
    return "none" if value is None else f"{value:.2f} s"


def main():
    rounds = env_int("ROUNDS", 1)
    size = env_int("SIZE", 100)
    producers = env_int("PRODUCERS", 4)
    partitions = env_int("PARTITIONS", 3)
    duration = env_int("DURATION", 20)
    kill_at = env_int("KILL_AT", 10)
    settings = os.environ.get("SETTINGS", "").split()
    peer = {"": Ringlog, "ringlog": Ringlog, "kafka": Kafka}[os.environ.get("PEER", "")]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {commit}, {peer.name}: "
          f"{size} B, "
          f"{producers} producers, {partitions} partitions, RF 3, acks=all, "
          f"kill -9 of partition 0's leader at {kill_at} s of {duration} s"
          + (f"; {' '.join(settings)}" if settings else ""))
    failed = False
    for round_number in range(1, rounds + 1):
        with tempfile.TemporaryDirectory() as tmp:
            r = one_round(peer(Path(tmp), settings), Path(tmp), size, producers, partitions,
                          duration, kill_at)
        kb = size / 1024
        print(f"round {round_number}: {r['msgs_per_s'] / 1e6:.2f} M msgs/s before the kill;"
              f" lag over {r['lag_samples']} samples: p50 {r['lag_p50']} msgs"
              f" ({r['lag_p50'] * kb:.0f} KiB), p99 {r['lag_p99']} ({r['lag_p99'] * kb:.0f} KiB),"
              f" max {r['lag_max']}; node {r['victim']} killed"
              f"{' (the active controller)' if r['victim_was_controller'] else ''}:"
              f" a new leader after {seconds(r['new_leader_s'])},"
              f" the first acks=all write after {seconds(r['first_write_s'])}", flush=True)
        failed |= r["first_write_s"] is None
    return 1 if failed else 0


def release_binary(variable, name):
    path = os.environ.get(variable) or str(
        Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / name)
    if not os.access(path, os.X_OK):
        subprocess.run(["cargo", "build", "--release", "--bins"], cwd=ROOT, check=True)
    return path


if __name__ == "__main__":
    RINGLOG = release_binary("RINGLOG_BIN", "ringlog")
    BENCH = release_binary("BENCH_BIN", "ringlog-bench")
    socket.setdefaulttimeout(10)
    sys.exit(main())
