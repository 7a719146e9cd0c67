"""The benchmark scripts' own logic, on inputs made up here (no broker).

scripts/slow_requests.py must charge each task exactly the time it ran inside a slow
request's wait, on every CPU given, and leave fast requests out.
"""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "slow_requests.py"

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
