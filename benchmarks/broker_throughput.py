"""Publish and dispatch throughput of a magnetar broker, driven by the official client.

    .venv/bin/python benchmarks/broker_throughput.py [--messages 50000] [--size 100]
        [--batching] [--sync-policy always|interval] [--service-url URL]
    .venv/bin/python benchmarks/broker_throughput.py --peer [--rounds 3] [--scale 1.0]
        [--scenario fan_out --scenario consume_batched ...]

Without --service-url an embedded broker (subprocess, fresh data dir) is started,
so the client and the broker use different processes as in production. Prints a
table; it is a measurement, not a test.

--peer runs the scenarios of benchmarks/peer_scenarios.py against magnetar (its
durable default, ``sync always``) and pulsar-lite (PyPI ``pulsar-lite``, a native
broker; ``pip install -e '.[bench]'``) in the same run, the official client driving
both: ``--rounds`` interleaved rounds, a fresh broker of each kind per round, and
prints the medians side by side with their ratios, broker CPU per message among them.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import pulsar
from fs_floor import new_directory_us
from peer_brokers import (
    PULSAR_LITE_INSTALL,
    magnetar_broker,
    pulsar_lite_binary,
    pulsar_lite_broker,
    version,
)
from peer_scenarios import SCENARIOS, Figures, run_round

from magnetar.testing import EmbeddedBroker


def run(url: str, messages: int, size: int, batching: bool) -> dict[str, float]:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    topic = f"bench-{time.time_ns()}"
    consumer = client.subscribe(
        topic, "bench", receiver_queue_size=5000, initial_position=pulsar.InitialPosition.Earliest
    )
    producer = client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=5,
        max_pending_messages=5000,
        block_if_queue_full=True,
    )
    payload = b"x" * size
    done = threading.Event()
    acked = [0]

    def on_sent(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
        acked[0] += 1
        if acked[0] == messages:
            done.set()

    # warm-up, then the consumer goes away so that publishing is measured alone
    for _ in range(200):
        producer.send(payload)
    for _ in range(200):
        consumer.acknowledge(consumer.receive(10000))
    consumer.close()

    start = time.perf_counter()
    for _ in range(messages):
        producer.send_async(payload, on_sent)
    producer.flush()
    done.wait(120)
    publish_s = time.perf_counter() - start

    # the backlog is dispatched from the broker's cache and disk to a fresh consumer
    consumer = client.subscribe(topic, "bench", receiver_queue_size=5000)
    start = time.perf_counter()
    for _ in range(messages):
        msg = consumer.receive(10000)
        consumer.acknowledge(msg)
    consume_s = time.perf_counter() - start

    latencies = []
    for _ in range(500):
        t = time.perf_counter()
        producer.send(payload)
        latencies.append((time.perf_counter() - t) * 1000)
    latencies.sort()
    client.close()
    return {
        "publish msg/s": messages / publish_s,
        "consume msg/s": messages / consume_s,
        "send p50 ms": latencies[len(latencies) // 2],
        "send p99 ms": latencies[int(len(latencies) * 0.99)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batching", action="store_true")
    parser.add_argument("--sync-policy", default="always", choices=["always", "interval"])
    parser.add_argument("--service-url")
    parser.add_argument(
        "--peer", action="store_true", help="compare with pulsar-lite in the same run"
    )
    parser.add_argument("--rounds", type=int, default=3, help="--peer: interleaved rounds")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="--peer: multiply the message counts"
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=[scenario.__name__ for scenario in SCENARIOS],
        help="--peer: run only this scenario (repeatable); alone, it finds a fresh broker",
    )
    args = parser.parse_args()
    if args.peer:
        sys.exit(compare(args.rounds, args.scale, args.sync_policy, args.scenario))
    if args.service_url:
        results = run(args.service_url, args.messages, args.size, args.batching)
    else:
        with (
            tempfile.TemporaryDirectory() as data,
            EmbeddedBroker(
                data_dir=data, mode="subprocess", sync_policy=args.sync_policy, log_level="WARNING"
            ) as broker,
        ):
            results = run(broker.service_url, args.messages, args.size, args.batching)
    print(
        f"messages={args.messages} size={args.size} batching={args.batching} "
        f"sync={args.sync_policy}"
    )
    for name, value in results.items():
        print(f"  {name:>14}: {value:,.2f}")


# ---------------------------------------------------------------- --peer

# (label, figure keys, unit, digits): one table row each, figures joined by " / "
ROWS: list[tuple[str, tuple[str, ...], str, int]] = [
    ("publish sync: p50 / p99 / p999", ("sync p50", "sync p99", "sync p999"), "ms", 3),
    ("e2e at 1000 msg/s: p50 / p99 / max", ("e2e p50", "e2e p99", "e2e max"), "ms", 3),
    ("consume unbatched (higher is better)", ("consume msg/s",), "msg/s", 0),
    ("broker CPU per message: publish sync", ("cpu publish sync",), "us", 2),
    ("  consume unbatched", ("cpu consume unbatched",), "us", 2),
    ("  consume batched", ("cpu consume batched",), "us", 2),
    ("  fan-out, 4 subscriptions (per delivery)", ("cpu fan-out",), "us", 2),
    ("  publish batched 100 B", ("cpu batched 100 B",), "us", 2),
    ("  publish batched 1 KB", ("cpu batched 1 KB",), "us", 2),
    ("  100 topics (batched, round-robin)", ("cpu 100 topics",), "us", 2),
    ("creating 100 producers", ("create producers",), "s", 3),
    ("broker peak RSS over a round", ("peak rss",), "MB", 1),
]


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def results_of_round(
    round_no: int,
    scale: float,
    sync_policy: str,
    only: list[str] | None,
    binary: str,
    kept: Path,
    results: dict[str, list[Figures]],
) -> None:
    """One round: each broker fresh, the order alternating, so that a drift in the
    machine's load hits both alike; magnetar's data directory made in ``kept``."""

    def log(step: str) -> None:
        print(f"  round {round_no}: {step}", file=sys.stderr, flush=True)

    for name in ["magnetar", "pulsar-lite"][:: 1 if round_no % 2 else -1]:
        started = (
            magnetar_broker(sync_policy, kept) if name == "magnetar" else pulsar_lite_broker(binary)
        )
        with started as broker:
            results[name].append(run_round(broker, scale, log, only))


def compare(rounds: int, scale: float, sync_policy: str, only: list[str] | None = None) -> int:
    binary = pulsar_lite_binary()
    if binary is None:
        print(PULSAR_LITE_INSTALL, file=sys.stderr)
        return 2
    load_before = _loadavg()
    inode_before = new_directory_us(Path(tempfile.gettempdir()))
    results: dict[str, list[Figures]] = {"magnetar": [], "pulsar-lite": []}
    # magnetar's data directories are removed once the run is over (see magnetar_broker)
    kept = Path(tempfile.mkdtemp(prefix="magnetar-peer-run-"))
    try:
        for round_no in range(1, rounds + 1):
            results_of_round(round_no, scale, sync_policy, only, binary, kept, results)
        inode_after = new_directory_us(Path(tempfile.gettempdir()))
    finally:
        shutil.rmtree(kept, ignore_errors=True)
    medians = {
        name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for name, runs in results.items()
    }
    print()
    print(
        f"magnetar (sync {sync_policy!r}: fsync before each receipt) vs pulsar-lite "
        f"{version('pulsar-lite')} (it has no sync setting: its RocksDB WAL is not fsynced; "
        "strace counted 10 fsync/fdatasync over 500 sync sends, at start and stop); "
        f"official pulsar-client {version('pulsar-client')} drives both; {rounds} interleaved "
        f"rounds, medians; scale {scale}; load average {load_before} before, "
        f"{_loadavg()} after"
    )
    print(
        f"a new directory in {tempfile.gettempdir()} cost {inode_before:.0f} us of CPU "
        f"before the rounds, {inode_after:.0f} us after (a new topic makes two and a file; "
        "see fs_floor.py)"
    )
    print("ratio = magnetar / pulsar-lite (below 1 is better for magnetar, except msg/s)")
    print()
    width = max(len(label) for label, *_ in ROWS) + 2
    print(f"{'scenario':<{width}}{'magnetar':>30}{'pulsar-lite':>30}{'ratio':>22}")
    for label, keys, unit, digits in ROWS:
        if any(k not in medians["magnetar"] for k in keys):
            continue  # its scenario was not run (--scenario)
        ours = [medians["magnetar"][k] for k in keys]
        theirs = [medians["pulsar-lite"][k] for k in keys]
        cells = [
            " / ".join(f"{v:,.{digits}f}" for v in values) + f" {unit}" for values in (ours, theirs)
        ]
        ratio = " / ".join(f"{a / b:.2f}" if b else "-" for a, b in zip(ours, theirs, strict=True))
        print(f"{label:<{width}}{cells[0]:>30}{cells[1]:>30}{ratio:>22}")
    return 0


if __name__ == "__main__":
    main()
