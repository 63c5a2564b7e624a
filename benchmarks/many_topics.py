"""Many topics: what a bystander sees while thousands of idle or slow producers publish.

    .venv/bin/python benchmarks/many_topics.py [--connections 2000] [--topics 5000]
        [--rates 0,500,2500] [--phase-seconds 30] [--workers 4] [--payload 100]

A broker subprocess (``python -m magnetar serve``, default settings: durable sends,
a fresh temporary data dir, its log in a file). ``--workers`` load processes, each
running magnetar's asyncio client (uvloop), open ``--connections`` connections in all
(one ``Client`` each) and create one producer on each of ``--topics`` topics (topic i
on connection i mod N, batching off). The official client is not used for the load:
each ``pulsar.Client`` is a connection with its own threads, 2,000 of them are too
heavy for this machine. The bystander is the official client (``pulsar-client``, in
its own process): every 20 ms it sends a message on its own topic and receives it
(Exclusive subscription), and the time from the send to the receive is its latency.

Then, phase by phase, the load publishes at each total rate of ``--rates`` (msg/s,
spread round-robin over every producer; 0 is the idle phase, the run's reference:
each phase's bystander p99 is also given as a multiple of the idle one). Each phase
reports the bystander's p50/p99/max, the rate the load achieved (acked sends), the
broker's CPU (utime+stime of ``/proc/PID/stat`` over the phase's wall time; 100% is
one core), RSS and peak RSS (``VmHWM``), open fds, the event loop's lag (the phase's
lag histogram from ``/metrics``: wake-ups over 50 ms, and the bucket of the worst) and
the cyclic GC (full collections in the phase, their mean, and the longest since
start: ``magnetar_gc_pause_seconds_max``). /metrics is scraped twice at the start of a
phase (the second is the baseline, so the first scrape's own stall is not counted)
and once at its end. The bystander's samples during the scrapes are left out.

Targets (issue 23): bystander p99 <= 50 ms at 2,500 msg/s, broker CPU <= 50%, full
collections <= 50 ms. The machine may be shared: the 1-minute load average is printed
with each phase, and so are the CPU of the load processes and the bystander together
('others %', 100% is one core) and how busy the whole machine was ('busy %', 100% is
every core busy), and how many of the bystander's own entries took over 10 and over
50 ms from append to durable in the broker ('writes >10/>50 ms'), and the share of the
phase's time the broker spent in young (generation 0 and 1) collections: the load runs on the
broker's cores, and a machine near 100% delays the bystander's own process too.
Compare runs made close together.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

from memory import MB, Broker, loadavg, open_fds, proc_status, source_of_magnetar

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

P99_TARGET_MS = 50.0
CPU_TARGET = 50.0
GC_TARGET_MS = 50.0
BYSTANDER_PERIOD = 0.020
TICK = 0.010  # the load's pacing step
MAX_OUTSTANDING = 20_000  # sends not yet acked, per worker, before it skips (counted)
LAG_BUCKETS = ("0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5",
               "1.0", "2.5", "5.0", "10.0", "+Inf")


def log(text: str) -> None:
    print(text, flush=True)


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_idle() -> tuple[float, float]:
    """(idle + iowait, all) CPU seconds of the whole machine since boot (/proc/stat)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    return (fields[3] + fields[4]) / tick, sum(fields[:8]) / tick


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---------------------------------------------------------------- the load


@dataclass
class LoadShare:
    index: int
    url: str
    connections: range  # this worker's connection indexes
    topics: list[tuple[str, int]]  # (topic, the index of its connection)


def load_worker(share: LoadShare, rate: Synchronized[float],
                workers: int, counters: Any, stop: EventType, payload: int) -> None:
    """One load process: its connections, its producers, then publish at its share of
    ``rate`` until ``stop``. ``counters[3 * index ...]``: producers created, sends acked,
    sends failed or skipped."""
    from magnetar.client import Client

    base = 3 * share.index

    async def run() -> None:
        clients = {c: Client(share.url, operation_timeout=120, connection_timeout=60)
                   for c in share.connections}
        producers: list[Any] = []
        gate = asyncio.Semaphore(64)

        async def create(topic: str, connection: int) -> None:
            client = clients[connection]
            async with gate:
                for attempt in range(5):
                    try:
                        producers.append(await client.create_producer(topic))
                        break
                    except Exception:
                        if attempt == 4:
                            counters[base + 2] += 1
                        await asyncio.sleep(1)
            counters[base] += 1

        await asyncio.gather(*(create(t, c) for t, c in share.topics))
        outstanding = [0]

        def done(fut: asyncio.Future[Any]) -> None:
            outstanding[0] -= 1
            if fut.cancelled() or fut.exception() is not None:
                counters[base + 2] += 1
            else:
                counters[base + 1] += 1

        body = b"x" * payload
        credit, turn = 0.0, 0
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(TICK)
            now = time.monotonic()
            credit += rate.value / workers * (now - last)
            last = now
            while credit >= 1 and producers:
                credit -= 1
                if outstanding[0] >= MAX_OUTSTANDING:
                    counters[base + 2] += 1
                    continue
                producer = producers[turn % len(producers)]
                turn += 1
                outstanding[0] += 1
                producer.send_async(body).add_done_callback(done)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                asyncio.gather(*(c.close() for c in clients.values()), return_exceptions=True),
                30,
            )

    if uvloop is not None:
        uvloop.run(run())
    else:  # pragma: no cover
        asyncio.run(run())


# ---------------------------------------------------------------- the bystander


def bystander(url: str, topic: str, ready: EventType, stop: EventType, out: Any) -> None:
    """Official client: send then receive every 20 ms; puts [(start, latency s)] on
    ``out`` when stopped (or an error string)."""
    import pulsar

    samples: list[tuple[float, float]] = []
    try:
        client = pulsar.Client(url, operation_timeout_seconds=120,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        consumer = client.subscribe(topic, "bystander")
        producer = client.create_producer(topic)
        ready.set()
        while not stop.is_set():
            started = time.monotonic()
            producer.send(b"bystander")
            msg = consumer.receive(timeout_millis=120_000)
            samples.append((started, time.monotonic() - started))
            consumer.acknowledge(msg)
            left = started + BYSTANDER_PERIOD - time.monotonic()
            if left > 0:
                time.sleep(left)
        client.close()
        out.put(samples)
    except Exception as exc:  # reported by the driver
        out.put(f"{type(exc).__name__}: {exc}")
        ready.set()


# ---------------------------------------------------------------- phases


@dataclass
class Phase:
    rate: float
    started: float = 0.0
    ended: float = 0.0
    acked: int = 0
    failed: int = 0
    cpu: float = 0.0
    others_cpu: float = 0.0  # the load processes and the bystander, 100% = one core
    machine_busy: float = 0.0  # of every core: 100% = all busy
    rss_mb: float = 0.0
    peak_mb: float = 0.0
    fds: int = 0
    stalls: int = 0
    worst_lag: str = ""
    full_gcs: int = 0
    slow_writes: tuple[float, float, float] = (0.0, 0.0, 0.0)  # see bystander_writes
    full_gc_mean_ms: float = 0.0
    full_gc_max_ms: float = 0.0
    gen1_gcs: int = 0
    young_gc_share: float = 0.0  # % of the phase's wall time in gen-0 and gen-1 collections
    load: str = ""
    latencies: list[float] | None = None


def lag_counts(metrics: dict[str, float]) -> list[float]:
    return [metrics.get(f'magnetar_event_loop_lag_seconds_bucket{{le="{b}"}}', 0.0)
            for b in LAG_BUCKETS]


def gc_figures(metrics: dict[str, float], generation: int) -> tuple[float, float]:
    label = f'{{generation="{generation}"}}'
    return (metrics.get(f"magnetar_gc_collections_total{label}", 0.0),
            metrics.get(f"magnetar_gc_pause_seconds_total{label}", 0.0))


def bystander_writes(metrics: dict[str, float]) -> tuple[float, float, float]:
    """The bystander topic's entries written so far: (all, over 10 ms, over 50 ms) from
    its write-latency histogram (append to durable, in the broker)."""
    def bucket(le: str) -> float:
        return sum(v for k, v in metrics.items()
                   if k.startswith("magnetar_storage_write_latency_seconds_bucket{")
                   and "many-bystander-" in k and f'le="{le}"' in k)
    total = bucket("+Inf")
    return total, total - bucket("0.01"), total - bucket("0.05")


def run_phase(broker: Broker, phase: Phase, seconds: float, rate: Synchronized[float],
              counters: Any, others: list[int]) -> None:
    broker.scrape()  # its own stall lands before the baseline below
    time.sleep(0.5)
    before, _ = broker.scrape()
    cpu_before, wall_before = cpu_seconds(broker.pid), time.monotonic()
    others_before = sum(cpu_seconds(pid) for pid in others)
    idle_before, all_before = machine_idle()
    acked_before = sum(counters[1::3])
    failed_before = sum(counters[2::3])
    phase.started = time.monotonic()
    rate.value = phase.rate
    step = max(seconds / 3, 5.0)
    while time.monotonic() < phase.started + seconds:
        time.sleep(min(step, phase.started + seconds - time.monotonic()))
        log(f"    {time.monotonic() - phase.started:5.1f} s: {sum(counters[1::3]) - acked_before:,}"
            f" acked, broker RSS {broker.rss_mb():.1f} MB, {open_fds(broker.pid)} fds")
    phase.ended = time.monotonic()
    wall = time.monotonic() - wall_before
    phase.cpu = 100 * (cpu_seconds(broker.pid) - cpu_before) / wall
    phase.others_cpu = 100 * (sum(cpu_seconds(pid) for pid in others) - others_before) / wall
    idle_after, all_after = machine_idle()
    phase.machine_busy = 100 * (1 - (idle_after - idle_before) / (all_after - all_before))
    phase.acked = sum(counters[1::3]) - acked_before
    phase.failed = sum(counters[2::3]) - failed_before
    status = proc_status(broker.pid)
    phase.rss_mb, phase.peak_mb = status["VmRSS"] / MB, status["VmHWM"] / MB
    phase.fds = open_fds(broker.pid)
    phase.load = loadavg()
    after, _ = broker.scrape()
    phase.stalls = int(after.get('magnetar_event_loop_stalls_total{over="0.05"}', 0)
                       - before.get('magnetar_event_loop_stalls_total{over="0.05"}', 0))
    deltas = [a - b for a, b in zip(lag_counts(after), lag_counts(before), strict=True)]
    cumulative = [deltas[0]] + [deltas[i] - deltas[i - 1] for i in range(1, len(deltas))]
    worst = max((i for i, n in enumerate(cumulative) if n > 0), default=None)
    if worst is not None:
        low = "0" if worst == 0 else LAG_BUCKETS[worst - 1]
        phase.worst_lag = f"{float(low) * 1000:g}-{LAG_BUCKETS[worst]}"
        if LAG_BUCKETS[worst] != "+Inf":
            phase.worst_lag = f"{float(low) * 1000:g}-{float(LAG_BUCKETS[worst]) * 1000:g} ms"
    count_after, total_after = gc_figures(after, 2)
    count_before, total_before = gc_figures(before, 2)
    phase.full_gcs = int(count_after - count_before)
    if phase.full_gcs:
        phase.full_gc_mean_ms = 1000 * (total_after - total_before) / phase.full_gcs
    phase.full_gc_max_ms = 1000 * after.get('magnetar_gc_pause_seconds_max{generation="2"}', 0)
    phase.slow_writes = tuple(  # type: ignore[assignment]
        a - b for a, b in zip(bystander_writes(after), bystander_writes(before), strict=True))
    phase.gen1_gcs = int(gc_figures(after, 1)[0] - gc_figures(before, 1)[0])
    young = sum(gc_figures(after, g)[1] - gc_figures(before, g)[1] for g in (0, 1))
    phase.young_gc_share = 100 * young / wall
    rate.value = 0.0


def print_table(phases: list[Phase]) -> None:
    reference = phases[0].latencies and percentile(phases[0].latencies, 0.99)
    head = (f"{'rate':>6}{'acked/s':>9}{'n':>6}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>9}"
            f"{'x idle':>7}{'CPU %':>7}{'RSS MB':>8}{'peak':>7}{'fds':>7}{'stalls':>7}"
            f"{'worst lag':>16}{'full GCs':>9}{'mean ms':>8}{'max ms':>8}{'load':>6}"
            f"{'others %':>9}{'busy %':>7}{'writes >10/>50 ms':>18}{'young GC %':>11}")
    log(head)
    log("-" * len(head))
    for p in phases:
        lat = [x * 1000 for x in p.latencies or []]
        p99 = percentile(lat, 0.99)
        ratio = f"{p99 / (reference * 1000):.1f}" if reference else "-"
        log(f"{p.rate:>6.0f}{p.acked / (p.ended - p.started):>9,.0f}{len(lat):>6}"
            f"{percentile(lat, 0.5):>8.1f}{p99:>8.1f}{max(lat, default=float('nan')):>9.1f}"
            f"{ratio:>7}{p.cpu:>7.0f}{p.rss_mb:>8.1f}{p.peak_mb:>7.1f}{p.fds:>7}{p.stalls:>7}"
            f"{p.worst_lag or '-':>16}{p.full_gcs:>9}{p.full_gc_mean_ms:>8.1f}"
            f"{p.full_gc_max_ms:>8.1f}{p.load:>6}{p.others_cpu:>9.0f}{p.machine_busy:>7.0f}"
            f"{f'{p.slow_writes[1]:.0f}/{p.slow_writes[2]:.0f} of {p.slow_writes[0]:.0f}':>18}"
            f"{p.young_gc_share:>11.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.split("\n")[4:]),
    )
    parser.add_argument("--connections", type=int, default=2000,
                        help="load connections, one magnetar Client each (default 2,000)")
    parser.add_argument("--topics", type=int, default=5000,
                        help="topics, one producer each (default 5,000)")
    parser.add_argument("--rates", default="0,500,2500",
                        help="total msg/s of each phase, comma separated; the first is the "
                             "reference (default 0,500,2500)")
    parser.add_argument("--phase-seconds", type=float, default=30.0,
                        help="length of each phase (default 30)")
    parser.add_argument("--workers", type=int, default=4,
                        help="load processes (default 4)")
    parser.add_argument("--payload", type=int, default=100, help="bytes per message")
    parser.add_argument("--keep", action="store_true", help="keep the data dir and broker log")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    workers = max(1, min(args.workers, args.connections))
    command = shlex.join([".venv/bin/python", "benchmarks/many_topics.py", *sys.argv[1:]])
    log(f"$ {command}")
    log(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {loadavg()}; "
        f"magnetar from {source_of_magnetar()}")
    env_settings = sorted(k for k in os.environ if k.startswith("MAGNETAR_"))
    log("broker settings: "
        + (", ".join(f"{k}={os.environ[k]}" for k in env_settings) or "defaults"))

    root = Path(tempfile.mkdtemp(prefix="magnetar-many-"))
    broker = Broker(root / "data", root / "broker.log", 1 << 62)
    ctx = multiprocessing.get_context("spawn")
    stop, ready, out = ctx.Event(), ctx.Event(), ctx.Queue()
    rate: Synchronized[float] = ctx.Value("d", 0.0, lock=False)  # type: ignore[assignment]
    counters = ctx.Array("q", 3 * workers, lock=False)
    processes: list[multiprocessing.process.BaseProcess] = []
    phases = [Phase(r) for r in rates]
    try:
        broker.start()
        log(f"broker: {broker.shown_command} (pid {broker.pid}, log {broker.log_path})")
        prefix = f"persistent://public/default/many-{uuid.uuid4().hex[:6]}-"
        for w in range(workers):
            # Topic i is on connection i mod N; connection c is worker c mod W's.
            mine = [(f"{prefix}{i}", i % args.connections) for i in range(args.topics)
                    if i % args.connections % workers == w]
            share = LoadShare(w, broker.url, range(w, args.connections, workers), mine)
            processes.append(ctx.Process(target=load_worker, daemon=True, args=(
                share, rate, workers, counters, stop, args.payload)))
        started = time.monotonic()
        for p in processes:
            p.start()
        while sum(counters[0::3]) < args.topics:
            if any(not p.is_alive() for p in processes):
                raise RuntimeError("a load process died")
            time.sleep(2)
            log(f"  {sum(counters[0::3]):,} of {args.topics:,} producers created "
                f"({sum(counters[2::3])} failed), {time.monotonic() - started:.0f} s; broker "
                f"RSS {broker.rss_mb():.1f} MB, {open_fds(broker.pid)} fds")
        failed = sum(counters[2::3])
        log(f"{args.topics:,} topics with a producer over {args.connections:,} connections "
            f"({workers} load processes) in {time.monotonic() - started:.0f} s, {failed} failed")
        by = ctx.Process(target=bystander, daemon=True, args=(
            broker.url, f"persistent://public/default/many-bystander-{uuid.uuid4().hex[:6]}",
            ready, stop, out))
        by.start()
        ready.wait(120)
        time.sleep(2)
        for phase in phases:
            log(f"== {phase.rate:,.0f} msg/s for {args.phase_seconds:g} s "
                f"(load average {loadavg()})")
            others = [p.pid for p in (*processes, by) if p.pid is not None]
            run_phase(broker, phase, args.phase_seconds, rate, counters, others)
            time.sleep(1)  # what was in flight settles
        stop.set()
        result = out.get(timeout=300)
        if isinstance(result, str):
            log(f"the bystander failed: {result}")
            result = []
        for phase in phases:
            phase.latencies = [lat for at, lat in result if phase.started <= at < phase.ended]
        log("")
        log(f"$ {command}")
        log(f"{args.topics:,} topics, {args.connections:,} connections, {failed} producers "
            f"failed; bystander: official client, send+receive every "
            f"{BYSTANDER_PERIOD * 1000:.0f} ms; 'x idle' is p99 / the first phase's p99")
        print_table(phases)
        for phase in phases:
            if phase.failed:
                log(f"{phase.rate:,.0f} msg/s: {phase.failed:,} sends failed or skipped")
        last = phases[-1]
        p99 = percentile([x * 1000 for x in last.latencies or []], 0.99)
        log(f"targets at {last.rate:,.0f} msg/s: p99 {p99:.1f} ms (<= {P99_TARGET_MS:.0f}: "
            f"{'met' if p99 <= P99_TARGET_MS else 'MISSED'}), CPU {last.cpu:.0f}% (<= "
            f"{CPU_TARGET:.0f}: {'met' if last.cpu <= CPU_TARGET else 'MISSED'}), longest full "
            f"GC {last.full_gc_max_ms:.0f} ms (<= {GC_TARGET_MS:.0f}: "
            f"{'met' if last.full_gc_max_ms <= GC_TARGET_MS else 'MISSED'})")
    finally:
        stop.set()
        for p in processes:
            p.join(40)
            if p.is_alive():
                p.kill()
        broker.stop()
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
