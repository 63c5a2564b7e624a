"""A blocking facade over the asyncio client, for code without an event loop.

``magnetar.client.sync.Client`` runs an event loop in a background thread; every
method submits a coroutine to it and waits for the result.  Message listeners run
on a separate worker thread, so they may call the blocking methods themselves.

```
from magnetar.client.sync import Client
with Client("pulsar://127.0.0.1:6650") as client:
    producer = client.create_producer("my-topic")
    producer.send(b"hello")
```
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from magnetar.client import client as _aclient
from magnetar.client.consuming import consumer as _aconsumer
from magnetar.client.consuming import reader as _areader
from magnetar.client.errors import AlreadyClosed, TimeoutError
from magnetar.client.message import Message
from magnetar.client.producing import producer as _aproducer
from magnetar.client.request_reply import requests as _rr
from magnetar.client.request_reply.requests import ReplyResult
from magnetar.protocol.message_id import MessageId

R = TypeVar("R")
SendCallback = Callable[[BaseException | None, MessageId | None], None]
RequestCallback = Callable[[BaseException | None, ReplyResult | None], None]


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()  # type: ignore[no-any-return]
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.new_event_loop()


async def _settled(receipt: _rr.ReplyReceipt) -> None:
    await receipt


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = _new_loop()
        self._thread = threading.Thread(
            target=self._run, name="magnetar-client", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, R]) -> concurrent.futures.Future[R]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("blocking client call made on the client's own event loop thread")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if future.done():
                # The operation's own timeout (RequestTimeout, receive timeout, ...);
                # concurrent.futures.TimeoutError is the builtin one on 3.11+.
                raise
            future.cancel()
            raise TimeoutError(f"operation did not complete within {timeout}s") from None
        except BaseException:
            future.cancel()
            raise

    def call(self, fn: Callable[..., R], *args: Any) -> R:
        """Run a plain function on the loop thread and return its result."""

        async def invoke() -> R:
            return fn(*args)

        return self.run(invoke())

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(10)


class Producer:
    """Blocking twin of :class:`magnetar.client.Producer`."""

    def __init__(self, runner: _LoopThread, producer: _aproducer.Producer) -> None:
        self._runner = runner
        self._producer = producer

    @property
    def topic(self) -> str:
        return self._producer.topic

    @property
    def producer_name(self) -> str:
        return self._producer.producer_name

    @property
    def last_sequence_id(self) -> int:
        return self._producer.last_sequence_id

    @property
    def topic_epoch(self) -> int | None:
        return self._producer.topic_epoch

    def is_connected(self) -> bool:
        return self._producer.is_connected()

    def send(self, value: _aproducer.Value, **options: Any) -> MessageId:
        """Send and wait for the receipt; options as for the asyncio ``send``."""
        return self._runner.run(self._producer.send(value, **options))

    def send_async(
        self,
        value: _aproducer.Value,
        callback: SendCallback | None = None,
        **options: Any,
    ) -> concurrent.futures.Future[MessageId]:
        """Queue a message; ``callback(error, message_id)`` runs when it is receipted
        (on the client's thread: keep it short and do not block in it)."""
        future = self._runner.submit(self._producer.send(value, **options))
        _call_back_when_done(future, callback, "send")
        return future

    def send_entry(self, payload: _aproducer.Value, **options: Any) -> MessageId:
        """PIP-96: send one entry as given (num_messages, properties, ... as for the
        asyncio ``send_entry``) and wait for its receipt."""
        return self._runner.run(self._producer.send_entry(payload, **options))

    def request(
        self, value: _aproducer.Value, *, timeout: float = 30.0, **options: Any
    ) -> ReplyResult:
        """PIP-371: send a request and wait for its reply; options (key, ordering_key,
        properties, event_time, deliver_after, deliver_at) as for the asyncio
        ``request``."""
        return self._runner.run(self._producer.request(value, timeout=timeout, **options))

    def request_async(
        self,
        value: _aproducer.Value,
        callback: RequestCallback | None = None,
        *,
        timeout: float = 30.0,
        **options: Any,
    ) -> concurrent.futures.Future[ReplyResult]:
        """PIP-371: send a request; ``callback(error, reply)`` runs when the reply (or
        the failure) comes (on the client's thread: keep it short, do not block)."""
        future = self._runner.submit(self._producer.request(value, timeout=timeout, **options))
        _call_back_when_done(future, callback, "request")
        return future

    def flush(self) -> None:
        self._runner.run(self._producer.flush())

    def close(self) -> None:
        self._runner.run(self._producer.close())

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Consumer:
    """Blocking twin of :class:`magnetar.client.Consumer`."""

    def __init__(self, runner: _LoopThread, consumer: _aconsumer.Consumer) -> None:
        self._runner = runner
        self._consumer = consumer

    @property
    def topic(self) -> str:
        return self._consumer.topic

    @property
    def subscription_name(self) -> str:
        return self._consumer.subscription_name

    def is_connected(self) -> bool:
        return self._consumer.is_connected()

    def receive(self, timeout: float | None = None) -> Message:
        return self._runner.run(self._consumer.receive(timeout))

    def batch_receive(self, max_messages: int = 100, timeout: float = 0.1) -> list[Message]:
        return self._runner.run(self._consumer.batch_receive(max_messages, timeout))

    def acknowledge(
        self,
        message: Message | MessageId,
        *,
        reply: bytes | str | None = None,
        is_error: bool = False,
    ) -> concurrent.futures.Future[None] | None:
        """With ``reply`` (PIP-371), returns once the reply is written, with a future the
        broker's verdict settles (``result()`` raises a refusal)."""
        if reply is None:
            self._runner.run(self._consumer.acknowledge(message))
            return None
        receipt = self._runner.run(
            self._consumer.acknowledge(message, reply=reply, is_error=is_error)
        )
        return self._runner.submit(_settled(receipt))

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        self._runner.run(self._consumer.acknowledge_cumulative(message))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._runner.call(self._consumer.negative_acknowledge, message)

    def reconsume_later(
        self, message: Message, delay: float, properties: Mapping[str, str] | None = None
    ) -> None:
        """Through the retry topic, ``delay`` seconds later (``retry_enable=True``)."""
        self._runner.run(self._consumer.reconsume_later(message, delay, properties))

    def redeliver_unacknowledged_messages(self) -> None:
        self._runner.call(self._consumer.redeliver_unacknowledged_messages)

    def flush_acks(self) -> None:
        self._runner.run(self._consumer.flush_acks())

    def seek(self, target: MessageId | int) -> None:
        self._runner.run(self._consumer.seek(target))

    def get_last_message_id(self) -> MessageId:
        return self._runner.run(self._consumer.get_last_message_id())

    def unsubscribe(self) -> None:
        self._runner.run(self._consumer.unsubscribe())

    def requests(self, *, skip_expired: bool = False) -> Iterator[Request]:
        """PIP-371 request handling: ``for req in consumer.requests(): req.reply(b"...")``."""
        while True:
            try:
                msg = self.receive()
            except AlreadyClosed:
                return
            request = Request(self._runner, _rr.Request(self._consumer, msg))
            if skip_expired and request.is_expired():
                request.acknowledge()
                continue
            yield request

    def close(self) -> None:
        self._runner.run(self._consumer.close())

    def __iter__(self) -> Iterator[Message]:
        while True:
            try:
                yield self.receive()
            except AlreadyClosed:
                return

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Request:
    """Blocking twin of :class:`magnetar.client.request_reply.Request`."""

    def __init__(self, runner: _LoopThread, request: _rr.Request) -> None:
        self._runner = runner
        self._request = request

    @property
    def message(self) -> Message:
        return self._request.message

    @property
    def value(self) -> bytes:
        return self._request.value

    @property
    def properties(self) -> dict[str, str]:
        return self._request.properties

    @property
    def key(self) -> str | None:
        return self._request.key

    @property
    def message_id(self) -> MessageId:
        return self._request.message_id

    @property
    def requester(self) -> str:
        return self._request.requester

    @property
    def is_request(self) -> bool:
        return self._request.is_request

    @property
    def timeout_ms(self) -> int | None:
        return self._request.timeout_ms

    @property
    def deadline_ms(self) -> int | None:
        return self._request.deadline_ms

    def is_expired(self) -> bool:
        return self._request.is_expired()

    def reply(
        self, value: bytes | str, *, is_error: bool = False
    ) -> concurrent.futures.Future[None]:
        """Returns once the reply is written, with a future the broker's verdict settles."""
        receipt = self._runner.run(self._request.reply(value, is_error=is_error))
        return self._runner.submit(_settled(receipt))

    def acknowledge(self) -> None:
        self._runner.run(self._request.acknowledge())

    def negative_acknowledge(self) -> None:
        self._runner.call(self._request.negative_acknowledge)

    def __repr__(self) -> str:
        return repr(self._request)


class Reader:
    """Blocking twin of :class:`magnetar.client.Reader`."""

    def __init__(self, runner: _LoopThread, reader: _areader.Reader) -> None:
        self._runner = runner
        self._reader = reader

    @property
    def topic(self) -> str:
        return self._reader.topic

    def read_next(self, timeout: float | None = None) -> Message:
        return self._runner.run(self._reader.read_next(timeout))

    def has_message_available(self) -> bool:
        return self._runner.run(self._reader.has_message_available())

    def seek(self, target: MessageId | int) -> None:
        self._runner.run(self._reader.seek(target))

    def is_connected(self) -> bool:
        return self._reader.is_connected()

    def close(self) -> None:
        self._runner.run(self._reader.close())

    def __iter__(self) -> Iterator[Message]:
        while True:
            try:
                yield self.read_next()
            except AlreadyClosed:
                return

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


SyncListener = Callable[[Consumer, Message], None]


class Client:
    """Blocking twin of :class:`magnetar.client.Client` (same arguments)."""

    def __init__(self, service_url: str, **options: Any) -> None:
        self._runner = _LoopThread()
        self._listener_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._client = _aclient.Client(service_url, **options)
        self._closed = False

    def create_producer(self, topic: str, **options: Any) -> Producer:
        return Producer(self._runner, self._runner.run(self._client.create_producer(topic,
                                                                                     **options)))

    def subscribe(
        self,
        topic: str | Sequence[str] | Any,
        subscription: str,
        *,
        message_listener: SyncListener | None = None,
        **options: Any,
    ) -> Consumer:
        """Subscribe; a ``message_listener(consumer, message)`` runs on a worker thread,
        one message at a time."""
        holder: list[Consumer] = []
        if message_listener is not None:
            if self._listener_pool is None:
                self._listener_pool = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="magnetar-listener"
                )
            pool = self._listener_pool
            listener = message_listener

            async def run_listener(_consumer: _aconsumer.Consumer, msg: Message) -> None:
                while not holder:
                    await asyncio.sleep(0.001)
                await asyncio.get_running_loop().run_in_executor(
                    pool, listener, holder[0], msg
                )

            options["message_listener"] = run_listener
        consumer = Consumer(
            self._runner, self._runner.run(self._client.subscribe(topic, subscription, **options))
        )
        holder.append(consumer)
        return consumer

    def create_reader(self, topic: str, start_message_id: MessageId, **options: Any) -> Reader:
        return Reader(
            self._runner,
            self._runner.run(self._client.create_reader(topic, start_message_id, **options)),
        )

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._runner.run(self._client.get_topic_partitions(topic))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._runner.run(self._client.close())
        finally:
            self._runner.stop()
            if self._listener_pool is not None:
                self._listener_pool.shutdown(wait=False)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _call_back_when_done(
    future: concurrent.futures.Future[R],
    callback: Callable[[BaseException | None, R | None], object] | None,
    what: str,
) -> None:
    """Run ``callback(error, result)`` when ``future`` settles (on the client's thread)."""
    if callback is None:
        return

    def done(f: concurrent.futures.Future[R]) -> None:
        if f.cancelled():
            callback(AlreadyClosed(f"{what} cancelled"), None)
        elif f.exception() is not None:
            callback(f.exception(), None)
        else:
            callback(None, f.result())

    future.add_done_callback(done)
