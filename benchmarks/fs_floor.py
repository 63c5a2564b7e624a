"""What the file system alone costs of a broker's per-topic and per-subscription work.

    .venv/bin/python benchmarks/fs_floor.py [--count 300] [--rounds 3] [--dir DIR]

Creating a producer on a new topic and subscribing a new subscription each touch the
disk in magnetar: a topic is a directory with a ledger directory and a first segment
file in it (three new inodes), a subscription a cursor file replaced atomically (a
temporary file, its fsync, a rename and the directory's fsync). pulsar-lite (PyPI, a
native broker) keeps both in RocksDB without an fsync.

For each operation this prints the broker's CPU per operation (the official client
driving a fresh subprocess broker, magnetar with its defaults, and pulsar-lite when
installed, interleaved ``--rounds`` times, medians), and beside it what the same
system calls cost on their own, made in a tight loop in this process on the file
system of ``--dir`` (default: the temporary directory, where the brokers keep their
data): the floor under that operation for a broker that keeps a file per topic and
per subscription, which no work in Python can go below.

It prints a table; it is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pulsar
from peer_brokers import (
    Broker,
    cpu_seconds,
    magnetar_broker,
    pulsar_lite_binary,
    pulsar_lite_broker,
)

from magnetar.storage.fsutil import atomic_write

CURSOR_BYTES = 200  # about what a new subscription's cursor file holds


def _own_cpu() -> float:
    # The scheduler's clock: getrusage's split into user and system time is sampled
    # at ticks on this kernel and charged whole ticks to short system calls.
    return time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)


# ---------------------------------------------------------------- the floor


def _new_topic_calls(base: Path) -> None:
    """The system calls of a new topic's open: its directory, the lock on it, the
    ledger directory, the first segment file."""
    topic = base / uuid.uuid4().hex
    os.mkdir(topic)
    lock = os.open(topic, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.mkdir(topic / "ledger")
    segment = os.open(
        topic / "ledger" / "0.seg", os.O_RDWR | os.O_CLOEXEC | os.O_CREAT | os.O_EXCL, 0o644
    )
    os.close(segment)
    os.close(lock)


def _cursor_write(base: Path) -> Callable[[], None]:
    path = base / f"{uuid.uuid4().hex}.json"
    data = b"x" * CURSOR_BYTES
    return lambda: atomic_write(path, data)


def new_directory_us(directory: Path, count: int = 200) -> float:
    """CPU per empty directory made in a fresh directory under ``directory`` now: what
    the file system charges for a topic's directories at this moment (on this ext4,
    minutes after a data directory of thousands of written topics was removed,
    several times as much as on a quiet one)."""
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        names = [os.path.join(scratch, str(i)) for i in range(count)]
        started = _own_cpu()
        for name in names:
            os.mkdir(name)
        return (_own_cpu() - started) / count * 1e6


def floor_us(operation: Callable[[], None], count: int) -> float:
    """CPU of this process (user + system) per ``operation``, in microseconds."""
    started = _own_cpu()
    for _ in range(count):
        operation()
    return (_own_cpu() - started) / count * 1e6


# ---------------------------------------------------------------- the brokers


def _client(broker: Broker) -> pulsar.Client:
    return pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def broker_us(broker: Broker, count: int) -> dict[str, float]:
    """The broker's CPU per producer creation and per subscribe."""
    client = _client(broker)
    try:
        client.create_producer("persistent://public/default/warm-up").close()
        figures: dict[str, float] = {}
        cpu = cpu_seconds(broker.pid)
        producers = [
            client.create_producer(
                f"persistent://public/default/new-{uuid.uuid4().hex[:12]}",
                batching_enabled=False,
            )
            for _ in range(count)
        ]
        figures["create"] = (cpu_seconds(broker.pid) - cpu) / count * 1e6
        for producer in producers:
            producer.close()
        topic = f"persistent://public/default/subs-{uuid.uuid4().hex[:12]}"
        client.create_producer(topic).close()
        cpu = cpu_seconds(broker.pid)
        consumers = [client.subscribe(topic, f"sub-{i}") for i in range(count)]
        figures["subscribe"] = (cpu_seconds(broker.pid) - cpu) / count * 1e6
        for consumer in consumers:
            consumer.close()
        return figures
    finally:
        client.close()


def _brokers() -> Iterator[tuple[str, Callable[[], AbstractContextManager[Broker]]]]:
    yield "magnetar", lambda: magnetar_broker("always")
    binary = pulsar_lite_binary()
    if binary is not None:
        yield "pulsar-lite", lambda: pulsar_lite_broker(binary)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=300, help="operations per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the system calls alone are made",
    )
    args = parser.parse_args()

    runs: dict[str, list[dict[str, float]]] = {}
    floors: dict[str, list[float]] = {"create": [], "subscribe": []}
    inode_before = new_directory_us(args.dir)
    for round_ in range(args.rounds):
        brokers = list(_brokers())
        if round_ % 2:
            brokers.reverse()  # interleaved, so that a busy moment falls on both
        for name, start in brokers:
            print(f"  round {round_ + 1}: {name}", flush=True)
            with start() as broker:
                runs.setdefault(name, []).append(broker_us(broker, args.count))
        with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
            base = Path(scratch)
            floors["create"].append(floor_us(functools.partial(_new_topic_calls, base), args.count))
            write = _cursor_write(base)
            write()  # replaced from now on, as a cursor's later writes are
            floors["subscribe"].append(floor_us(write, args.count))
    inode_after = new_directory_us(args.dir)

    labels = {
        "create": ("create a producer on a new topic", "mkdir x2, open + flock, create a file"),
        "subscribe": ("subscribe a new subscription", "atomic replace of a cursor file"),
    }
    peer = "pulsar-lite" in runs
    print(
        f"\nbroker CPU per operation, microseconds; the official client; {args.count} "
        f"operations a round, {args.rounds} interleaved round(s), medians; the system "
        f"calls alone on {args.dir} ({os.uname().sysname} {os.uname().release})"
    )
    header = f"{'operation':<36}{'magnetar':>10}"
    if peer:
        header += f"{'pulsar-lite':>13}{'ratio':>7}"
    header += f"{'system calls':>14}{'share':>7}   which"
    print(header)
    for key, (label, calls) in labels.items():
        ours = statistics.median(run[key] for run in runs["magnetar"])
        floor = statistics.median(floors[key])
        line = f"{label:<36}{ours:>10.0f}"
        if peer:
            theirs = statistics.median(run[key] for run in runs["pulsar-lite"])
            line += f"{theirs:>13.0f}{ours / theirs:>7.2f}"
        line += f"{floor:>14.0f}{floor / ours:>7.0%}   {calls}"
        print(line)
    if not peer:
        print("(pulsar-lite is not installed: pip install -e '.[bench]')")
    print("share: the system calls' CPU alone against magnetar's CPU for the operation")
    print(
        f"a new directory in {args.dir} cost {inode_before:.0f} us of CPU before the "
        f"rounds, {inode_after:.0f} us after (the file system's state: on this ext4, "
        "minutes after a benchmark removed a data directory of thousands of written "
        "topics, several times as much as on a quiet one)"
    )


if __name__ == "__main__":
    main()
