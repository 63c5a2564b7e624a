"""PIP-371 request-reply routing: a consumer's ack carries a reply that goes straight
back to the producer that sent the request, as a REQUEST_RECEIPT frame.

A reply is forwarded only for a message of the entry (batch index below its message
count) that the subscription dispatched to the replying consumer and that has no reply
yet; anything else is refused (the ack is not applied). The requester is the producer
named in the request's stored metadata: a reply that names another is refused, and
one that names nobody (``reply_to_client`` empty) goes to it. With authentication on,
it goes only to a producer of that name whose connection has the role that published
the request (stamped into the request by the broker, see protocol/request_reply.py).

A reply whose requester is not attached at that moment is held until the request's own
timeout runs out (its property; ``rpc_reply_hold_seconds`` caps it) and delivered when
the requester attaches again. The ack that carried a held reply is applied only once
the reply is delivered, dropped or expired: a broker that stops meanwhile has not
acknowledged the request, so it is dispatched again after the restart and its answer
comes again (replies themselves live only in memory).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from magnetar.broker.observability.metrics import RoundTrips
from magnetar.protocol.fastpath import encode_request_receipt
from magnetar.protocol.frames import parse_metadata, parse_payload
from magnetar.protocol.request_reply import request_properties

if TYPE_CHECKING:
    from magnetar.broker.config.settings import Settings
    from magnetar.broker.topics.consumer import Consumer
    from magnetar.broker.topics.producer import Producer
    from magnetar.broker.topics.topic import Topic
    from magnetar.protocol.pb import pb

log = logging.getLogger("magnetar.broker.rpc")


class _ReplyCounters(Protocol):
    def reply_held(self) -> None: ...
    def reply_dropped(self, reason: str) -> None: ...


class ReplyService(Protocol):
    """What the router needs of the broker service (BrokerService has it): its settings,
    its clock (read at each use: tests replace it) and the reply counters of its metrics."""

    @property
    def config(self) -> Settings: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def metrics(self) -> _ReplyCounters: ...

# Requests already answered, so a second reply to one of them is refused.
_REPLIED_MEMORY = 100_000
# Producers that closed themselves: their replies are dropped, not held.
_CLOSED_MEMORY = 10_000


class ReplyRejected(Exception):
    """The reply cannot be accepted; the ack that carried it is not applied."""


@dataclass(slots=True)
class _Reply:
    request_id: bytes  # encoded MessageIdData of the request
    sequence_id: int  # the request's producer sequence id
    is_error: bool
    body: bytes
    role: str | None  # the role that published the request (authentication on)
    apply_ack: Callable[[], None]  # the ack that carried the reply, applied once it is over
    deadline: float = 0.0  # while held: when it is dropped


class ReplyRouter:
    def __init__(self, service: ReplyService) -> None:
        self.service = service
        config = service.config
        self.hold_seconds = config.rpc_reply_hold_seconds
        self.max_held = config.rpc_max_held_replies
        self.max_held_bytes = config.rpc_max_held_bytes
        self.check_roles = config.authentication_enabled
        self._replied: OrderedDict[tuple[str, int, int, int], None] = OrderedDict()
        self._closed: OrderedDict[tuple[str, str], str | None] = OrderedDict()
        self._held: dict[tuple[str, str], list[_Reply]] = {}
        self._held_count = 0
        self._held_bytes = 0
        self.forwarded = 0  # read by the metrics at scrape time
        self.round_trips = RoundTrips()

    # ------------------------------------------------------------ a reply arrives

    def forward(
        self,
        consumer: Consumer,
        ack: pb.CommandAck,
        body: bytes,
        apply_ack: Callable[[], None],
    ) -> None:
        """Write the reply to the requester's connection, or hold it for the requester,
        and apply the ack (``apply_ack``) once the reply is delivered or over.

        Raises ReplyRejected, with nothing applied, when the reply cannot be accepted.
        (This runs once per reply: the checks come first, cheapest first, and the
        texts of refusals are built only for a refusal.)
        """
        max_size = self.service.config.max_message_size
        if len(body) > max_size:
            raise ReplyRejected(
                f"reply of {len(body)} bytes exceeds the maximum message size of {max_size} bytes"
            )
        if not ack.message_id:
            raise ReplyRejected("a reply names the request's message id; the ack has none")
        topic = consumer.subscription.topic
        mid = ack.message_id[0]
        ledger_id, entry_id, batch_index = mid.ledgerId, mid.entryId, mid.batch_index
        if ledger_id == topic.ledger_id and entry_id > topic.last_visible_entry_id:
            raise ReplyRejected(f"reply to {_where(mid)}, past the end of {topic.name}")
        position = topic.exact_entry_id(ledger_id, entry_id)
        if position is None or position < topic.ledger.first_entry_id:
            raise ReplyRejected(
                f"reply to {_where(mid)}, which is not a stored message of {topic.name}"
            )
        info = topic.entry_info(position)
        if not _index_in_entry(batch_index, info.num_messages):
            raise ReplyRejected(
                f"reply to {_where(mid)}: the entry holds {info.num_messages} message(s)"
            )
        key = (topic.name, ledger_id, entry_id, batch_index if batch_index > 0 else 0)
        replied = self._replied
        if key in replied:
            self.service.metrics.reply_dropped("duplicate")
            raise ReplyRejected(f"{_where(mid)} has been answered already")
        if position not in consumer.pending:
            raise ReplyRejected(
                f"reply to {_where(mid)}, which was not delivered to consumer "
                f"'{consumer.name}' (or is acknowledged already)"
            )
        requester = ack.reply_to_client or info.producer_name
        if requester != info.producer_name:
            # A consumer must not be able to address another producer's connection.
            raise ReplyRejected(
                f"reply names requester '{requester}', but {_where(mid)} was sent by "
                f"'{info.producer_name}'"
            )
        role = None
        if self.check_roles:
            role = self._request_of(topic, position)[1]
            if role is None:
                raise ReplyRejected(
                    f"{_where(mid)} carries no requester role (a request sent without "
                    "authentication, or batched by a client that does not mark it): "
                    "with authentication on its reply could reach another role"
                )
        replied[key] = None
        if len(replied) > _REPLIED_MEMORY:
            replied.popitem(last=False)
        self.round_trips.observe(self.service.clock() - info.publish_time / 1000)
        # A batch's messages carry consecutive sequence ids from the batch's first.
        sequence_id = info.sequence_id + (batch_index if batch_index > 0 else 0)
        producer = topic.producers.get(requester)
        if producer is not None:
            cnx = producer.cnx
            if cnx.alive and cnx.supports_request_reply and (
                role is None or cnx.role == role  # (role: authentication on, see above)
            ):  # the common case, without a _Reply
                cnx.write(encode_request_receipt(
                    producer.producer_id, topic.message_id_bytes(position, batch_index),
                    ack.reply_is_error, body, sequence_id,
                ))
                self.forwarded += 1
                apply_ack()
                return
        reply = _Reply(
            topic.message_id_bytes(position, batch_index),
            sequence_id,
            ack.reply_is_error,
            body,
            role,
            apply_ack,
        )
        if producer is not None and producer.cnx.alive and self._may_receive(producer, role):
            self._deliver(producer, reply, topic)  # (dropped: no support for replies)
            return
        closed = (topic.name, requester)
        if closed in self._closed and self._closed[closed] == role:
            self._drop("producer_gone", requester, topic, reply)
            return
        self._hold(topic, requester, reply, self._deadline(topic, position, info.publish_time))

    def _may_receive(self, producer: Producer, role: str | None) -> bool:
        return not self.check_roles or producer.cnx.role == role

    def _request_of(self, topic: Topic, position: int) -> tuple[int | None, str | None]:
        """The request's ``(timeout_ms, role)``, read from its stored metadata."""
        section = parse_payload(topic.ledger.read(position), verify_checksum=False)
        return request_properties(parse_metadata(section).properties)

    def _deadline(self, topic: Topic, position: int, publish_time_ms: int) -> float:
        """Until when a held reply waits: the request's own timeout, capped."""
        now = self.service.clock()
        cap = now + self.hold_seconds
        timeout_ms = self._request_of(topic, position)[0]
        if timeout_ms is None:
            return cap
        return min(cap, publish_time_ms / 1000 + timeout_ms / 1000)

    # ------------------------------------------------------------ delivery

    def _deliver(self, producer: Producer, reply: _Reply, topic: Topic) -> None:
        cnx = producer.cnx
        if not cnx.supports_request_reply:
            self._drop("not_supported", producer.name, topic, reply)
            return
        cnx.write(
            encode_request_receipt(
                producer.producer_id,
                reply.request_id,
                reply.is_error,
                reply.body,
                reply.sequence_id,
            )
        )
        self.forwarded += 1
        reply.apply_ack()

    def _hold(self, topic: Topic, requester: str, reply: _Reply, deadline: float) -> None:
        if (
            deadline <= self.service.clock()
            or self._held_count >= self.max_held
            or self._held_bytes + len(reply.body) > self.max_held_bytes
        ):
            self._drop("producer_gone", requester, topic, reply)
            return
        reply.deadline = deadline
        self._held.setdefault((topic.name, requester), []).append(reply)
        self._held_count += 1
        self._held_bytes += len(reply.body)
        self.service.metrics.reply_held()
        log.debug("holding reply for %s on %s until it attaches", requester, topic.name)

    def _forget_held(self, replies: list[_Reply]) -> None:
        self._held_count -= len(replies)
        self._held_bytes -= sum(len(r.body) for r in replies)

    def _take_held(
        self, key: tuple[str, str], wanted: Callable[[_Reply], bool]
    ) -> list[_Reply]:
        """Remove and return the replies held under ``key`` that ``wanted`` picks."""
        held = self._held.get(key)
        if not held:
            return []
        taken = [r for r in held if wanted(r)]
        if taken:
            keep = [r for r in held if not wanted(r)]
            if keep:
                self._held[key] = keep
            else:
                del self._held[key]
            self._forget_held(taken)
        return taken

    def held_replies(self) -> int:
        return self._held_count

    def producer_attached(self, topic: Topic, producer: Producer) -> None:
        """A producer attached: hand it the replies held for its name (and its role)."""
        key = (topic.name, producer.name)
        self._closed.pop(key, None)
        for reply in self._take_held(key, lambda r: self._may_receive(producer, r.role)):
            self._deliver(producer, reply, topic)

    def producer_closed(self, topic: Topic, producer: Producer, explicit: bool) -> None:
        """A producer that closed itself will not be back for its replies (those of its
        role: another role's producer of that name closing says nothing of them)."""
        if not explicit:
            return
        key = (topic.name, producer.name)
        role = producer.cnx.role if self.check_roles else None
        self._closed[key] = role
        if len(self._closed) > _CLOSED_MEMORY:
            self._closed.popitem(last=False)
        for reply in self._take_held(key, lambda r: r.role == role):
            self._drop("producer_gone", producer.name, topic, reply)

    def expire(self) -> None:
        """Drop held replies whose requester did not come back in time."""
        if not self._held:
            return
        now = self.service.clock()
        for key in list(self._held):
            for reply in self._take_held(key, lambda r: r.deadline <= now):
                log.debug("dropped reply held for %s on %s: it did not return", key[1], key[0])
                self.service.metrics.reply_dropped("producer_gone")
                reply.apply_ack()

    def _drop(self, reason: str, requester: str, topic: Topic, reply: _Reply) -> None:
        log.debug("dropped reply for %s on %s: %s", requester, topic.name, reason)
        self.service.metrics.reply_dropped(reason)
        reply.apply_ack()


def _where(mid: pb.MessageIdData) -> str:
    """A reply's request as refusals name it: ledger:entry:batch index."""
    return f"{mid.ledgerId}:{mid.entryId}:{mid.batch_index}"


def _index_in_entry(batch_index: int, num_messages: int) -> bool:
    """Whether a message id's batch index names a message of an entry of that size
    (-1 and 0 both name the only message of an unbatched entry)."""
    if num_messages <= 1:
        return batch_index in (-1, 0)
    return 0 <= batch_index < num_messages
