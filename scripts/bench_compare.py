#!/usr/bin/env python3
"""One table of two brokers' matrix reports, measured side by side by scripts/bench.sh
--peer kafka: per cell (message size × acks) the median over rounds of each broker's
msgs/s, p50 and p99 latency and CPU-seconds per million messages, and ringlog's ratio to
the peer (msgs/s: ringlog ÷ peer, higher is better; p99 and CPU: peer ÷ ringlog, higher is
better too).

    scripts/bench_compare.py REPORT_DIR     # reads REPORT_DIR/{ringlog,kafka}-N/results.json

Then, when bench.sh wrote them: kafka-producer-perf-test's figures against both
(perf-test.txt in each round's folder), and consume throughput and end-to-end latency
(consume.json, e2e.json).
"""

import json
import re
import statistics
import sys
from pathlib import Path


def load(report_dir, broker):
    """{(size, acks): [summary, ...]} over rounds, and the rounds' broker labels."""
    cells, labels = {}, []
    for path in sorted(Path(report_dir).glob(f"{broker}-*/results.json")):
        report = json.loads(path.read_text())
        labels.append(report["environment"].get("broker", broker))
        for run in report["runs"]:
            cells.setdefault((run["message_bytes"], run["acks"]), []).append(run)
    return cells, labels


PERF_LINE = re.compile(
    r"acks=(?P<acks>\S+) cpu_s=(?P<cpu>[\d.]+) (?P<records>\d+) records sent, "
    r"(?P<rate>[\d.]+) records/sec .*?, (?P<p50>\d+) ms 50th, \d+ ms 95th, "
    r"(?P<p99>\d+) ms 99th")


def load_perf(report_dir, broker):
    """{acks: [(records/s, p50 ms, p99 ms, CPU s per M records)]} over rounds."""
    cells = {}
    for path in sorted(Path(report_dir).glob(f"{broker}-*/perf-test.txt")):
        for line in path.read_text().splitlines():
            m = PERF_LINE.match(line)
            if m:
                cells.setdefault(m["acks"], []).append((
                    float(m["rate"]), float(m["p50"]), float(m["p99"]),
                    float(m["cpu"]) / (int(m["records"]) / 1e6)))
    return cells


def print_perf(report_dir):
    ringlog, kafka = load_perf(report_dir, "ringlog"), load_perf(report_dir, "kafka")
    common = [a for a in ("1", "all") if a in ringlog and a in kafka]
    if not common:
        return
    print("\nkafka-producer-perf-test, 100 B records (medians; CPU s/M over the whole run, "
          "latency in whole ms)")
    print(f"{'acks':>5} | {'ringlog rec/s':>13} {'p50':>5} {'p99':>5} {'CPU s/M':>8} | "
          f"{'Kafka rec/s':>13} {'p50':>5} {'p99':>5} {'CPU s/M':>8} | {'rec/s':>6} {'CPU':>6}")
    for acks in common:
        r = [statistics.median(v) for v in zip(*ringlog[acks])]
        k = [statistics.median(v) for v in zip(*kafka[acks])]
        print(f"{acks:>5} | {r[0] / 1e6:>12.2f}M {r[1]:>5.0f} {r[2]:>5.0f} {r[3]:>8.3f} | "
              f"{k[0] / 1e6:>12.2f}M {k[1]:>5.0f} {k[2]:>5.0f} {k[3]:>8.3f} | "
              f"{ratio(r[0], k[0]):>6} {ratio(k[3], r[3]):>6}")


def print_reads(report_dir):
    """Consume throughput and end-to-end latency (consume.json, e2e.json per round)."""
    rows = []
    for kind, what in (("consume", "consume from earliest, 10 M x 100 B, 4 partitions"),
                       ("e2e", "e2e at 100 k msgs/s, produce to fetch")):
        figures = {}
        for broker in ("ringlog", "kafka"):
            runs = [json.loads(p.read_text()) for p in
                    sorted(Path(report_dir).glob(f"{broker}-*/{kind}.json"))
                    if p.stat().st_size]
            if runs:
                figures[broker] = (median(runs, lambda r: r["msgs_per_s"]),
                                   median(runs, lambda r: latency(r, "p50_ms")),
                                   median(runs, lambda r: latency(r, "p99_ms")))
        if len(figures) == 2:
            rows.append((what, figures["ringlog"], figures["kafka"]))
    if not rows:
        return
    print("\nreads (medians; consume: fetch round trip, e2e: send to fetch, ms)")
    for what, r, k in rows:
        print(f"{what}: ringlog {r[0] / 1e6:.2f} M msgs/s p50 {fmt(r[1])} p99 {fmt(r[2])} | "
              f"Kafka {k[0] / 1e6:.2f} M msgs/s p50 {fmt(k[1])} p99 {fmt(k[2])} | "
              f"msgs/s {ratio(r[0], k[0])}, p99 {ratio(k[2], r[2])}")


def median(runs, pick):
    values = [v for v in (pick(r) for r in runs) if v is not None]
    return statistics.median(values) if values else None


def latency(run, key):
    return run["latency"][key] if run["latency"]["count"] else None


def fmt(value, digits=3, scale=1.0):
    return "-" if value is None else f"{value / scale:.{digits}f}"


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    report_dir = sys.argv[1]
    ringlog, ringlog_labels = load(report_dir, "ringlog")
    kafka, kafka_labels = load(report_dir, "kafka")
    if not ringlog or not kafka:
        sys.exit(f"{report_dir}: no ringlog-N or kafka-N reports")
    rounds = min(len(ringlog_labels), len(kafka_labels))
    print(f"# ringlog: {ringlog_labels[0]}")
    print(f"# peer:    {kafka_labels[0]}")
    print(f"# medians over {rounds} round(s), brokers alternating\n")
    header = (f"{'size':>6} {'acks':>5} | {'msgs/s':>9} {'p50':>7} {'p99':>7} {'CPU s/M':>8} | "
              f"{'msgs/s':>9} {'p50':>7} {'p99':>7} {'CPU s/M':>8} | {'msgs/s':>7} {'p99':>7} {'CPU':>7}")
    print(f"{'':>12} | {'ringlog':^34} | {'Kafka':^34} | {'ringlog vs Kafka':^23}")
    print(header)
    order = {"0": 0, "1": 1, "all": 2}
    for size, acks in sorted(set(ringlog) & set(kafka), key=lambda c: (c[0], order.get(c[1], 3))):
        row = []
        figures = {}
        for name, cells in (("ringlog", ringlog), ("kafka", kafka)):
            runs = cells[(size, acks)]
            figures[name] = (
                median(runs, lambda r: r["msgs_per_s"]),
                median(runs, lambda r: latency(r, "p50_ms")),
                median(runs, lambda r: latency(r, "p99_ms")),
                median(runs, lambda r: r.get("broker_cpu_s_per_million")),
            )
            rate, p50, p99, cpu = figures[name]
            row.append(f"{fmt(rate, 2, 1e6):>8}M {fmt(p50):>7} {fmt(p99):>7} {fmt(cpu):>8}")
        r, k = figures["ringlog"], figures["kafka"]
        print(f"{size:>6} {acks:>5} | {row[0]} | {row[1]} | "
              f"{ratio(r[0], k[0]):>7} {ratio(k[2], r[2]):>7} {ratio(k[3], r[3]):>7}")
    print("\nlatency in ms; acks=0 has no acknowledgement, so no latency. CPU s/M: the broker "
          "process's CPU-seconds\n(user + system, /proc/<pid>/stat) per million messages. "
          "Ratios: ringlog's msgs/s over Kafka's; Kafka's\np99 and CPU over ringlog's (above 1: "
          "ringlog is ahead).")
    print_perf(report_dir)
    print_reads(report_dir)


if __name__ == "__main__":
    main()
