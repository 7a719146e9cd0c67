#!/usr/bin/env python3
"""What freeing files costs another thread's writes on the same disk.

One thread appends 64 KiB O_DIRECT writes to a new file in DIR (one every 0.5 ms plus the
write itself, into newly allocated blocks, as a log's active segment) and prints their
latency percentiles, while a second thread frees files written beforehand: one 16 MiB
file every 100 ms (what a cleaner replacing 16 MiB segments frees), either unlinked whole
(`--free whole`) or first cut down `--chunk-mib` at a time with a 2 ms pause between cuts
(`--free chunked`), or nothing (`--free none`). On a `discard` mount the freed extents go
to the disk as discards, and a write that needs the file system's journal meanwhile waits.
Run it pinned to one CPU, each mode several times in turn:

    for round in 1 2 3; do for free in none whole chunked; do
        taskset -c 0 scripts/free_stall.py /work/data --free $free
    done; done
"""

import argparse
import mmap
import os
import threading
import time

WRITE_BYTES = 64 << 10
FILE_BYTES = 16 << 20


def prepare(directory, files):
    data = os.urandom(1 << 20)
    paths = []
    for i in range(files):
        path = os.path.join(directory, f"free-stall-victim-{i}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for _ in range(FILE_BYTES // len(data)):
                os.write(fd, data)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        paths.append(path)
    return paths


def free_files(paths, mode, chunk_bytes, stop):
    for path in paths:
        if stop.is_set():
            return
        if mode == "chunked":
            fd = os.open(path, os.O_WRONLY)
            try:
                size = os.fstat(fd).st_size
                while size > 0:
                    size = max(0, size - chunk_bytes)
                    os.ftruncate(fd, size)
                    time.sleep(0.002)
            finally:
                os.close(fd)
        os.unlink(path)
        time.sleep(0.1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="a directory on the disk to measure")
    parser.add_argument("--free", choices=["none", "whole", "chunked"], default="whole")
    parser.add_argument("--chunk-mib", type=int, default=1, help="bytes per cut, chunked")
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()

    os.makedirs(args.dir, exist_ok=True)
    victims = [] if args.free == "none" else prepare(args.dir, 60)
    appends = os.path.join(args.dir, "free-stall-appends")
    fd = os.open(appends, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    block = mmap.mmap(-1, WRITE_BYTES)
    block.write(os.urandom(WRITE_BYTES))
    stop = threading.Event()
    freer = threading.Thread(
        target=free_files, args=(victims, args.free, args.chunk_mib << 20, stop))
    latencies, position = [], 0
    try:
        freer.start()
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            start = time.perf_counter_ns()
            os.pwrite(fd, block, position)
            latencies.append(time.perf_counter_ns() - start)
            position += WRITE_BYTES
            time.sleep(0.0005)
    finally:
        stop.set()
        if freer.is_alive():
            freer.join()
        os.close(fd)
        for path in [appends, *victims]:
            if os.path.exists(path):
                os.unlink(path)
    latencies.sort()

    def ms(p):
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] / 1e6

    print(f"free={args.free} writes={len(latencies)} p50={ms(0.5):.3f} p99={ms(0.99):.3f} "
          f"p99.9={ms(0.999):.3f} max={latencies[-1] / 1e6:.2f} ms")


if __name__ == "__main__":
    main()
