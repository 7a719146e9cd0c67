"""Starts and stops real ringlog brokers for the interop tests.

Each broker runs as a child process of pytest on a free 127.0.0.1 port with its
own temporary log dir, configured only through `--set` flags with Kafka's
config names, exactly as a user would start it. Ports come from below the
kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), so no
client's source port can hold one; a broker whose first start finds its port
taken exits saying "address already in use" and is started on another. Ready
means the broker logged "ready" (every shard serves), polled against a
deadline: a TCP connect proves less, the socket is bound before the logs
recover. The broker's stderr goes
to a file; when a test fails, the tail of every broker it started is attached
to the failure report. Stopping is SIGTERM, a bounded wait, then SIGKILL, and a
broker that needed SIGKILL, or that panicked, fails the test that owned it: a
clean shutdown is part of the contract. `Broker.restart()` reuses the same data
dir and port, and `Broker.kill9()` crashes it for the recovery tests.

The binary comes from RINGLOG_BIN (scripts/test.sh passes the release build).
"""

import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
LOG_TAIL_LINES = 400

# Every broker started in this pytest process, for failure reports.
_BROKERS = []


def ringlog_bin() -> Path:
    env = os.environ.get("RINGLOG_BIN")
    path = Path(env) if env else REPO / "target" / "release" / "ringlog"
    if not path.is_absolute():
        path = REPO / path
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"broker binary {path} is missing: run `cargo build --release -p broker` "
                    f"or set RINGLOG_BIN", pytrace=False)
    return path


PORT_RANGE = 12000
START_ATTEMPTS = 20


def ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
            return low if low > 2048 else 32768
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A random port below the ephemeral range that nothing listens on right now."""
    low = ephemeral_low()
    floor = max(1024, low - PORT_RANGE)
    while True:
        port = random.randrange(floor, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue


def is_ready_line(line: str) -> bool:
    return "broker::server" in line and " ready " in line


class Broker:
    """One ringlog node. Settings are Kafka config names, passed as --set."""

    def __init__(self, workdir: Path, io_mode="direct", cores=2, settings=None, name="broker",
                 extra_args=()):
        self.binary = ringlog_bin()
        self.name = name
        self.data_dir = workdir / f"{name}-data"
        self.log_path = workdir / f"{name}.stderr"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.io_mode = io_mode
        self.cores = cores
        self.settings = {
            "log.dirs": str(self.data_dir),
            "log.io.mode": io_mode,
        }
        self.use_port(free_port())
        self.settings.update(settings or {})
        self.extra_args = list(extra_args)
        self.proc = None
        self.starts = 0
        _BROKERS.append(self)

    def use_port(self, port: int):
        self.port = port
        self.settings["listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
        self.settings["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{port}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self):
        cmd = [str(self.binary), "serve", "--cores", str(self.cores)] + self.extra_args
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def start(self, ready_timeout=READY_TIMEOUT_S):
        """Starts the broker and waits for its "ready" line. Only a first start moves to
        another port when its port turns out to be taken: a restart keeps its address,
        which clients already know."""
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        for _ in range(START_ATTEMPTS):
            if self.try_start(ready_timeout):
                return self
            if self.starts > 1:
                break
            self.use_port(free_port())
        raise AssertionError(f"{self.name} found no free port (its stderr is attached below)")

    def try_start(self, ready_timeout) -> bool:
        """True once ready; False if the port was taken; raises on any other failure."""
        self.starts += 1
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        env["RUST_LOG"] += ",broker::server=info"
        env.setdefault("RUST_BACKTRACE", "1")
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(self.command())}\n".encode())
            log.flush()
            start_bytes = log.tell()
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, env=env, cwd=self.data_dir.parent)
        deadline = time.monotonic() + ready_timeout
        while True:
            with open(self.log_path, "rb") as log:
                log.seek(start_bytes)
                text = log.read().decode(errors="replace")
            if any(is_ready_line(line) for line in text.splitlines()):
                return True
            rc = self.proc.poll()
            if rc is not None:
                if "address already in use" in text:
                    return False
                raise AssertionError(f"{self.name} exited with {rc} before it was ready "
                                     f"(its stderr is attached below)")
            if time.monotonic() > deadline:
                self.dump_stacks(f"not ready after {ready_timeout}s")
                self.kill9()
                raise AssertionError(f"{self.name} was not ready on {self.bootstrap} "
                                     f"within {ready_timeout}s")
            time.sleep(0.05)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT_S):
        """Asks the broker to shut down; returns (exit code, needed SIGKILL)."""
        if self.proc is None or self.proc.poll() is not None:
            return (None if self.proc is None else self.proc.returncode), False
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout), False
        except subprocess.TimeoutExpired:
            self.dump_stacks(f"still running {timeout}s after {sig.name}")
            self.proc.kill()
            return self.proc.wait(10), True

    def stop_cleanly(self, sig=signal.SIGTERM):
        rc, killed = self.stop(sig)
        assert not killed, f"{self.name} ignored {sig.name} for {STOP_TIMEOUT_S}s and was killed"
        assert rc == 0, f"{self.name} exited with {rc} after {sig.name}"

    def dump_stacks(self, why):
        """Appends every thread's backtrace to the broker's log, so a hang can be
        diagnosed from the failure report (needs gdb; skipped without it)."""
        gdb = shutil.which("gdb")
        if gdb is None or not self.alive():
            return
        try:
            out = subprocess.run([gdb, "-p", str(self.proc.pid), "-batch", "-nx",
                                  "-ex", "thread apply all bt"],
                                 capture_output=True, timeout=60).stdout
        except subprocess.TimeoutExpired:
            out = b"gdb timed out"
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== {self.name} {why}; thread backtraces:\n".encode() + out)

    def kill9(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)

    def restart(self):
        """Clean stop, then start again on the same data dir and port."""
        self.stop_cleanly()
        return self.start()

    def crash_restart(self):
        self.kill9()
        return self.start()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines=LOG_TAIL_LINES) -> str:
        tail = self.log_text().splitlines()[-lines:]
        return f"--- last {len(tail)} lines of {self.log_path} ---\n" + "\n".join(tail)

    def panics(self):
        return [line for line in self.log_text().splitlines() if "panicked at" in line]


def finish(broker: Broker):
    """Teardown check shared by all fixtures: no panic, clean SIGTERM shutdown."""
    was_alive = broker.alive()
    rc, killed = broker.stop()
    problems = []
    if broker.panics():
        problems.append(f"{broker.name} panicked: {broker.panics()[:3]}")
    if was_alive and killed:
        problems.append(f"{broker.name} ignored SIGTERM for {STOP_TIMEOUT_S}s and was killed")
    elif was_alive and rc != 0:
        problems.append(f"{broker.name} exited with {rc} after SIGTERM")
    if problems:
        pytest.fail("; ".join(problems) + "\n" + broker.log_tail(), pytrace=False)


CLUSTER_ID = "interopQuorumClusterXw"


def start_cluster(tmp_path, settings=None):
    """Three nodes, each broker and controller, formatted with one cluster id and started at
    once (each waits for a quorum before it is ready); `settings` go to every node."""
    voters = ",".join(f"{i}@127.0.0.1:{free_port()}" for i in (1, 2, 3))
    nodes = []
    for node_id in (1, 2, 3):
        node_settings = {"node.id": node_id, "controller.quorum.voters": voters}
        node_settings.update(settings or {})
        broker = Broker(tmp_path, settings=node_settings, name=f"node{node_id}")
        subprocess.run([str(ringlog_bin()), "format", "--cluster-id", CLUSTER_ID,
                        "--set", f"log.dirs={broker.data_dir}", "--set", f"node.id={node_id}"],
                       check=True, capture_output=True)
        nodes.append(broker)
    errors = []

    def start(broker):
        try:
            broker.start(ready_timeout=60)
        except AssertionError as e:
            errors.append(e)

    threads = [threading.Thread(target=start, args=(b,)) for b in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for b in nodes:
            b.kill9()
        raise errors[0]
    return nodes


@pytest.fixture
def broker_factory(tmp_path):
    """start_broker(io_mode="direct", cores=2, settings={...}, extra_args=[...])
    -> a running Broker."""
    started = []

    def start_broker(io_mode="direct", cores=2, settings=None, extra_args=()):
        b = Broker(tmp_path, io_mode, cores, settings, name=f"broker{len(started)}",
                   extra_args=extra_args)
        started.append(b)
        return b.start()

    yield start_broker
    for b in started:
        finish(b)


@pytest.fixture
def broker(request, broker_factory):
    """A running broker; parametrize indirectly with a dict of
    io_mode / cores / settings to change it."""
    params = getattr(request, "param", None) or {}
    return broker_factory(**params)


def pytest_sessionfinish(session, exitstatus):
    """No broker outlives the run, whatever failed on the way."""
    for b in _BROKERS:
        b.kill9()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for b in _BROKERS:
            if b.starts and b.log_path.exists():
                report.sections.append((f"{b.name} stderr ({b.io_mode}, {b.cores} cores)",
                                        b.log_tail()))
    if report.when == "teardown":
        # Brokers of finished function-scoped tests are no longer interesting.
        _BROKERS[:] = [b for b in _BROKERS if b.alive()]
