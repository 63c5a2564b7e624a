"""A topic consumer's acks: single, batch-aware (PIP-54 ack sets) and cumulative,
grouped for ``ack_group_time`` or ``ack_group_max_size`` and sent as ACK frames."""

from __future__ import annotations

from magnetar.client.consuming.acks import BatchAcker, Position
from magnetar.client.consuming.topic_state import TopicConsumerBase
from magnetar.client.message import Message
from magnetar.protocol.frames import encode_command
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import BaseCommand, pb

T = BaseCommand.Type


class AcksMixin(TopicConsumerBase):
    """Acknowledging what the application acknowledges (part of :class:`TopicConsumer`)."""

    def acknowledge(self, message_id: MessageId, acker: BatchAcker | None = None) -> None:
        if self._unacked is not None:
            self._unacked.remove(message_id)
        self._ack((message_id.ledger_id, message_id.entry_id), message_id.batch_index, acker)

    def acknowledge_message(self, msg: Message) -> None:
        """:meth:`acknowledge` for a message received here, without building its id."""
        if self._unacked is not None:
            self._unacked.remove(msg.message_id)
        self._ack(msg._position, msg._index, msg._acker)

    def _ack(self, position: Position, batch_index: int, acker: BatchAcker | None) -> None:
        if batch_index >= 0:
            acker = acker or self._batch_ackers.get(position)
            if acker is not None:
                if not acker.ack(batch_index):
                    # The entry is acked when all of its messages are; with batch-index
                    # acks the broker learns which are left meanwhile.
                    if self.conf.batch_index_ack_enabled:
                        self._queue_ack(position, acker.ack_set())
                    return
                if self._batch_ackers.get(position) is acker:
                    del self._batch_ackers[position]
        if self._nacked:
            self._nacks.remove(position)
        if self._dead_letters is not None:
            self._dead_letters.discard(position)
        self._queue_ack(position)

    def _queue_ack(self, position: Position, ack_set: list[int] | None = None) -> None:
        """Queue the entry's ack (with ``ack_set``: of part of its batch); it leaves with
        the group (or at once, when due)."""
        full = (self._acks.add(position) if ack_set is None
                else self._acks.add_partial(position, ack_set))
        if full or self.conf.ack_group_time <= 0:
            self._flush_acks()
        elif self._ack_timer is None:
            self._ack_timer = self._loop.call_later(self.conf.ack_group_time, self._flush_acks)

    def acknowledge_cumulative(
        self, message_id: MessageId, acker: BatchAcker | None = None
    ) -> None:
        ledger, entry = message_id.ledger_id, message_id.entry_id
        position = (ledger, entry)
        if self._unacked is not None:
            self._unacked.remove_up_to(message_id)
        if message_id.batch_index >= 0:
            acker = acker or self._batch_ackers.get(position)
            if acker is not None and not acker.ack_cumulative(message_id.batch_index):
                # Part of the batch is still unacked: everything before this entry is
                # done, and with batch-index acks the part of it up to the message.
                if self.conf.batch_index_ack_enabled:
                    self._queue_ack(position, acker.ack_set())
                if entry <= 0:
                    return
                position = (ledger, entry - 1)
            else:
                self._batch_ackers.pop((ledger, entry), None)
        for pos in [p for p in self._batch_ackers if p <= position]:
            del self._batch_ackers[pos]
        self._acks.add_cumulative(position)
        if self.conf.ack_group_time <= 0:
            self._flush_acks()
        elif self._ack_timer is None:
            self._ack_timer = self._loop.call_later(self.conf.ack_group_time, self._flush_acks)

    def _flush_acks(self) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        if not self._acks.pending:
            return
        conn = self._conn
        if conn is None or conn.closed:
            return  # sent after the reconnect
        individual, cumulative = self._acks.take()
        partial = self._acks.take_partial()
        frames = []
        if individual or partial:
            cmd = BaseCommand(type=T.ACK)
            ack = cmd.ack
            ack.consumer_id = self.consumer_id
            ack.ack_type = pb.CommandAck.Individual
            add = ack.message_id.add
            for ledger, entry in individual:
                add(ledgerId=ledger & 0xFFFFFFFFFFFFFFFF, entryId=entry & 0xFFFFFFFFFFFFFFFF)
            for (ledger, entry), ack_set in partial:
                add(ledgerId=ledger & 0xFFFFFFFFFFFFFFFF, entryId=entry & 0xFFFFFFFFFFFFFFFF,
                    ack_set=ack_set)
            frames.append(encode_command(cmd))
        if cumulative is not None:
            cmd = BaseCommand(type=T.ACK)
            ack = cmd.ack
            ack.consumer_id = self.consumer_id
            ack.ack_type = pb.CommandAck.Cumulative
            ledger, entry = cumulative
            ack.message_id.add(
                ledgerId=ledger & 0xFFFFFFFFFFFFFFFF, entryId=entry & 0xFFFFFFFFFFFFFFFF
            )
            frames.append(encode_command(cmd))
        conn.write(b"".join(frames))

    def flush_to_socket(self) -> None:
        self._flush_acks()
