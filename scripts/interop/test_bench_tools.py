"""The benchmark scripts' own logic.

scripts/slow_requests.py must charge each task exactly the time it ran inside a slow
request's wait, on every CPU given, and leave fast requests out (inputs made up here).
scripts/machine_limits.py must measure the disk and loopback TCP with the real tools, name
the smaller as the limit, leave no file behind, and share a benchmark's rate against it.
scripts/client_cpu.py must really send its messages through librdkafka (every one stored)
and charge the node's CPU to them.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "slow_requests.py"
MACHINE_LIMITS = Path(__file__).resolve().parents[1] / "machine_limits.py"
CLIENT_CPU = Path(__file__).resolve().parents[1] / "client_cpu.py"

HEADER = """\
           time    cpu  task name                       wait time  sch delay   run time
                        [tid/pid]                          (msec)     (msec)     (msec)
--------------- ------  ------------------------------  ---------  ---------  ---------
"""


def timehist(cpu, stretches):
    """`perf sched timehist -C cpu` text: (task, start s, end s) per stretch it ran."""
    lines = [HEADER]
    for task, start, end in stretches:
        run_ms = (end - start) * 1e3
        lines.append(
            f"{end:15.6f} [{cpu:04d}]  {task:<30}  {0.0:9.3f}  {0.0:9.3f}  {run_ms:9.3f}\n"
        )
    return "".join(lines)


def test_slow_requests_charges_each_task_its_time_inside_the_wait(tmp_path):
    ns = lambda s: round(s * 1e9)  # noqa: E731
    log = tmp_path / "requests.txt"
    log.write_text(
        "# send_ns answer_ns first_intended_ns messages (CLOCK_MONOTONIC)\n"
        # fast: 0.1 ms, left out
        f"{ns(99.0)} {ns(99.0001)} {ns(99.0)} 595\n"
        # slow: 4 ms, from 100.000 to 100.004 s
        f"{ns(100.0)} {ns(100.004)} {ns(99.9999)} 595\n"
    )
    cpu0 = tmp_path / "cpu0.txt"
    cpu0.write_text(
        timehist(
            0,
            [
                ("shard-0-1[7249/7245]", 99.9990, 100.0005),  # 0.5 ms inside
                ("kdamond.0[107]", 100.0005, 100.0035),  # 3 ms inside
                ("shard-0-1[7249/7245]", 100.0035, 100.0100),  # 0.5 ms inside
            ],
        )
    )
    cpu1 = tmp_path / "cpu1.txt"
    cpu1.write_text(timehist(1, [("bench-core0-2[9/9]", 99.998, 100.001)]))  # 1 ms inside
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(log), str(cpu0), str(cpu1)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "1 of 2 requests took over 1.5 ms" in out, out
    totals = {line.split(":")[0]: line for line in out.splitlines() if "held over" in line}
    assert "kdamond.0 3.0" in totals[str(cpu0)], out
    assert "shard-0-1 1.0" in totals[str(cpu0)], out
    assert "bench-core0-2 1.0" in totals[str(cpu1)], out


def test_machine_limits_measures_the_disk_and_loopback_and_names_the_smaller(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    cpus = sorted(os.sched_getaffinity(0))
    measured = subprocess.run(
        [sys.executable, str(MACHINE_LIMITS), str(data), "--node-cpu", str(cpus[0]),
         "--client-cpu", str(cpus[-1]), "--seconds", "1", "--file-size", "64m",
         "--write-sizes", "16K", "1M", "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert measured.returncode == 0, measured.stderr
    figures = json.loads(measured.stdout)
    # Any disk and any loopback carry more than 10 MB/s.
    assert figures["disk_bytes_per_s"] > 10e6, figures
    assert [run["write_size"] for run in figures["loopback"]] == [16 << 10, 1 << 20], figures
    assert all(run["bytes_per_s"] > 10e6 for run in figures["loopback"]), figures
    best = max(figures["loopback"], key=lambda run: run["bytes_per_s"])
    assert figures["limit_bytes_per_s"] == min(best["bytes_per_s"], figures["disk_bytes_per_s"])
    by_size = {16 << 10: "loopback, 16 KiB writes", 1 << 20: "loopback, 1 MiB writes"}
    loopback_smaller = best["bytes_per_s"] < figures["disk_bytes_per_s"]
    assert figures["limit"] == (by_size[best["write_size"]] if loopback_smaller else "the disk")
    assert list(data.iterdir()) == [], "fio's file was left behind"

    machine = tmp_path / "machine.json"
    machine.write_text(measured.stdout)
    summary = tmp_path / "summary.json"  # one `ringlog-bench produce --json` summary
    summary.write_text(json.dumps(
        {"acks": "1", "message_bytes": 100, "wire_mb_per_s": figures["limit_bytes_per_s"] / 4e6}
    ))
    out = subprocess.run(
        [sys.executable, str(MACHINE_LIMITS), "--shares", str(machine), str(summary)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    assert "loopback TCP: 16 KiB writes" in out and "loopback TCP: 1 MiB writes" in out, out
    assert f"limit: {figures['limit_bytes_per_s'] / 1e9:.2f} GB/s ({figures['limit']})" in out
    assert "acks=1, 100 B:" in out and "25 % of the limit" in out, out


def test_machine_limits_refuses_a_size_it_cannot_read(tmp_path):
    refused = subprocess.run(
        [sys.executable, str(MACHINE_LIMITS), str(tmp_path), "--write-sizes", "64Q"],
        capture_output=True, text=True, timeout=60,
    )
    assert refused.returncode == 2, refused
    assert "not a size: '64Q'" in refused.stderr, refused.stderr


def test_client_cpu_sends_every_message_and_charges_the_nodes_cpu(broker):
    messages = 200_000
    out = subprocess.run(
        [sys.executable, str(CLIENT_CPU), "--bootstrap-server", broker.bootstrap,
         "--broker-pid", str(broker.proc.pid), "--topic", "cpu", "--partitions", "3",
         "--messages", str(messages), "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["messages"], result["failed"], result["acks"]) == (messages, 0, "all")
    assert result["broker_cpu_seconds"] > 0, result
    assert result["broker_cpu_seconds_per_million"] == round(
        result["broker_cpu_seconds"] / (messages / 1e6), 4)

    # Stored, warm-up included: the load was real, on every partition.
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cpu-check"})
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition("cpu", p), timeout=10)[1]
                for p in range(3)]
    finally:
        consumer.close()
    warmup = max(1000, messages // 50)
    assert sum(ends) == messages + warmup, ends
    assert max(ends) - min(ends) <= 2, ends  # round robin, warm-up and run each from 0
