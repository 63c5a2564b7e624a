"""An asyncio event loop on a background thread, for Spark's synchronous callbacks.

Spark calls the data source from plain threads (planning, ``read``, ``write``); the
client is asyncio.  A :class:`BackgroundLoop` runs the client's loop on its own thread,
so that a reader can decode the next chunk of messages there while Spark's thread
converts the previous one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

R = TypeVar("R")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()  # type: ignore[no-any-return]
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.new_event_loop()


class BackgroundLoop:
    """``with BackgroundLoop() as loop: loop.run(coro)``; the thread ends on exit."""

    def __init__(self) -> None:
        self.loop = _new_loop()
        self._thread = threading.Thread(target=self._serve, name="magnetar-spark", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        # Let cancelled tasks finish their cleanup before the loop goes.
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, R]) -> concurrent.futures.Future[R]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        """Run ``coro`` on the loop and wait for its result (or its exception)."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)

    def __enter__(self) -> BackgroundLoop:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
