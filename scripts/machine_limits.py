#!/usr/bin/env python3
"""The machine's limit for produce over loopback: the disk and loopback TCP, side by side.

A producer on this machine reaches the node through loopback TCP and the node writes what it
gets to the disk, so the most any broker can ingest here is the smaller of the two:

- the disk: fio's sequential O_DIRECT writes of 1 MiB, two in flight, from the node's CPU,
  into a file in DIR (the node's data disk), removed afterwards;
- loopback TCP: iperf3's one connection from the client's CPU to a receiver on the node's
  CPU, for each of --write-sizes: 64 KiB (a producer's request with ringlog-bench's default
  batch), 128 KiB (iperf3's default) and 1 MiB. The best of them is loopback's figure: a
  sender writing less at a time pays more per byte, which a broker cannot change.

Both are Debian packages (`apt-get install fio iperf3`). Run it in the same hour as the
benchmark whose ratio it bounds, with the node stopped:

    scripts/machine_limits.py ./data                         # node on CPU 0, client on CPU 1
    scripts/machine_limits.py ./data --json > machine.json   # the same figures as JSON
    scripts/machine_limits.py ./data --write-sizes 16K 64K 1M

Given the JSON it printed and a benchmark's (a `ringlog-bench matrix` results.json or one
`ringlog-bench produce --json` summary), it prints the figures again and each run's bytes of
batches a second as a share of the limit, without measuring anything:

    scripts/machine_limits.py --shares machine.json results.json
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size(text):
    """'64K' -> 65536, as fio and iperf3 read sizes (powers of two)."""
    unit = text[-1:].upper() if text[-1:].isalpha() else ""
    number = text[: len(text) - len(unit)]
    if unit not in UNITS or not number.isdigit() or int(number) == 0:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (like 65536, 64K or 1M)")
    return int(number) * UNITS[unit]


def shown(nbytes):
    for unit in ("G", "M", "K"):
        if nbytes % UNITS[unit] == 0:
            return f"{nbytes // UNITS[unit]} {unit}iB"
    return f"{nbytes} B"


def need(tool):
    if shutil.which(tool) is None:
        sys.exit(f"machine_limits.py: {tool} is missing (Debian: apt-get install {tool})")


def disk(directory, cpu, seconds, file_size):
    """Bytes a second of sequential 1 MiB O_DIRECT writes, two in flight."""
    path = os.path.join(directory, f"machine-limits-{os.getpid()}.fio")
    try:
        out = subprocess.run(
            ["fio", "--name=seq", f"--filename={path}", f"--size={file_size}",
             "--rw=write", "--bs=1m", "--iodepth=2", "--direct=1", "--ioengine=io_uring",
             "--time_based", f"--runtime={seconds}", f"--cpus_allowed={cpu}",
             "--output-format=json"],
            capture_output=True, text=True, check=True, timeout=seconds + 120,
        ).stdout
    finally:
        if os.path.exists(path):
            os.unlink(path)
    # fio prints notes before its JSON when something surprises it.
    return json.loads(out[out.index("{"):])["jobs"][0]["write"]["bw_bytes"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver:
    """An iperf3 server on 127.0.0.1 pinned to one CPU, for as long as the block runs."""

    def __init__(self, cpu):
        self.port = free_port()
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            ["iperf3", "--server", "--bind", "127.0.0.1", "--port", str(self.port),
             "--affinity", str(cpu)],
            stdout=self.log, stderr=subprocess.STDOUT,
        )

    def __enter__(self):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.process.poll() is None:
            if self.listening():
                return self
            time.sleep(0.05)
        self.process.kill()
        self.log.seek(0)
        sys.exit(f"machine_limits.py: iperf3's server did not listen: {self.log.read()}")

    def listening(self):
        """Whether 127.0.0.1:port is in LISTEN state (0A) in the kernel's TCP table."""
        local = f"0100007F:{self.port:04X}"
        with open("/proc/net/tcp") as table:
            return any(
                fields[1] == local and fields[3] == "0A"
                for fields in (line.split() for line in table)
            )

    def __exit__(self, *_):
        self.process.kill()
        self.process.wait()
        self.log.close()


def loopback(receiver, cpu, seconds, write_size):
    """Bytes a second one TCP connection carries from CPU `cpu` to the receiver."""
    run = subprocess.run(
        ["iperf3", "--client", "127.0.0.1", "--port", str(receiver.port),
         "--affinity", str(cpu), "--time", str(seconds), "--length", str(write_size),
         "--json"],
        capture_output=True, text=True, timeout=seconds + 60,
    )
    try:
        answer = json.loads(run.stdout)
    except json.JSONDecodeError:
        sys.exit(f"machine_limits.py: iperf3 failed: {run.stderr or run.stdout}")
    end = answer.get("end", {})
    if "sum_received" not in end:
        sys.exit(f"machine_limits.py: iperf3 failed: {answer.get('error', run.stdout)}")
    cpu_percent = end["cpu_utilization_percent"]
    return {
        "write_size": write_size,
        "bytes_per_s": end["sum_received"]["bits_per_second"] / 8,
        "sender_cpu_percent": cpu_percent["host_total"],
        "receiver_cpu_percent": cpu_percent["remote_total"],
    }


def measure(args):
    need("fio")
    need("iperf3")
    figures = {
        "node_cpu": args.node_cpu,
        "client_cpu": args.client_cpu,
        "seconds": args.seconds,
        "disk_bytes_per_s": disk(args.dir, args.node_cpu, args.seconds, args.file_size),
        "loopback": [],
    }
    with Receiver(args.node_cpu) as receiver:
        for write_size in args.write_sizes:
            figures["loopback"].append(
                loopback(receiver, args.client_cpu, args.seconds, write_size))
    best = max(figures["loopback"], key=lambda run: run["bytes_per_s"])
    if best["bytes_per_s"] < figures["disk_bytes_per_s"]:
        figures["limit"] = f"loopback, {shown(best['write_size'])} writes"
        figures["limit_bytes_per_s"] = best["bytes_per_s"]
    else:
        figures["limit"] = "the disk"
        figures["limit_bytes_per_s"] = figures["disk_bytes_per_s"]
    return figures


def report(figures):
    gb = lambda b: f"{b / 1e9:.2f} GB/s"  # noqa: E731
    lines = [
        f"disk: O_DIRECT 1 MiB writes, 2 in flight, CPU {figures['node_cpu']}: "
        f"{gb(figures['disk_bytes_per_s'])}"
    ]
    for run in figures["loopback"]:
        lines.append(
            f"loopback TCP: {shown(run['write_size'])} writes, CPU {figures['client_cpu']} -> "
            f"CPU {figures['node_cpu']}: {gb(run['bytes_per_s'])} (sender's CPU "
            f"{run['sender_cpu_percent']:.0f} %, receiver's {run['receiver_cpu_percent']:.0f} %)"
        )
    lines.append(f"limit: {gb(figures['limit_bytes_per_s'])} ({figures['limit']})")
    return "\n".join(lines)


def shares(figures, results):
    """Each run's batch bytes a second against the limit, one line per run."""
    runs = results.get("runs", [results])
    limit = figures["limit_bytes_per_s"]
    lines = []
    for run in runs:
        rate = run["wire_mb_per_s"] * 1e6
        lines.append(
            f"acks={run['acks']}, {run['message_bytes']} B: {rate / 1e9:.2f} GB/s of batches, "
            f"{100 * rate / limit:.0f} % of the limit ({limit / 1e9:.2f} GB/s, "
            f"{figures['limit']})"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", help="a directory on the node's data disk")
    parser.add_argument("--node-cpu", type=int, default=0, help="the node's CPU (default 0)")
    parser.add_argument("--client-cpu", type=int, default=1,
                        help="the producer's CPU (default 1)")
    parser.add_argument("--seconds", type=int, default=5, help="per measurement (default 5)")
    parser.add_argument("--write-sizes", type=size, nargs="+",
                        default=[64 << 10, 128 << 10, 1 << 20],
                        help="loopback's writes, each measured (default 64K 128K 1M)")
    parser.add_argument("--file-size", default="8g",
                        help="fio's file; the disk needs that much free (default 8g)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--shares", nargs=2, metavar=("MACHINE_JSON", "RESULTS_JSON"),
                        help="measure nothing: each run of RESULTS_JSON as a share of the limit")
    args = parser.parse_args()
    if args.shares:
        with open(args.shares[0]) as machine, open(args.shares[1]) as results:
            figures = json.load(machine)
            print(report(figures))
            print(shares(figures, json.load(results)))
        return
    if args.dir is None:
        parser.error("DIR is needed to measure the disk")
    figures = measure(args)
    print(json.dumps(figures, indent=2) if args.json else report(figures))


if __name__ == "__main__":
    main()
