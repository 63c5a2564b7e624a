"""The two brokers ``broker_throughput.py --peer`` compares, and what it reads from them.

Owns starting a fresh magnetar broker (subprocess, its durable default) or a fresh
pulsar-lite broker (PyPI ``pulsar-lite``'s native binary, run directly with its
metrics port off) for one round, and reading a broker process's CPU time and peak
RSS from the kernel. A helper module of the benchmark scripts, not of magnetar.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from magnetar.testing import EmbeddedBroker
from magnetar.testing.embedded import free_port, wait_until_listening

PULSAR_LITE_INSTALL = (
    "pulsar-lite is not installed; --peer needs it: "
    ".venv/bin/pip install -e '.[bench]'  (or: .venv/bin/pip install pulsar-lite)"
)

# pulsar-lite 0.2's config (serde fields read from its binary: [cluster] holds the
# listener, limits and log level, [metrics] only `enabled`): it has no sync setting.
# Its storage is RocksDB with the WAL written but not fsynced per write, so the
# closest to magnetar's `sync always` it offers is its default; the metrics port
# would otherwise bind 0.0.0.0:8080.
PULSAR_LITE_CONFIG = "[metrics]\nenabled = false\n"


@dataclass
class Broker:
    name: str
    url: str
    pid: int

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def peak_rss_mb(self) -> float:
        return peak_rss_mb(self.pid)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of every thread of ``pid``, dead ones included: the kernel's
    process CPU clock (the counter behind /proc/<pid>/stat's utime + stime, read in
    nanoseconds instead of 10 ms ticks, so a short scenario is not rounded away)."""
    clock = ((~pid) << 3) | 2  # the kernel's CPUCLOCK_SCHED clock of a whole process
    try:
        return time.clock_gettime_ns(clock) / 1e9
    except OSError:  # not Linux, or refused: the ticks of /proc/<pid>/stat
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    """VmHWM: the process's peak resident set since it started."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def pulsar_lite_binary() -> str | None:
    """The broker binary the ``pulsar-lite`` wheel ships (or $PULSAR_LITE_BINARY)."""
    env = os.environ.get("PULSAR_LITE_BINARY")
    if env and os.path.isfile(env):
        return env
    spec = importlib.util.find_spec("pulsar_lite")
    if spec is not None and spec.origin is not None:
        packaged = Path(spec.origin).parent / "bin" / "pulsar-lite"
        if packaged.is_file():
            return str(packaged)
    return shutil.which("pulsar-lite")


def version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


@contextlib.contextmanager
def magnetar_broker(sync_policy: str, kept_in: Path | None = None) -> Iterator[Broker]:
    """A fresh magnetar broker; its data directory is made in ``kept_in`` and left
    there for the caller to remove (None: a temporary one, removed when it stops).

    A run of several brokers keeps their data until it ends, so that no round
    creates its topics just after the harness removed the last round's files: on
    this ext4, minutes after a data directory of thousands of written topics was
    removed, ext4 passed over the recently deleted inodes on each creation
    (``recently_deleted`` in ``find_inode_bit`` in perf) and a new directory cost
    several times as much (fs_floor.py prints it)."""
    with contextlib.ExitStack() as stack:
        if kept_in is None:
            data = stack.enter_context(tempfile.TemporaryDirectory())
        else:
            data = tempfile.mkdtemp(prefix="magnetar-", dir=kept_in)
        broker = stack.enter_context(
            EmbeddedBroker(
                data_dir=data, mode="subprocess", sync_policy=sync_policy, log_level="WARNING"
            )
        )
        assert broker.process is not None
        yield Broker("magnetar", broker.service_url, broker.process.pid)


@contextlib.contextmanager
def pulsar_lite_broker(binary: str) -> Iterator[Broker]:
    with tempfile.TemporaryDirectory(prefix="pulsar-lite-bench-") as data:
        config = Path(data) / "pulsar-lite.toml"
        config.write_text(PULSAR_LITE_CONFIG)
        port = free_port()
        process = subprocess.Popen(
            [
                binary,
                "--config",
                str(config),
                "--addr",
                f"127.0.0.1:{port}",
                "--db-path",
                str(Path(data) / "db"),
                "--log-level",
                "warn",
            ],
            cwd=data,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # its warnings (one per message it cannot dispatch)
        )
        try:
            wait_until_listening(port, process, 15)
            yield Broker("pulsar-lite", f"pulsar://127.0.0.1:{port}", process.pid)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
