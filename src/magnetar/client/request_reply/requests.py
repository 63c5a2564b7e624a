"""PIP-371 request-reply, client side.

A request is an ordinary message that carries its timeout in the property
``magnetar.request.timeout.ms``.  A consumer answers it by acknowledging it with
a reply (``consumer.acknowledge(msg, reply=b"...")``): the ACK frame names the
requester (``reply_to_client`` = the message's producer name, or empty when only
the message id is at hand) and carries the reply bytes after the command, with a
request id the broker answers with ACK_RESPONSE (an error for a refused reply).
The broker forwards the reply to the requesting producer as REQUEST_RECEIPT;
:class:`PendingRequests` matches it to the request.

A receipt that carries ``request_sequence_id`` is matched by it: a request keeps
its producer sequence id when it is sent again after a reconnect, while its
message id changes (the broker may hold both copies, and a consumer may answer
either), so only the sequence id tells two resent requests apart.  A broker that
does not fill that field in gets the older matching by message id (with the
batch index when the request was batched).  There a REQUEST_RECEIPT can overtake
the SEND_RECEIPT of its own request (the reply travels on another path), so
receipts for ids the producer does not know yet are kept until the send receipts
catch up; a reply to the first copy of a resent request is taken only when it
cannot be for any other request, never guessed.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, overload

from magnetar.client.errors import RequestTimeout
from magnetar.client.message import new_id
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import pb
from magnetar.protocol.request_reply import REQUEST_TIMEOUT_PROPERTY

if TYPE_CHECKING:
    from magnetar.client.message import Message

__all__ = ["REQUEST_TIMEOUT_PROPERTY", "PendingRequests", "ReplyReceipt", "ReplyResult", "Request"]

_I64_MAX = (1 << 63) - 1
# Replies that arrived before their request's send receipt, kept at most this many.
_MAX_EARLY = 10_000
# Ids of requests given up on, so that their late replies are recognized and dropped.
_MAX_EXPIRED = 10_000

RequestKey = tuple[int, int, int]  # (ledger, entry, batch index)

# What sending a reply returns: settled by the broker's verdict (None: accepted; the
# error for its code: refused).
ReplyReceipt = asyncio.Future[None]


@dataclass(frozen=True, slots=True)
class ReplyResult:
    """The answer to a request: the consumer's reply bytes and whether it is an error."""

    request_message_id: MessageId
    value: bytes
    is_error: bool


_new_object = object.__new__
_set_request_message_id = vars(ReplyResult)["request_message_id"].__set__
_set_value = vars(ReplyResult)["value"].__set__
_set_is_error = vars(ReplyResult)["is_error"].__set__


def _result(request_message_id: MessageId, value: bytes, is_error: bool) -> ReplyResult:
    """``ReplyResult(...)`` without the frozen dataclass's slow ``__init__`` (one per
    reply)."""
    result: ReplyResult = _new_object(ReplyResult)
    _set_request_message_id(result, request_message_id)
    _set_value(result, value)
    _set_is_error(result, is_error)
    return result


def _key(message_id: MessageId) -> RequestKey:
    return (message_id.ledger_id, message_id.entry_id, message_id.batch_index)


class PendingRequest:
    """One request in flight: its future, its deadline (on the loop's clock), its
    sequence id and (once receipted) its message id."""

    __slots__ = ("deadline", "done", "future", "key", "sequence_id", "timeout")

    def __init__(
        self, future: asyncio.Future[ReplyResult], timeout: float, deadline: float = 0.0
    ) -> None:
        self.future = future
        self.timeout = timeout
        self.deadline = deadline
        self.key: RequestKey | None = None
        self.sequence_id: int | None = None
        self.done = False


class PendingRequests:
    """The requests of one partition producer, waiting for their replies.

    Timeouts cost no timer per request: the requests waiting with the same timeout
    are kept in the order they were made, which is their deadlines' order, and one
    timer per timeout value, armed for the oldest, fails those past theirs.
    """

    def __init__(self, topic: str, partition: int = -1) -> None:
        self._loop = asyncio.get_running_loop()
        self.topic = topic
        self.partition = partition
        # timeout -> the requests waiting with it, oldest first; and its timer.
        self._waiting: dict[float, dict[PendingRequest, None]] = {}
        self._timers: dict[float, asyncio.TimerHandle] = {}
        self._by_seq: dict[int, PendingRequest] = {}
        self._by_key: dict[RequestKey, PendingRequest] = {}
        self._unsent: set[PendingRequest] = set()  # no send receipt yet
        self._early: OrderedDict[RequestKey, tuple[MessageId, bytes, bool]] = OrderedDict()
        self._expired: OrderedDict[RequestKey, None] = OrderedDict()
        self.late_replies = 0  # replies dropped because their request was over
        self.matched_by_sequence_id = 0  # replies the broker named by request_sequence_id

    def __len__(self) -> int:
        """Requests still waiting for their reply."""
        # A request answered (or timed out) before its send receipt stays in _unsent
        # until that receipt, but no longer waits.
        return len(self._by_key) + sum(not request.done for request in self._unsent)

    def new(self, timeout: float) -> PendingRequest:
        loop = self._loop
        request = PendingRequest(loop.create_future(), timeout, loop.time() + timeout)
        waiting = self._waiting.get(timeout)
        if waiting is None:
            waiting = self._waiting[timeout] = {}
        waiting[request] = None
        if timeout not in self._timers:
            self._timers[timeout] = loop.call_at(request.deadline, self._time_out, timeout)
        self._unsent.add(request)
        return request

    def numbered(self, request: PendingRequest, sequence_id: int) -> None:
        """The producer gave the request its sequence id (kept across resends)."""
        if request.done:
            return
        request.sequence_id = sequence_id
        self._by_seq[sequence_id] = request

    def sent(
        self,
        request: PendingRequest,
        message_id: MessageId,
        first_copy_after: tuple[int, int] | None = None,
    ) -> None:
        """The request's send receipt arrived: from now on it is known by its id.

        ``first_copy_after`` (a ``(ledger, entry)``; ``(-1, -1)`` for none): the
        request went out again after a reconnect, as the only request of that
        resend, and every earlier message of the producer had its receipt up to
        that position.  Its first copy may be stored too, after that position and
        before ``message_id``, and may be what a consumer answered: an unclaimed
        reply in that range is its answer when exactly one is there.
        """
        self._unsent.discard(request)
        key = _key(message_id)
        early = self._early.pop(key, None)
        if early is None and first_copy_after is not None and self._early and not request.done:
            candidates = [k for k in self._early if first_copy_after < k[:2] and k < key]
            if len(candidates) == 1:
                early = self._early.pop(candidates[0])
        if request.done:
            self._remember_expired(key)
            if early is not None:
                self.late_replies += 1
        else:
            request.key = key
            if early is not None:
                self._complete(request, _result(*early))
            else:
                self._by_key[key] = request
        if not self._unsent and self._early:
            self._early_cleanup()

    def on_receipt(self, receipt: pb.CommandRequestReceipt, body: bytes) -> None:
        if receipt.HasField("request_sequence_id"):
            self._on_numbered_receipt(receipt, body)
            return
        message_id = self._message_id(receipt)
        key = _key(message_id)
        request = self._by_key.pop(key, None)
        if request is not None:
            self._complete(request, _result(message_id, body, receipt.is_error))
            return
        if key in self._expired or not self._unsent:
            self.late_replies += 1  # timed out, already answered, or not ours
            return
        # The reply overtook the send receipt of its request.
        self._early[key] = (message_id, body, receipt.is_error)
        while len(self._early) > _MAX_EARLY:
            self._early.popitem(last=False)

    def _on_numbered_receipt(self, receipt: pb.CommandRequestReceipt, body: bytes) -> None:
        request = self._by_seq.get(receipt.request_sequence_id)
        if request is None or request.done:
            self.late_replies += 1  # timed out, already answered, or not ours
            return
        self.matched_by_sequence_id += 1
        if receipt.HasField("request_message_id"):
            message_id = self._message_id(receipt)
        elif request.key is not None:
            message_id = new_id(request.key[0], request.key[1], request.key[2],
                                self.partition, 0)
        else:
            message_id = new_id(-1, -1, -1, self.partition, 0)
        self._complete(request, _result(message_id, body, receipt.is_error))

    def _message_id(self, receipt: pb.CommandRequestReceipt) -> MessageId:
        """``MessageId.from_pb`` of the request's id, the producer's partition unless it
        names one, built the fast way (one per reply)."""
        mid = receipt.request_message_id
        ledger, entry = mid.ledgerId, mid.entryId
        return new_id(
            ledger - (1 << 64) if ledger > _I64_MAX else ledger,
            entry - (1 << 64) if entry > _I64_MAX else entry,
            mid.batch_index,
            mid.partition if mid.HasField("partition") else self.partition,
            mid.batch_size if mid.HasField("batch_size") else 0,
        )

    def fail(self, request: PendingRequest, exc: BaseException) -> None:
        """The request failed before its reply (it will have no send receipt either)."""
        self._unsent.discard(request)
        self._finish(request)
        if not request.future.done():
            request.future.set_exception(exc)

    def fail_all(self, exc: BaseException) -> None:
        for request in [*self._unsent, *self._by_key.values(), *self._by_seq.values()]:
            self.fail(request, exc)
        self._early.clear()
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._waiting.clear()

    # ------------------------------------------------------------------ internals

    def _complete(self, request: PendingRequest, result: ReplyResult) -> None:
        self._finish(request)
        if not request.future.done():
            request.future.set_result(result)

    def _finish(self, request: PendingRequest) -> None:
        """The request is over: it leaves every index but ``_unsent``, where a request
        without its send receipt stays until that receipt (or its failure) tells
        its id, so that a late reply to it is recognized."""
        request.done = True
        waiting = self._waiting.get(request.timeout)
        if waiting is not None:
            waiting.pop(request, None)
        if request.key is not None and self._by_key.get(request.key) is request:
            del self._by_key[request.key]
            self._remember_expired(request.key)
        if request.sequence_id is not None and self._by_seq.get(request.sequence_id) is request:
            del self._by_seq[request.sequence_id]

    def _time_out(self, timeout: float) -> None:
        """The timer of the requests waiting with ``timeout``: fail those past their
        deadline (the oldest), and wait for the next one's."""
        del self._timers[timeout]
        waiting = self._waiting.get(timeout)
        if not waiting:
            self._waiting.pop(timeout, None)
            return
        now = self._loop.time()
        expired = []
        for request in waiting:
            if request.deadline > now:
                break
            expired.append(request)
        for request in expired:
            self._finish(request)
            if not request.future.done():
                request.future.set_exception(RequestTimeout(
                    f"no reply within {request.timeout}s to a request on {self.topic}"
                ))
        if waiting:
            first = next(iter(waiting)).deadline
            self._timers[timeout] = self._loop.call_at(first, self._time_out, timeout)
        else:
            del self._waiting[timeout]

    def _remember_expired(self, key: RequestKey) -> None:
        self._expired[key] = None
        while len(self._expired) > _MAX_EXPIRED:
            self._expired.popitem(last=False)

    def _early_cleanup(self) -> None:
        # Every request has its id now: early receipts nobody claimed are not ours.
        self.late_replies += len(self._early)
        self._early.clear()


def request_timeout_ms(message: Message) -> int | None:
    """The timeout a request message carries (``None`` for an ordinary message)."""
    raw = message.properties.get(REQUEST_TIMEOUT_PROPERTY)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


class RequestConsumer(Protocol):
    """What a request needs of the consumer that received it: acks, with or without a
    reply, and negative acks (:class:`~magnetar.client.Consumer` is one)."""

    @overload
    async def acknowledge(
        self, message: Message, *, reply: None = None, is_error: bool = False
    ) -> None: ...

    @overload
    async def acknowledge(
        self, message: Message, *, reply: bytes | str, is_error: bool = False
    ) -> ReplyReceipt: ...

    def negative_acknowledge(self, message: Message) -> None: ...


class Request:
    """A received request, for the request-handler loop ``async for req in consumer.requests()``.

    ``reply()`` acknowledges the message with the reply; ``is_expired()`` tells
    whether the requester has given up already (publish time + its timeout, on
    ``clock``, milliseconds since the epoch).
    """

    __slots__ = ("_clock", "_consumer", "_timeout_ms", "_timeout_read", "message")

    def __init__(
        self,
        consumer: RequestConsumer,
        message: Message,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._consumer = consumer
        self.message = message
        self._clock = clock or time.time
        self._timeout_read = False  # the timeout property is read once, when first asked
        self._timeout_ms: int | None = None

    @property
    def value(self) -> bytes:
        return self.message.value

    @property
    def key(self) -> str | None:
        return self.message.key

    @property
    def properties(self) -> dict[str, str]:
        return self.message.properties

    @property
    def message_id(self) -> MessageId:
        return self.message.message_id

    @property
    def requester(self) -> str:
        return self.message.producer_name

    @property
    def timeout_ms(self) -> int | None:
        if not self._timeout_read:
            self._timeout_ms = request_timeout_ms(self.message)
            self._timeout_read = True
        return self._timeout_ms

    @property
    def is_request(self) -> bool:
        """False for an ordinary message (a reply to it reaches nobody)."""
        return self.timeout_ms is not None

    @property
    def deadline_ms(self) -> int | None:
        timeout = self.timeout_ms
        return None if timeout is None else self.message.publish_time + timeout

    def is_expired(self) -> bool:
        deadline = self.deadline_ms
        return deadline is not None and self._clock() * 1000 > deadline

    async def reply(self, value: bytes | str, *, is_error: bool = False) -> ReplyReceipt:
        """Acknowledge the request with ``value`` as its reply.  Pipelined: returns once
        the reply is written, with a receipt the broker's verdict settles later (await
        it to learn of a refusal; a refused reply is logged and counted either way,
        and the request stays unacknowledged).  Raises
        :class:`~magnetar.client.errors.MessageTooBig` at once (nothing sent)."""
        return await self._consumer.acknowledge(self.message, reply=value, is_error=is_error)

    async def acknowledge(self) -> None:
        """Acknowledge without replying (e.g. an expired request)."""
        await self._consumer.acknowledge(self.message)

    def negative_acknowledge(self) -> None:
        self._consumer.negative_acknowledge(self.message)

    def __repr__(self) -> str:
        return f"<Request {self.message.message_id} from {self.requester!r}>"

