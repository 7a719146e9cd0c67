#!/usr/bin/env python3
"""The disk's own durable append: the bound for acks=all latency with one request in flight.

Appends BLOCK-sized O_DIRECT writes to a fallocated file in DIR, making each durable before
the next (write + fdatasync, or one write with RWF_DSYNC), and prints latency percentiles.
With --write-only there is no sync: the O_DIRECT write alone, the bound for acks=1 (which
is answered once the write holding the batch completes).
Run it pinned to the CPU the node runs on, beside `ringlog-bench produce --acks all
--max-in-flight 1`:

    taskset -c 0 scripts/durable_append.py /work/data            # into newly allocated blocks
    taskset -c 0 scripts/durable_append.py /work/data --written   # into written blocks (spares)
    taskset -c 0 scripts/durable_append.py /work/data --dsync     # RWF_DSYNC instead of fdatasync
    taskset -c 0 scripts/durable_append.py /work/data --write-only --block 1048576  # acks=1's bound

With --rate the appends are paced at that many bytes a second (open loop, as
`ringlog-bench produce --rate` paces the node), so the percentiles are those of one write
while the disk carries the node's load: the bound for acks=1's p99 at that rate.

    taskset -c 0 scripts/durable_append.py /work/data --write-only --rate 250000000 --count 30000
"""

import argparse
import mmap
import os
import time


def percentile(sorted_ns, p):
    return sorted_ns[min(len(sorted_ns) - 1, int(p * len(sorted_ns)))] / 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="a directory on the disk to measure")
    parser.add_argument("--count", type=int, default=3000, help="appends (default 3000)")
    parser.add_argument("--block", type=int, default=64 << 10, help="bytes per append")
    parser.add_argument("--written", action="store_true",
                        help="write the file once first, so appends overwrite written blocks")
    parser.add_argument("--dsync", action="store_true",
                        help="one pwritev2(RWF_DSYNC) per append instead of pwrite + fdatasync")
    parser.add_argument("--write-only", action="store_true",
                        help="the O_DIRECT write alone, no fdatasync (acks=1's bound)")
    parser.add_argument("--rate", type=float, default=0,
                        help="bytes per second to pace the appends at (default: back to back)")
    args = parser.parse_args()
    if args.block % 4096:
        parser.error("--block must be a multiple of 4096 (O_DIRECT)")

    path = os.path.join(args.dir, "durable_append.tmp")
    size = args.count * args.block
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_RDWR | os.O_DIRECT, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
        if args.written:
            fill = memoryview(mmap.mmap(-1, 1 << 20))  # page aligned, as O_DIRECT needs
            for offset in range(0, size, 1 << 20):
                os.pwrite(fd, fill[: min(1 << 20, size - offset)], offset)
            os.fdatasync(fd)
        buf = mmap.mmap(-1, args.block)
        buf.write(b"x" * args.block)
        took = []
        interval_ns = int(args.block * 1e9 / args.rate) if args.rate > 0 else 0
        began = time.perf_counter_ns()
        for i in range(args.count):
            offset = i * args.block
            ahead_ns = began + i * interval_ns - time.perf_counter_ns()
            if ahead_ns > 0:
                time.sleep(ahead_ns / 1e9)
            start = time.perf_counter_ns()
            if args.dsync:
                os.pwritev(fd, [buf], offset, os.RWF_DSYNC)
            elif args.write_only:
                os.pwrite(fd, buf, offset)
            else:
                os.pwrite(fd, buf, offset)
                os.fdatasync(fd)
            took.append(time.perf_counter_ns() - start)
    finally:
        os.close(fd)
        os.unlink(path)
    took.sort()
    kind = ("RWF_DSYNC write" if args.dsync else "O_DIRECT write" if args.write_only
            else "write + fdatasync")
    blocks = "written" if args.written else "new"
    paced = f" at {args.rate / 1e6:.0f} MB/s" if args.rate > 0 else ""
    print(f"{kind}, {args.block} B into {blocks} blocks{paced}, {args.count} times: "
          f"p50 {percentile(took, 0.5):.0f} us, p90 {percentile(took, 0.9):.0f} us, "
          f"p99 {percentile(took, 0.99):.0f} us, max {took[-1] / 1000:.0f} us")


if __name__ == "__main__":
    main()
