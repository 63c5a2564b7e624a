"""NATS core request-reply for ``rpc.py``'s reference row.

Owns starting a ``nats-server`` (core only, no JetStream: nothing is persisted) on
a free loopback port, the responder as NATS users write it (a subscription whose
callback answers with ``msg.respond``) and the requester's call
(``nc.request``). Needs the ``nats-server`` binary (Debian: ``apt-get install
nats-server``) and ``nats-py`` (``pip install -e '.[bench]'``); ``missing()`` says
which is absent so that rpc.py can skip the row with a note.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from multiprocessing.synchronize import Event as EventType
from typing import Any

from magnetar.testing.embedded import free_port, wait_until_listening


def missing() -> str | None:
    """Why the NATS row cannot run here, or None when it can."""
    lacking = []
    if shutil.which("nats-server") is None:
        lacking.append("the nats-server binary (apt-get install -y nats-server)")
    if importlib.util.find_spec("nats") is None:
        lacking.append("nats-py (.venv/bin/pip install -e '.[bench]')")
    return " and ".join(lacking) or None


def subject_of(topic: str) -> str:
    """A NATS subject from rpc.py's per-pattern topic name."""
    return topic.rsplit("/", 1)[-1]


@contextlib.contextmanager
def nats_server() -> Iterator[tuple[str, int]]:
    """A fresh core nats-server: (its URL, its pid)."""
    binary = shutil.which("nats-server")
    assert binary is not None
    port = free_port()
    process = subprocess.Popen(
        [binary, "-a", "127.0.0.1", "-p", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_listening(port, process, 15)
        yield f"nats://127.0.0.1:{port}", process.pid
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def respond(url: str, topic: str, ready: EventType, stop: EventType, _: Any) -> None:
    """The responder until ``stop`` is set: each request's data comes back as its reply."""
    import nats

    nc = await nats.connect(url)

    async def handler(msg: Any) -> None:
        await msg.respond(msg.data)

    await nc.subscribe(subject_of(topic), cb=handler)
    await nc.flush()
    ready.set()
    await asyncio.get_running_loop().run_in_executor(None, stop.wait)
    await nc.drain()


@contextlib.asynccontextmanager
async def requester(url: str, topic: str) -> AsyncIterator[Callable[[bytes], Awaitable[bytes]]]:
    """``request(payload) -> reply`` over one connection (nats-py's muxed inbox)."""
    import nats

    nc = await nats.connect(url)
    subject = subject_of(topic)

    async def request(payload: bytes) -> bytes:
        reply = await nc.request(subject, payload, timeout=30)
        return bytes(reply.data)

    try:
        yield request
    finally:
        await nc.close()
