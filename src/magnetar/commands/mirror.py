"""``magnetar mirror``: copy topics from a magnetar broker to another Pulsar-protocol
cluster (Apache Pulsar, or another magnetar), the way out of one magnetar.

It finds the source's topics (``mirror_topics``), makes the target's partitioned
topics as the source's, then runs one pipe per topic or partition
(``mirror_pipe``): a durable subscription on the source, a producer on the target.
It copies the backlog and exits, or with ``--follow`` keeps copying (and picks up
new source topics) until Ctrl-C or SIGTERM; either way it ends with a summary.
A progress bar shows on a terminal (rich, on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from magnetar.commands.admin import DEFAULT_ADMIN_URL
from magnetar.commands.client_args import add_client_options, make_client
from magnetar.commands.connection import Settings
from magnetar.commands.mirror_topics import (
    Filters,
    MirrorError,
    SourceTopic,
    check_namespace,
    check_target,
    check_topic,
    discover,
    prepare_target_admin,
)
from magnetar.commands.rest import RestClient

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from magnetar.client import Client
    from magnetar.commands.mirror_pipe import Pipe

DEFAULT_SUBSCRIPTION = "magnetar-mirror"

EXAMPLES = """\
examples:
  # copy every topic of the local magnetar to a Pulsar cluster, then exit
  magnetar mirror --to pulsar://pulsar.example:6650 --to-admin-url http://pulsar.example:8080

  # a migration: keep copying public/orders until Ctrl-C, while the clients move over
  magnetar mirror --to pulsar://pulsar.example:6650 --namespace public/orders --follow

  # two topics only, from a magnetar with token authentication
  magnetar mirror --service-url pulsar://mq:6650 --admin-url http://mq:8080 --token "$T" \\
      --to pulsar://pulsar.example:6650 --to-token "$T2" --topic a --topic acme/eu/b
"""


def add_mirror_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "mirror", help="copy topics to another Pulsar cluster (a way to Apache Pulsar)",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES,
        description=(
            "Copy persistent topics from this magnetar broker to another Pulsar-protocol "
            "cluster through the standard producer API: payloads, keys, ordering keys, "
            "properties, event times, partitions (partition i to partition i) and "
            "schemas are kept; publish times are the target's. Each topic or partition "
            "is read through a durable subscription (--subscription) held on the source, "
            "acknowledged once the target has a message, so a stopped or killed mirror "
            "resumes where it was. With deduplication on at the target (turn it on there "
            "first) nothing is stored twice: the target's producers are named after the "
            "source topic and number messages by source position. Without filters every "
            "topic is copied. Exit code 0: done (or stopped by Ctrl-C/SIGTERM with "
            "--follow); 1: an error (one line on stderr); 2: bad usage."
        ),
    )
    parser.add_argument("--to", required=True, metavar="URL",
                        help="the target's service URL, e.g. pulsar://pulsar.example:6650")
    parser.add_argument("--to-admin-url", metavar="URL",
                        help="the target's admin REST URL: create there the tenants, namespaces "
                             "and partitioned topics it lacks (without it they must exist)")
    parser.add_argument("--to-token", help="a token for the target (and its admin API)")
    parser.add_argument("--admin-url", "--web-service-url", dest="admin_url",
                        default=argparse.SUPPRESS, metavar="URL",
                        help="the source's admin REST URL, which lists its topics and schemas "
                             f"(default: $MAGNETAR_ADMIN_URL, webServiceUrl, {DEFAULT_ADMIN_URL})")
    parser.add_argument("--tenant", action="append", default=[], metavar="TENANT",
                        help="copy every topic of this tenant (repeatable)")
    parser.add_argument("--namespace", action="append", default=[], metavar="TENANT/NS",
                        help="copy every topic of this namespace (repeatable)")
    parser.add_argument("--topic", action="append", default=[], metavar="NAME",
                        help="copy this topic (repeatable; a partitioned topic whole)")
    parser.add_argument("--subscription", default=DEFAULT_SUBSCRIPTION,
                        help="the subscription held on each source topic "
                             f"(default: {DEFAULT_SUBSCRIPTION})")
    parser.add_argument("--follow", action="store_true",
                        help="after the backlog keep copying, and copy new topics too, until "
                             "Ctrl-C or SIGTERM")
    parser.add_argument("--discovery-interval", type=float, default=30.0, metavar="S",
                        help="with --follow, look for new source topics every S seconds "
                             "(default: 30)")
    add_client_options(parser)  # the source's --service-url and --token


def _progress() -> Progress:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    return Progress(
        TextColumn("[bold]mirror"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, disable=not console.is_terminal, transient=True,
    )


class Mirror:
    """The pipes of one run, their progress, and the topics they copy."""

    def __init__(self, args: argparse.Namespace, source: Client, target: Client,
                 progress: Progress) -> None:
        self.args = args
        self.source = source
        self.target = target
        self.rest = Settings.of(args).rest_client()
        self.target_rest = (RestClient(args.to_admin_url, args.to_token)
                            if args.to_admin_url else None)
        self.topics: dict[str, SourceTopic] = {}
        self.pipes: list[Pipe] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.progress = progress
        self.task: TaskID = progress.add_task("mirror", total=0)
        self.stopping = False

    def _backlog(self, entries: int) -> None:
        self.progress.update(self.task, total=(self.progress.tasks[0].total or 0) + entries)

    def _done(self, count: int) -> None:
        self.progress.advance(self.task, count)
        state = self.progress.tasks[0]  # a batch's messages outnumber its one entry
        if state.total is not None and state.completed > state.total:
            self.progress.update(self.task, total=state.completed)

    async def add_new(self, filters: Filters) -> None:
        """Start copying the source topics the filters name that are not yet copied."""
        from magnetar.commands.mirror_pipe import Pipe

        found = await asyncio.to_thread(discover, self.rest, filters)
        new = [t for t in found if t.name not in self.topics]
        if not new:
            return
        if self.target_rest is not None:
            await asyncio.to_thread(prepare_target_admin, self.target_rest, new)
        else:
            await check_target(self.target, new)
        for topic in new:
            self.topics[topic.name] = topic
            for name in topic.partition_names():
                pipe = Pipe(self.source, self.target, self.rest, name, self.args.subscription,
                            self._backlog, self._done)
                self.pipes.append(pipe)
                self.tasks.append(asyncio.create_task(pipe.run(self.args.follow)))

    def stop(self) -> None:
        self.stopping = True
        for pipe in self.pipes:
            pipe.stop()

    def summary(self, elapsed: float) -> str:
        copied = sum(p.counts.copied for p in self.pipes)
        already = sum(p.counts.already for p in self.pipes)
        lines = []
        for name, topic in sorted(self.topics.items()):
            pipes = [p for p in self.pipes if p.topic in topic.partition_names()]
            shape = f" ({topic.partitions} partitions)" if topic.partitions else ""
            lines.append(f"{name}{shape}: {sum(p.counts.copied for p in pipes)} copied, "
                         f"{sum(p.counts.already for p in pipes)} already there")
        lines.append(f"{copied} messages copied, {already} already on the target, "
                     f"{len(self.topics)} topics to {self.args.to} in {elapsed:.2f} s")
        return "\n".join(lines)


async def _follow(mirror: Mirror, filters: Filters, stop: asyncio.Event) -> None:
    """Until ``stop``: watch the pipes (one failing fails the run) and look for new
    topics every discovery interval."""
    while not stop.is_set():
        waiting = asyncio.create_task(stop.wait())
        pending = {waiting, *mirror.tasks}
        done, _ = await asyncio.wait(pending, timeout=mirror.args.discovery_interval,
                                     return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        for task in done:
            if task is not waiting:
                task.result()  # a pipe ends early only on an error: raise it
                mirror.tasks.remove(task)  # type: ignore[arg-type]
        if not stop.is_set():
            await mirror.add_new(filters)


async def mirror(args: argparse.Namespace, filters: Filters) -> int:
    from magnetar.client import Client
    from magnetar.client.transport.auth import AuthenticationToken

    started = time.monotonic()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None

    def on_signal() -> None:
        if stop.is_set():  # a second Ctrl-C: do not wait for the target's receipts
            main.cancel()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    auth = AuthenticationToken(args.to_token) if args.to_token else None
    target = Client(args.to, auth=auth, operation_timeout=30.0)
    with _progress() as progress:
        async with make_client(args) as source, target:
            run = Mirror(args, source, target, progress)
            failed = False
            try:
                await run.add_new(filters)
                if not run.topics and not args.follow:
                    raise MirrorError("no topic on the source matches the filters")
                if args.follow:
                    await _follow(run, filters, stop)
                else:
                    waiting = asyncio.create_task(stop.wait())
                    copied: asyncio.Future[Any] = asyncio.gather(*run.tasks)
                    await asyncio.wait({waiting, copied}, return_when=asyncio.FIRST_COMPLETED)
                    waiting.cancel()
                run.stop()
                await asyncio.gather(*run.tasks)
            except BaseException:
                failed = True
                run.stop()
                with contextlib.suppress(BaseException):
                    await asyncio.gather(*run.tasks, return_exceptions=True)
                raise
            finally:
                progress.stop()
                if run.pipes or not failed:  # and what was copied before an error
                    print(run.summary(time.monotonic() - started), flush=True)
    return 0


def run_mirror(args: argparse.Namespace) -> int:
    from magnetar.client.errors import PulsarError

    try:
        filters = Filters(list(args.tenant), [check_namespace(n) for n in args.namespace],
                          [check_topic(t) for t in args.topic])
    except MirrorError as exc:
        print(f"magnetar mirror: {exc}", file=sys.stderr)
        return 2
    if args.discovery_interval <= 0:
        print("magnetar mirror: --discovery-interval must be above 0", file=sys.stderr)
        return 2
    try:
        return asyncio.run(mirror(args, filters))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("magnetar mirror: stopped without waiting for the target", file=sys.stderr)
        return 130
    except MirrorError as exc:
        print(f"magnetar mirror: {exc}", file=sys.stderr)
        return 1
    except (PulsarError, OSError, TimeoutError) as exc:
        print(f"magnetar mirror: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
