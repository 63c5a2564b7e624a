"""What every part of a topic consumer shares: its state, declared once, and what it
needs of its client and of its parent consumer (as protocols).

:class:`~.topic_consumer.TopicConsumer` is one class made of one part per job over
:class:`TopicConsumerBase`: attaching, receiving and requests (:mod:`.topic_consumer`),
acks (:mod:`.acking`), negative acks, the ack timeout, redelivery and dead letters
(:mod:`.redelivery`), PIP-371 replies (:mod:`.replying`). The state is set in
``TopicConsumer.__init__``; a part calls another's steps through ``self``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from magnetar.client.backoff import Clock
from magnetar.client.consuming.ack_timeout import AckTimeoutTracker
from magnetar.client.consuming.acks import AckGroupingTracker, BatchAcker, Position
from magnetar.client.consuming.config import ConsumerConfig
from magnetar.client.consuming.dead_letter import DeadLetterCandidates, LetterProducers
from magnetar.client.consuming.entries import RawEntry
from magnetar.client.consuming.nack import NegativeAcksTracker
from magnetar.client.consuming.receiver_queue import ReceiverQueue
from magnetar.client.errors import PulsarError
from magnetar.client.message import Message
from magnetar.client.transport.handler import ConnectionHandler, HandlerClient


class TopicConsumerClient(HandlerClient, Protocol):
    """What a topic consumer needs of its client: a handle's needs and consumer ids."""

    def _next_consumer_id(self) -> int: ...


class ParentConsumer(Protocol):
    """What a topic consumer needs of the consumer it belongs to
    (:class:`~magnetar.client.consuming.consumer.Consumer`): the receiver queue it
    feeds, the letter producers, the count of refused replies, and its failure report."""

    _queue: ReceiverQueue[Message | RawEntry]
    _letters: LetterProducers | None
    refused_replies: int

    def _sub_failed(self, sub: TopicConsumerBase, exc: PulsarError) -> None: ...


class TopicConsumerBase(ConnectionHandler):
    """The state of a topic consumer that its parts share."""

    conf: ConsumerConfig
    consumer_id: int
    partition: int
    _parent: ParentConsumer
    _queue: ReceiverQueue[Message | RawEntry]
    _clock: Clock
    _consumer_epoch: int
    _acks: AckGroupingTracker
    _ack_timer: asyncio.TimerHandle | None
    _batch_ackers: dict[Position, BatchAcker]
    _nacks: NegativeAcksTracker
    _nacked: bool
    _nack_timer: asyncio.TimerHandle | None
    _nack_timer_at: float
    _unacked: AckTimeoutTracker | None
    _unacked_timer: asyncio.TimerHandle | None
    _dead_letters: DeadLetterCandidates | None
    _dead_letter_topic: str
    _letter_tasks: set[asyncio.Task[None]]

    if TYPE_CHECKING:
        # Steps of one part that others call (each defined in its part's module).
        def _credit(self, count: int) -> None: ...
        def _flush_acks(self) -> None: ...
        def _queue_ack(self, position: Position, ack_set: list[int] | None = None) -> None: ...
        def redeliver_all(self, counted: list[Position] | None = None) -> None: ...
        def _drop_prefetched(self) -> int: ...
