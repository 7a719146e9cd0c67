#!/usr/bin/env python3
"""Who had the CPUs while a Produce request waited for its answer.

Lines up `ringlog-bench produce --request-log FILE` with a scheduler trace taken beside it on
the same clock, and for every request whose round trip passed a threshold sums, per CPU, the
time each task ran between the request's send and its answer ("<idle>": nobody). A node CPU
held by another task points at the machine, an idle one at the generator, a busy node at the
node itself. Run as root beside a run (node on CPU 0, generator on CPU 1):

  perf sched record -k CLOCK_MONOTONIC -a -o sched.data -- sleep 14 &
  ringlog-bench produce --acks 1 --rate 5000000 --duration 8s --request-log requests.txt
  perf sched timehist -i sched.data -C 0 > cpu0.txt
  perf sched timehist -i sched.data -C 1 > cpu1.txt
  scripts/slow_requests.py requests.txt cpu0.txt cpu1.txt [--over-ms 1.5]
"""

import argparse
import bisect
import collections
import re


def requests(path):
    """(send s, answer s) of every request in a --request-log file."""
    out = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            send, answer, _first, _messages = (int(x) for x in line.split())
            out.append((send / 1e9, answer / 1e9))
    return out


def runs(path):
    """(start s, end s, task) of every stretch a task ran, from `perf sched timehist`."""
    out = []
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) < 6:
                continue
            try:
                end = float(fields[0])
                run_ms = float(fields[5])
            except ValueError:
                continue  # the header
            task = re.sub(r"\[.*", "", fields[2])
            out.append((end - run_ms / 1e3, end, task))
    out.sort()
    return out


def held(cpu_runs, starts, longest, a, b):
    """Milliseconds each task ran within [a, b)."""
    shares = collections.Counter()
    i = bisect.bisect_left(starts, a - longest)
    while i < len(cpu_runs) and cpu_runs[i][0] < b:
        start, end, task = cpu_runs[i]
        overlap = min(b, end) - max(a, start)
        if overlap > 0:
            shares[task] += overlap * 1e3
        i += 1
    return shares


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("request_log")
    parser.add_argument("timehist", nargs="+", help="perf sched timehist -C N, one per CPU")
    parser.add_argument("--over-ms", type=float, default=1.5)
    args = parser.parse_args()
    reqs = requests(args.request_log)
    cpus = []
    for path in args.timehist:
        r = runs(path)
        longest = max((end - start for start, end, _ in r), default=0.0)
        cpus.append((path, r, [start for start, _, _ in r], longest))
    slow = [(s, a) for s, a in reqs if (a - s) * 1e3 > args.over_ms]
    print(f"{len(slow)} of {len(reqs)} requests took over {args.over_ms} ms")
    totals = [collections.Counter() for _ in cpus]
    # Requests in flight together share their window: count each stretch of time once.
    windows = []
    for s, a in slow:
        if windows and s <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(windows[-1][1], a), windows[-1][2] + 1)
        else:
            windows.append((s, a, 1))
    t0 = reqs[0][0] if reqs else 0.0
    for s, a, n in windows:
        parts = []
        for k, (path, r, starts, longest) in enumerate(cpus):
            shares = held(r, starts, longest, s, a)
            totals[k].update(shares)
            top = ", ".join(f"{t} {ms:.2f}" for t, ms in shares.most_common(3))
            parts.append(f"cpu{k}: {top}")
        print(f"at {s - t0:8.4f} s  {(a - s) * 1e3:6.2f} ms  {n:3d} requests  " + " | ".join(parts))
    for k, (path, _, _, _) in enumerate(cpus):
        top = ", ".join(f"{t} {ms:.1f}" for t, ms in totals[k].most_common(8))
        print(f"{path}: ms held over all windows: {top}")


if __name__ == "__main__":
    main()
