"""A topic consumer's redeliveries: negative acks (after their delay or PIP-106
backoff), the ack timeout, asking the broker for redelivery (of some entries on a
shared subscription, of everything unacked otherwise) and diverting entries that
failed too often to the dead-letter topic."""

from __future__ import annotations

import logging

from magnetar.client.consuming.acks import Position
from magnetar.client.consuming.dead_letter import send_dead_letters
from magnetar.client.consuming.entries import RawEntry, message_count
from magnetar.client.consuming.topic_state import TopicConsumerBase
from magnetar.client.message import Message
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import BaseCommand

log = logging.getLogger("magnetar.client.consumer")
T = BaseCommand.Type


class RedeliveryMixin(TopicConsumerBase):
    """Nacks, ack timeouts, redelivery and dead letters (part of :class:`TopicConsumer`)."""

    def negative_acknowledge(self, message_id: MessageId, redelivery_count: int) -> None:
        position = (message_id.ledger_id, message_id.entry_id)
        if self._unacked is not None:
            self._unacked.remove(message_id)
        self._nacked = True
        due = self._nacks.add(position, redelivery_count)
        if self._nack_timer is None or due < self._nack_timer_at:
            self._arm_nack_timer(due)

    def _arm_nack_timer(self, due: float) -> None:
        if self._nack_timer is not None:
            self._nack_timer.cancel()
        self._nack_timer_at = due
        delay = max(0.0, due - self._clock())
        self._nack_timer = self._loop.call_later(delay, self._nack_timer_fired)

    def _nack_timer_fired(self) -> None:
        self._nack_timer = None
        due = self._nacks.pop_due()
        if due:
            self._redeliver(due)
        nxt = self._nacks.next_deadline()
        if nxt is not None:
            self._arm_nack_timer(nxt)

    def _arm_unacked_timer(self) -> None:
        assert self._unacked is not None
        deadline = self._unacked.next_deadline()
        if deadline is None:
            self._unacked_timer = None
            return
        delay = max(0.0, deadline - self._clock())
        self._unacked_timer = self._loop.call_later(delay, self._unacked_timer_fired)

    def _unacked_timer_fired(self) -> None:
        assert self._unacked is not None
        expired = self._unacked.pop_expired()
        if expired:
            log.info("%s: %d entries not acked within %ss; asking for redelivery",
                     self.topic, len(expired), self.conf.ack_timeout)
            self._redeliver(expired)
        self._arm_unacked_timer()

    def _redeliver(self, positions: list[Position]) -> None:
        if self._dead_letters is not None and self.conf.shared:
            # Exclusive and failover subscriptions redeliver everything unacked, the
            # entry too: it comes back over the limit and is diverted on arrival.
            positions = self._divert_to_dead_letters(positions)
        self._request_redelivery(positions)

    def _request_redelivery(self, positions: list[Position]) -> None:
        if not positions:
            return
        if not self.conf.shared:
            # Exclusive and failover subscriptions keep order: the broker sends
            # everything unacked again; the ids say which entries are redelivered
            # because the application nacked them (or let them time out).
            self.redeliver_all(positions)
            return
        conn = self._conn
        if conn is None:
            return  # a new connection gets every unacked message anyway
        for start in range(0, len(positions), 1000):
            cmd = BaseCommand(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
            red = cmd.redeliverUnacknowledgedMessages
            red.consumer_id = self.consumer_id
            for ledger, entry in positions[start:start + 1000]:
                red.message_ids.add(ledgerId=ledger, entryId=entry)
            conn.send_command(cmd)

    def screen_dead_letters(self, raw: RawEntry, messages: list[Message]) -> list[Message]:
        """The messages of a decoded entry the application gets: none if the entry came
        more often than the dead-letter policy allows (it goes to the DLQ instead)."""
        assert self._dead_letters is not None
        mid = raw.command.message_id
        position = (mid.ledgerId, mid.entryId)
        if self._dead_letters.screen(position, raw.command.redelivery_count, messages):
            self._credit(len(messages))  # never handed out: their permits come back
            self._divert_to_dead_letters([position])
            return []
        if not self.conf.shared:
            self._dead_letters.discard(position)  # redelivered whole, see _redeliver
        return messages

    def _divert_to_dead_letters(self, positions: list[Position]) -> list[Position]:
        """Send the entries that reached the policy's limit to the DLQ (in the
        background); returns the others."""
        assert self._dead_letters is not None
        diverted, rest = self._dead_letters.divert(positions)
        if diverted:
            task = self._loop.create_task(self._send_dead_letters(diverted))
            self._letter_tasks.add(task)
            task.add_done_callback(self._letter_tasks.discard)
        return rest

    async def _send_dead_letters(self, entries: dict[Position, list[Message]]) -> None:
        letters = self._parent._letters
        assert letters is not None
        done = await send_dead_letters(letters, self._dead_letter_topic, entries)
        for position in done:
            self._batch_ackers.pop(position, None)
            if self._unacked is not None:
                self._unacked.remove_entry(position)
            if self._nacked:
                self._nacks.remove(position)
            self._queue_ack(position)
        sent = set(done)
        failed = [p for p in entries if p not in sent]
        if failed and not self._closed:
            self._request_redelivery(failed)  # they come again and are tried again

    def redeliver_all(self, counted: list[Position] | None = None) -> None:
        """Ask the broker to send every unacked message again (a new consumer epoch).

        ``counted``: the entries redelivered because the application nacked them (or
        their ack timed out); with the other nacked entries, they go in the request,
        and only they get a higher redelivery count (PIP-106: what sat unseen in the
        prefetch queue keeps its count).  Without it (the application asked for
        everything again) the request names none, as Pulsar's clients send it.

        What is prefetched here is dropped (the broker sends it again, and its
        permits are given back), acks still grouped are sent first so the broker
        does not send those messages again, and the nack and ack-timeout trackers
        are emptied: every unacked message comes again.
        """
        self._consumer_epoch += 1
        self._flush_acks()
        removed = self._drop_prefetched()
        if self._unacked is not None:
            self._unacked.clear()
        ids: list[Position] = []
        if counted is not None:
            ids = list(dict.fromkeys([*counted, *self._nacks.positions()]))
        self._nacks.clear()
        conn = self._conn
        if conn is None:
            return
        cmd = BaseCommand(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
        red = cmd.redeliverUnacknowledgedMessages
        red.consumer_id = self.consumer_id
        red.consumer_epoch = self._consumer_epoch
        for ledger, entry in ids:
            red.message_ids.add(ledgerId=ledger, entryId=entry)
        conn.send_command(cmd)
        if removed:
            self._credit(removed)

    def _drop_prefetched(self) -> int:
        """Drop what this consumer has in the receiver queue; returns how many
        messages that is (the broker counted permits by message, a batch as many)."""
        dropped: list[Message | RawEntry] = []

        def mine(item: Message | RawEntry) -> bool:
            if item._consumer is self:
                dropped.append(item)
                return True
            return False

        self._queue.remove_if(mine)
        return sum(message_count(item) if isinstance(item, RawEntry) else 1
                   for item in dropped)
