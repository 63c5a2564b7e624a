"""Batch-index acks on the broker (PIP-54, Pulsar's acknowledgmentAtBatchIndexLevelEnabled).

An ACK whose message id carries an ``ack_set`` (bit ``i`` set: message ``i`` of the
batch is still unacked) acks part of a batch; the subscription keeps what remains
(``BatchAckSets``, persisted with a durable cursor) and acks the entry once nothing
does.  A cumulative ACK with an ``ack_set`` acks every entry before its entry and that
part of its own batch, as Pulsar's ManagedCursor does.

When such an entry goes out again, its MESSAGE carries the ``ack_set`` of the messages
still unacked (``protocol/fastpath.encode_message_frame`` writes it), so the client
drops the others; the consumer's permits are charged only for those it gets, as
Pulsar's Consumer does.  With the setting off, a partial ack is
ignored (the batch comes again whole, as before), and so is what an earlier run kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

from magnetar.protocol.pb import pb
from magnetar.storage.batch_ack_sets import bits_from_words, words_from_bits

if TYPE_CHECKING:
    from magnetar.broker.session.peer import AnyConnection
    from magnetar.broker.topics.entry_info import EntryInfo
    from magnetar.storage.batch_ack_sets import BatchAckSets


# What these functions read of a topic, a subscription and a consumer (Topic,
# Subscription and Consumer have it): Protocols, so that this module, which dispatch
# and the consumer use, imports none of them.
class _Entries(Protocol):
    @property
    def last_visible_entry_id(self) -> int: ...
    def exact_entry_id(self, ledger_id: int, entry_id: int) -> int | None: ...
    def entry_info(self, entry_id: int) -> EntryInfo: ...


class _AckedCursor(Protocol):
    def is_acked(self, entry_id: int) -> bool: ...


class _Connected(Protocol):
    @property
    def cnx(self) -> AnyConnection: ...


ConsumerT = TypeVar("ConsumerT", contravariant=True)


class _PartlyAcked(Protocol):
    @property
    def batch_acks(self) -> BatchAckSets: ...


class _Subscription(_PartlyAcked, Protocol[ConsumerT]):
    @property
    def cursor(self) -> _AckedCursor: ...
    @property
    def topic(self) -> _Entries: ...
    def ack_individual(self, consumer: ConsumerT, entry_ids: list[int]) -> None: ...


C = TypeVar("C")



def enabled(cnx: AnyConnection) -> bool:
    return bool(cnx.config.acknowledgment_at_batch_index_level_enabled)


def partial_acks(topic: _Entries, ack: pb.CommandAck) -> list[tuple[int, int]]:
    """(entry id, its messages left unacked) for each message id of ``ack`` that acks
    part of a stored batch; ids of nothing stored (or not yet visible) are ignored, as
    the whole-entry acks beside them are."""
    last = topic.last_visible_entry_id
    partial = []
    for mid in ack.message_id:
        if not mid.ack_set:
            continue
        unacked = bits_from_words(mid.ack_set)
        if not unacked:
            continue  # an empty set acks the whole entry: the ordinary path has it
        entry_id = topic.exact_entry_id(mid.ledgerId, mid.entryId)
        if entry_id is not None and entry_id <= last:
            partial.append((entry_id, unacked))
    return partial


def apply_partial_acks(
    sub: _Subscription[C], consumer: C, partial: list[tuple[int, int]]
) -> None:
    """Keep what each partial ack leaves unacked; an entry left with nothing is acked."""
    cursor = sub.cursor
    done = []
    for entry_id, unacked in partial:
        if cursor.is_acked(entry_id):
            continue
        # Bits past the batch's size name no message (and must not grow the set).
        size = sub.topic.entry_info(entry_id).num_messages
        if sub.batch_acks.merge(entry_id, unacked & ((1 << size) - 1)):
            done.append(entry_id)
    if done:
        sub.ack_individual(consumer, done)


def unacked_part(sub: _PartlyAcked, consumer: _Connected, entry_id: int,
                 num_messages: int) -> tuple[int, list[int] | None]:
    """For dispatch: how many messages of the entry go out, and the ``ack_set`` its
    MESSAGE carries (None: the whole entry, no ``ack_set``)."""
    unacked = sub.batch_acks.get(entry_id)
    if unacked is None or not enabled(consumer.cnx):
        return num_messages, None
    unacked &= (1 << num_messages) - 1
    return unacked.bit_count(), words_from_bits(unacked)

