"""Memory, open files and event loop stalls of a magnetar broker, scenario by scenario.

    .venv/bin/python benchmarks/memory.py [--quick] [--scenario NAME] [--topics N]
        [--slow-rate 20000] [--delay 300] [--rss-limit-mb 4000]

Each scenario starts its own broker (``python -m magnetar serve --port P --admin-port A
--data-dir D``, default settings, a fresh temporary data dir, its log in a file) and
reads, from outside:

* RSS: ``VmRSS`` of ``/proc/PID/status`` when the scenario ends, and its peak
  (``VmHWM``, the high-water mark since the broker started);
* open files: the entries of ``/proc/PID/fd`` when it ends, and the most seen by a
  sampler (every 0.25 s) while it ran;
* the longest event loop stall: ``magnetar_event_loop_lag_seconds_max`` on the
  broker's ``/metrics`` (the loop lag probe: a timer every 10 ms, its largest delay
  since the broker started), and ``magnetar_event_loop_stalls_total`` (wake-ups more
  than 50 ms late). /metrics is read once, after RSS and files, so the scrape's own
  allocations and time are not in the figures. A lag is wall-clock time: it includes
  time the broker waited for a CPU, which this script (the clients) competes for; the
  notes give the broker's CPU time and its time waiting runnable (``schedstat``).

The scenarios (the issue's words; targets: idle <= 40 MB, every other scenario
<= 150 MB peak RSS with default settings, no loop stall over 50 ms):

* ``idle``: a broker with nothing to do, measured before and after its first admin
  request (which loads the admin application);
* ``slow-consumer``: 1M messages of 1 KB published (batched) while a consumer reads
  and acks them slowly (``--slow-rate`` msg/s), until it has read them all;
* ``stuck-consumer``: a consumer (a raw socket) grants 100k permits and never reads
  while 100k x 100 KB (10 GB) are published;
* ``topics``: 10,000 topics touched once (a producer per topic, one message, close;
  16 at a time over 4 connections);
* ``load``: 1M small entries (100 bytes, batching off) published, the broker
  stopped and started again, then the topic touched (a producer), which loads it;
  the table has a row for each broker: ``load (fill)`` wrote them, ``load`` loaded them;
* ``delayed``: 100k messages with ``deliver_after`` (``--delay`` s) published to a
  Shared subscription with a connected consumer, waiting.

Messages are sent with magnetar's asyncio client (uvloop), from this process.
``--quick`` scales every scenario down 10x (a smoke test, about a minute);
``--scenario NAME`` runs one. As a floor, the RSS of ``python -c 'import
magnetar.broker.service'`` (the interpreter and the broker's imports) is measured in
the same run; the table gives each RSS as a multiple of it.

A broker whose RSS passes ``--rss-limit-mb`` is stopped early (the machine is shared);
the scenario is then reported as aborted. It is a measurement, not a test: figures
that miss their target are printed as such.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from magnetar.client import Client
from magnetar.protocol.frames import FrameDecoder, encode_command
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing.embedded import free_port, wait_until_listening

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

T = TypeVar("T")
MB = 1024 * 1024
IDLE_TARGET_MB = 40.0
TARGET_MB = 150.0
STALL_TARGET_MS = 50.0
TOPICS_FULL = 10_000  # the figure
SCENARIOS = ("idle", "slow-consumer", "stuck-consumer", "topics", "load", "delayed")


class Aborted(Exception):
    """The broker's RSS passed --rss-limit-mb."""


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    if uvloop is not None:
        return uvloop.run(coro)
    return asyncio.run(coro)


def log(text: str) -> None:
    print(text, flush=True)


# ---------------------------------------------------------------- /proc


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid``, in bytes."""
    found = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) * 1024
    return found


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def schedstat(pid: int) -> tuple[float, float]:
    """Seconds ``pid`` has run on a CPU, and waited runnable for one (all threads)."""
    ran = waited = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
            fields = fh.read().split()
            ran += int(fields[0]) / 1e9
            waited += int(fields[1]) / 1e9
    return ran, waited


def open_files_limit(pid: int) -> str:
    with open(f"/proc/{pid}/limits") as fh:
        for line in fh:
            if line.startswith("Max open files"):
                return line.split()[3]  # the soft limit
    return "?"


def loadavg() -> str:
    with open("/proc/loadavg") as fh:
        return fh.read().split()[0]


def source_of_magnetar() -> str:
    """Where the broker's code comes from (a subprocess imports it as this one does),
    with the commit and whether its source has changes not committed."""
    import magnetar

    where = Path(magnetar.__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{where} (not a git checkout)"
    return f"{where} (commit {rev}{', with uncommitted changes' if dirty else ''})"


def floor_rss(module: str = "magnetar.broker.service") -> tuple[float, float]:
    """RSS and peak of a bare ``python -c 'import MODULE'``."""
    code = f"import {module}, sys; print('ready', flush=True); sys.stdin.read()"
    process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdin is not None
        process.stdout.readline()
        status = proc_status(process.pid)
    finally:
        if process.stdin is not None:
            process.stdin.close()
        process.wait(10)
    return status["VmRSS"] / MB, status["VmHWM"] / MB


# ---------------------------------------------------------------- the broker


class Broker:
    """``python -m magnetar serve`` on free ports, default settings, log to a file."""

    def __init__(self, data_dir: Path, log_path: Path, rss_limit: int) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.rss_limit = rss_limit
        self.port = 0
        self.admin_port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.peak_fds = 0
        self.over_limit = threading.Event()
        self._sampling = threading.Event()
        self._sampler: threading.Thread | None = None

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "magnetar", "serve", "--port", str(self.port),
                "--admin-port", str(self.admin_port), "--data-dir", str(self.data_dir)]

    @property
    def shown_command(self) -> str:
        return shlex.join(["python", *self.command[1:]])

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        self.port, self.admin_port = free_port(), free_port()
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL,
                                            stdout=log_file, stderr=subprocess.STDOUT)
        wait_until_listening(self.port, self.process, 60)
        # Not a connection to the admin port: the first one loads the admin application.
        deadline = time.monotonic() + 60
        while b" ready on pulsar://" not in self.log_path.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the broker did not start: see {self.log_path}")
            time.sleep(0.05)
        self.peak_fds = 0
        self._sampling.clear()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._sampling.wait(0.25):
            try:
                self.peak_fds = max(self.peak_fds, open_fds(self.pid))
                if proc_status(self.pid)["VmRSS"] > self.rss_limit:
                    self.over_limit.set()
            except (OSError, KeyError):
                return

    def check(self) -> None:
        if self.over_limit.is_set():
            raise Aborted(f"broker RSS passed {self.rss_limit / MB:.0f} MB")

    def stop(self) -> None:
        self._sampling.set()
        if self._sampler is not None:
            self._sampler.join(5)
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(300)
        except subprocess.TimeoutExpired:
            log(f"  broker {process.pid} did not stop in 300 s; killed")
            process.kill()
            process.wait()

    def rss_mb(self) -> float:
        return proc_status(self.pid)["VmRSS"] / MB

    def scrape(self) -> tuple[dict[str, float], float]:
        """/metrics as {'name{labels}': value}, and how long the request took."""
        started = time.perf_counter()
        url = f"http://127.0.0.1:{self.admin_port}/metrics"
        with urllib.request.urlopen(url, timeout=600) as response:
            text = response.read().decode()
        took = time.perf_counter() - started
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                values[key] = float(value)
        return values, took


# ---------------------------------------------------------------- results


@dataclass
class Result:
    scenario: str
    rss_mb: float = 0.0
    peak_mb: float = 0.0
    fds: int = 0
    peak_fds: int = 0
    lag_ms: float | None = None
    stalls: int | None = None
    target_mb: float = TARGET_MB
    size: str = ""
    aborted: str = ""
    incomplete: str = ""  # it ran, but not at full size (why)
    notes: list[str] = field(default_factory=list)

    @property
    def rss_met(self) -> bool:
        return not self.aborted and self.peak_mb <= self.target_mb

    @property
    def lag_met(self) -> bool:
        return self.lag_ms is not None and self.lag_ms <= STALL_TARGET_MS


def measure(broker: Broker, result: Result) -> None:
    """RSS and files first, then /metrics (whose rendering allocates)."""
    status = proc_status(broker.pid)
    result.rss_mb = status["VmRSS"] / MB
    result.peak_mb = status["VmHWM"] / MB
    result.fds = open_fds(broker.pid)
    ran, waited = schedstat(broker.pid)
    result.peak_fds = max(broker.peak_fds, result.fds)
    metrics, took = broker.scrape()
    lag = metrics.get("magnetar_event_loop_lag_seconds_max")
    result.lag_ms = None if lag is None else lag * 1000
    stalls = metrics.get('magnetar_event_loop_stalls_total{over="0.05"}')
    result.stalls = None if stalls is None else int(stalls)
    topics = metrics.get('pulsar_topics_count{cluster="standalone"}', 0)
    gc_max = metrics.get('magnetar_gc_pause_seconds_max{generation="2"}')
    gc_count = metrics.get('magnetar_gc_collections_total{generation="2"}')
    if gc_max is not None:
        result.notes.append(f"cyclic GC: {int(gc_count or 0)} full (gen-2) collections, the "
                            f"longest {gc_max * 1000:.0f} ms (magnetar_gc_pause_seconds_max)")
    result.notes.append(f"/metrics: {int(topics)} topics loaded, the scrape took {took:.2f} s; "
                        f"the broker's threads had run {ran:.1f} s and waited {waited:.1f} s "
                        f"runnable for a CPU (schedstat)")
    log(f"  RSS {result.rss_mb:.1f} MB (peak {result.peak_mb:.1f}), {result.fds} fds "
        f"(peak {result.peak_fds}), loop lag max "
        f"{'n/a' if result.lag_ms is None else f'{result.lag_ms:.1f} ms'}, "
        f"{result.stalls} stalls over 50 ms")


@contextlib.contextmanager
def fresh_broker(args: argparse.Namespace, name: str, result: Result) -> Iterator[Broker]:
    root = Path(tempfile.mkdtemp(prefix=f"magnetar-mem-{name}-"))
    broker = Broker(root / "data", root / "broker.log", args.rss_limit_mb * MB)
    try:
        broker.start()
        log(f"  broker: {broker.shown_command}  (pid {broker.pid}, log {broker.log_path})")
        yield broker
    finally:
        started = time.perf_counter()
        broker.stop()
        took = time.perf_counter() - started
        result.notes.append(f"the broker stopped (SIGTERM) in {took:.1f} s")
        if args.keep:
            log(f"  kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def topic_name(label: str) -> str:
    return f"persistent://public/default/mem-{label}-{uuid.uuid4().hex[:8]}"


async def publish(broker: Broker, producer: Any, n: int, payload: bytes,
                  chunk: int = 20_000, **send: Any) -> float:
    """Send ``n`` messages, ``chunk`` futures at a time; the rate in msg/s."""
    started = time.perf_counter()
    sent = 0
    while sent < n:
        broker.check()
        count = min(chunk, n - sent)
        await asyncio.gather(*[producer.send_async(payload, **send) for _ in range(count)])
        sent += count
    return n / (time.perf_counter() - started)


# ---------------------------------------------------------------- scenarios


def idle(args: argparse.Namespace, scale: int) -> list[Result]:
    result = Result("idle", target_mb=IDLE_TARGET_MB, size="-")
    # The admin application (aiohttp) loads on the first admin request: the /metrics
    # scrape of the first measure. A broker that is scraped or administered is measured
    # again, idle as before, on the second row.
    scraped = Result("idle", target_mb=IDLE_TARGET_MB, size="after an admin request")
    with fresh_broker(args, "idle", result) as broker:
        time.sleep(args.idle_wait)
        measure(broker, result)
        time.sleep(args.idle_wait)
        measure(broker, scraped)
    return [result, scraped]


def slow_consumer(args: argparse.Namespace, scale: int) -> list[Result]:
    n, size = 1_000_000 // scale, 1024
    result = Result("slow-consumer", size=f"{n:,} x 1 KB")
    with fresh_broker(args, "slow", result) as broker:

        async def scenario() -> None:
            topic = topic_name("slow")
            async with Client(broker.url) as client:
                consumer = await client.subscribe(topic, "slow", initial_position="earliest")
                producer = await client.create_producer(
                    topic, batching=True, batching_max_delay=0.005, max_pending_messages=10_000
                )
                read = [0]

                async def reader() -> None:
                    started = time.monotonic()
                    while read[0] < n:
                        msg = await consumer.receive(120)
                        await consumer.acknowledge(msg)
                        read[0] += 1
                        if read[0] % 100 == 0:
                            broker.check()
                            ahead = started + read[0] / args.slow_rate - time.monotonic()
                            if ahead > 0:
                                await asyncio.sleep(ahead)

                started = time.perf_counter()
                task = asyncio.create_task(reader())
                try:
                    rate = await publish(broker, producer, n, b"x" * size)
                    note = (f"published at {rate:,.0f} msg/s; the consumer had read "
                            f"{read[0]:,}; broker RSS then {broker.rss_mb():.1f} MB")
                    log(f"  {note}")
                    result.notes.append(note)
                    await task
                finally:
                    task.cancel()
                took = time.perf_counter() - started
                result.notes.append(f"all {n:,} read and acked {took:.1f} s after the first "
                                    f"send (reader limited to {args.slow_rate:,} msg/s)")
                await producer.close()
                await consumer.close()

        run_scenario(broker, result, scenario)
    return [result]


class StuckConsumer:
    """A raw protocol peer: subscribes, grants permits, never reads its socket (it
    sends a PING every 10 s, so the broker's keepalive sees a live peer)."""

    def __init__(self, port: int, topic: str, permits: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        decoder = FrameDecoder()
        flags = pb.FeatureFlags(supports_request_reply=True)
        self._send(BaseCommand(type=BaseCommand.CONNECT, connect=pb.CommandConnect(
            client_version="memory-bench", protocol_version=21, feature_flags=flags)))
        self._send(BaseCommand(type=BaseCommand.SUBSCRIBE, subscribe=pb.CommandSubscribe(
            topic=topic, subscription="stuck", subType=pb.CommandSubscribe.Exclusive,
            consumer_id=1, request_id=1, initialPosition=pb.CommandSubscribe.Earliest)))
        wanted = {BaseCommand.SUCCESS}
        while wanted:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("broker closed the connection")
            for frame in decoder.feed(data):
                if frame.command.type == BaseCommand.ERROR:
                    raise RuntimeError(f"subscribe failed: {frame.command.error}")
                wanted.discard(frame.command.type)
        self._send(BaseCommand(type=BaseCommand.FLOW,
                               flow=pb.CommandFlow(consumer_id=1, messagePermits=permits)))
        self._stop = threading.Event()
        self._pinger = threading.Thread(target=self._ping, daemon=True)
        self._pinger.start()

    def _send(self, command: BaseCommand) -> None:
        self.sock.sendall(encode_command(command))

    def _ping(self) -> None:
        while not self._stop.wait(10):
            with contextlib.suppress(OSError):
                self._send(BaseCommand(type=BaseCommand.PING, ping=pb.CommandPing()))

    def drain(self, quiet: float = 2.0) -> int:
        """Read until the broker sends nothing for ``quiet`` seconds; the bytes read."""
        self._stop.set()
        self.sock.settimeout(quiet)
        total = 0
        with contextlib.suppress(OSError):
            while data := self.sock.recv(1 << 20):
                total += len(data)
        return total

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


def stuck_consumer(args: argparse.Namespace, scale: int) -> list[Result]:
    n, size = 100_000 // scale, 100 * 1024
    result = Result("stuck-consumer")
    with fresh_broker(args, "stuck", result) as broker:
        free = shutil.disk_usage(broker.data_dir).free
        if n * size * 1.2 + 2 * 1024**3 > free:
            fits = int((free - 2 * 1024**3) / 1.2 / size)
            log(f"  SCALED: {n:,} x 100 KB do not fit in {free / 1024**3:.1f} GB free; "
                f"{fits:,} instead")
            result.notes.append(f"scaled from {n:,} to {fits:,} messages for disk space")
            n = fits
        result.size = f"{n:,} x 100 KB"
        topic = topic_name("stuck")
        stuck = StuckConsumer(broker.port, topic, permits=n)

        async def scenario() -> None:
            async with Client(broker.url) as client:
                producer = await client.create_producer(topic, max_pending_messages=64)
                rate = await publish(broker, producer, n, b"x" * size, chunk=2000)
                note = f"published at {rate:,.0f} msg/s ({rate * size / MB:,.0f} MB/s)"
                log(f"  {note}")
                result.notes.append(note)
                await producer.close()
            await asyncio.sleep(2)

        try:
            run_scenario(broker, result, scenario)
            drained = stuck.drain()
            result.notes.append(f"when it finally read (after the measurement), the stuck "
                                f"consumer got {drained / MB:,.1f} MB ({drained / size:,.0f} "
                                f"messages' worth)")
        finally:
            stuck.close()
    return [result]


def topics(args: argparse.Namespace, scale: int) -> list[Result]:
    n = args.topics if args.topics is not None else TOPICS_FULL // scale
    result = Result("topics", size=f"{n:,} topics")
    if args.topics is None and n < TOPICS_FULL // scale:
        result.notes.append(f"scaled from {TOPICS_FULL // scale:,} topics")
    connections, per_connection = 4, 4
    with fresh_broker(args, "topics", result) as broker:

        async def scenario() -> None:
            prefix = f"persistent://public/default/mem-touch-{uuid.uuid4().hex[:6]}-"
            names = iter(range(n))
            done = [0]
            started = time.perf_counter()
            step = max(n // 10, 1)

            failures: list[str] = []

            async def worker(client: Client) -> None:
                for index in names:
                    if len(failures) >= 50:
                        return
                    try:
                        producer = await client.create_producer(f"{prefix}{index}")
                        await producer.send(b"touched")
                        await producer.close()
                    except Exception as exc:  # counted and reported: a measurement
                        failures.append(f"{type(exc).__name__}: {exc}")
                        continue
                    done[0] += 1
                    if done[0] % step == 0:
                        broker.check()
                        log(f"  {done[0]:>6,} topics touched, {time.perf_counter() - started:6.1f}"
                            f" s, broker RSS {broker.rss_mb():.1f} MB, "
                            f"{open_fds(broker.pid)} fds")

            clients = [Client(broker.url, operation_timeout=10) for _ in range(connections)]
            try:
                await asyncio.gather(*(worker(c) for c in clients for _ in range(per_connection)))
            finally:
                for client in clients:
                    await client.close()
            took = time.perf_counter() - started
            result.notes.append(f"{done[0]:,} topics touched in {took:.1f} s "
                                f"({done[0] / took:,.0f}/s, {connections} connections x "
                                f"{per_connection} at a time); the broker's open files limit "
                                f"is {open_files_limit(broker.pid)}")
            if failures:
                result.size = f"{done[0]:,} of {n:,} topics"
                result.incomplete = failures[0]
                result.notes.append(f"{len(failures)} touches failed"
                                    + (", so it stopped" if len(failures) >= 50 else "")
                                    + f"; the first: {failures[0]}")
                log(f"  {len(failures)} touches failed; the first: {failures[0]}")
            await asyncio.sleep(1)

        run_scenario(broker, result, scenario)
    return [result]


def load(args: argparse.Namespace, scale: int) -> list[Result]:
    n = 1_000_000 // scale
    fill_result = Result("load (fill)", size=f"{n:,} x 100 B published")
    result = Result("load", size=f"{n:,} x 100 B reloaded")
    topic = topic_name("load")
    with fresh_broker(args, "load", result) as broker:

        async def fill() -> None:
            async with Client(broker.url) as client:
                producer = await client.create_producer(topic, max_pending_messages=2000)
                rate = await publish(broker, producer, n, b"x" * 100)
                note = f"published {n:,} unbatched at {rate:,.0f} msg/s"
                log(f"  {note}")
                fill_result.notes.append(note)
                await producer.close()

        run_scenario(broker, fill_result, fill)  # the first broker, which wrote them
        if fill_result.aborted:
            return [fill_result]
        started = time.perf_counter()
        broker.stop()
        fill_result.notes.append(f"the broker stopped (SIGTERM) in "
                                 f"{time.perf_counter() - started:.1f} s")
        broker.start()
        log(f"  restarted: {broker.shown_command}  (pid {broker.pid})")
        time.sleep(2)
        result.notes.append(f"restarted broker before the touch: RSS {broker.rss_mb():.1f} MB")

        async def touch() -> None:
            async with Client(broker.url) as client:
                started = time.perf_counter()
                producer = await client.create_producer(topic)
                took = time.perf_counter() - started
                result.notes.append(f"the touch (a producer, which loads the topic) took "
                                    f"{took * 1000:.0f} ms")
                await producer.close()
            await asyncio.sleep(1)

        run_scenario(broker, result, touch)
    return [fill_result, result]


def delayed(args: argparse.Namespace, scale: int) -> list[Result]:
    n = 100_000 // scale
    result = Result("delayed", size=f"{n:,} delayed {args.delay:g} s")
    with fresh_broker(args, "delayed", result) as broker:

        async def scenario() -> None:
            topic = topic_name("delayed")
            async with Client(broker.url) as client:
                consumer = await client.subscribe(topic, "delayed", subscription_type="shared")
                producer = await client.create_producer(topic, max_pending_messages=2000)
                rate = await publish(broker, producer, n, b"x" * 100, deliver_after=args.delay)
                note = f"published at {rate:,.0f} msg/s; then 5 s of waiting"
                log(f"  {note}")
                result.notes.append(note)
                await asyncio.sleep(5)
                early = 0
                while consumer.receive_nowait() is not None:
                    early += 1
                if early:
                    result.notes.append(f"{early:,} were delivered before their time")
                await producer.close()
                await consumer.close()

        run_scenario(broker, result, scenario)
    return [result]


def run_scenario(broker: Broker, result: Result,
                 scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run the client side, then measure (also when the RSS limit stopped it)."""
    try:
        run_async(scenario())
    except Aborted as exc:
        result.aborted = str(exc)
        log(f"  ABORTED: {exc}")
    measure(broker, result)


RUNNERS: dict[str, Callable[[argparse.Namespace, int], list[Result]]] = {
    "idle": idle,
    "slow-consumer": slow_consumer,
    "stuck-consumer": stuck_consumer,
    "topics": topics,
    "load": load,
    "delayed": delayed,
}


# ---------------------------------------------------------------- driver


def print_table(results: list[Result], floor_mb: float) -> None:
    head = (f"{'scenario':<15}{'size':<26}{'RSS MB':>8}{'peak MB':>9}{'x floor':>8}"
            f"{'fds':>7}{'peak fds':>9}{'lag max ms':>11}{'stalls':>7}  {'target':<22}result")
    log(head)
    log("-" * len(head))
    for r in results:
        lag = "n/a" if r.lag_ms is None else f"{r.lag_ms:.1f}"
        stalls = "n/a" if r.stalls is None else str(r.stalls)
        target = f"<={r.target_mb:.0f} MB, <={STALL_TARGET_MS:.0f} ms"
        verdict = (("RSS met" if r.rss_met else "RSS MISSED") + ", "
                   + ("lag met" if r.lag_met else "lag MISSED"))
        if r.aborted:
            verdict += " (aborted)"
        elif r.incomplete:
            verdict = "INCOMPLETE; " + verdict
        log(f"{r.scenario:<15}{r.size:<26}{r.rss_mb:>8.1f}{r.peak_mb:>9.1f}"
            f"{r.peak_mb / floor_mb:>8.1f}{r.fds:>7}{r.peak_fds:>9}{lag:>11}{stalls:>7}  "
            f"{target:<22}{verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.split("\n")[4:]),
    )
    parser.add_argument("--quick", action="store_true",
                        help="every scenario scaled down 10x (a smoke test)")
    parser.add_argument("--scenario", choices=SCENARIOS, action="append",
                        help="run only this scenario (repeatable); default: all")
    parser.add_argument("--topics", type=int, default=None,
                        help=f"topics to touch (default {TOPICS_FULL:,}, /10 with --quick)")
    parser.add_argument("--slow-rate", type=int, default=20_000,
                        help="msg/s the slow consumer reads and acks (default 20,000)")
    parser.add_argument("--delay", type=float, default=300.0,
                        help="deliver_after of the delayed messages, seconds (default 300)")
    parser.add_argument("--idle-wait", type=float, default=5.0,
                        help="seconds the idle broker idles before it is measured")
    parser.add_argument("--rss-limit-mb", type=int, default=4000,
                        help="stop a scenario whose broker passes this RSS (default 4000)")
    parser.add_argument("--keep", action="store_true",
                        help="keep each scenario's data dir and broker log")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    command = shlex.join([".venv/bin/python", "benchmarks/memory.py", *sys.argv[1:]])
    names = args.scenario or list(SCENARIOS)

    log(f"$ {command}")
    env_settings = sorted(k for k in os.environ if k.startswith("MAGNETAR_"))
    log(f"Python {sys.version.split()[0]}, {'uvloop' if uvloop else 'asyncio'} client, "
        f"{os.cpu_count()} CPUs; broker settings: "
        + (", ".join(f"{k}={os.environ[k]}" for k in env_settings) or "defaults")
        + ("; --quick: scenarios scaled down 10x" if args.quick else ""))
    log(f"magnetar from {source_of_magnetar()}")
    floor_mb, floor_peak = floor_rss()
    log(f"floor: python -c 'import magnetar.broker.service': RSS {floor_mb:.1f} MB "
        f"(peak {floor_peak:.1f} MB)")
    served_mb, _ = floor_rss("magnetar.cli")
    admin_mb, _ = floor_rss("magnetar.admin.server")
    log(f"imports of 'magnetar serve' (python -c 'import magnetar.cli': the broker and "
        f"the CLI): RSS {served_mb:.1f} MB; with the admin application, which loads on "
        f"the first admin request (python -c 'import magnetar.admin.server'): "
        f"{admin_mb:.1f} MB")
    results = []
    for name in names:
        log(f"== {name}")
        started = time.perf_counter()
        load_before = loadavg()
        done = RUNNERS[name](args, scale)
        done[-1].notes.append(f"scenario took {time.perf_counter() - started:.0f} s; "
                              f"1-minute load average {load_before} before, {loadavg()} after")
        results.extend(done)
    log("")
    log(f"$ {command}")
    log(f"floor (python -c 'import magnetar.broker.service'): RSS {floor_mb:.1f} MB; "
        f"'x floor' is peak RSS / floor; 'magnetar serve' imports alone: {served_mb:.1f} MB")
    print_table(results, floor_mb)
    log("")
    for r in results:
        for note in r.notes:
            log(f"{r.scenario}: {note}")
        if r.aborted:
            log(f"{r.scenario}: ABORTED: {r.aborted}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
