"""Failover hand-over: which consumer is active, telling consumers so, and the hold
that lets the previous active consumer's acks land before the next one reads."""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING

from magnetar.broker.session import outgoing

if TYPE_CHECKING:
    from magnetar.broker.topics.consumer import Consumer
    from magnetar.broker.topics.subscription import Subscription

# As Pulsar's activeConsumerFailoverDelayTimeMillis: a joining consumer that outranks
# the active one takes over after this many seconds; a leaving one is replaced at once.
FAILOVER_SWITCH_DELAY = 1.0


class FailoverHandover:
    def __init__(self, subscription: Subscription) -> None:
        # Weak: the subscription owns this object (see ProducerAccess.topic).
        self.subscription: Subscription = weakref.proxy(subscription)
        self.delay = FAILOVER_SWITCH_DELAY
        self._last_active: Consumer | None = None
        self._hold: asyncio.TimerHandle | None = None  # while a hand-over waits

    @property
    def holding(self) -> bool:
        return self._hold is not None

    def active_consumer_changed(self, joined: bool = False) -> None:
        sub = self.subscription
        active = sub.dispatcher.active_consumer()
        if active is self._last_active:
            return
        previous = self._last_active
        self._last_active = active
        if previous is not None and not previous.closed:
            if joined and self.delay > 0:
                # As Pulsar does: the newcomer is active at once, but reading for it
                # waits a moment so the old consumer's acks in flight can land.
                self.cancel()
                self._hold = sub.topic.loop.call_later(self.delay, self._end_hold)
            else:
                self._return_inactive_pending()
        for consumer in sub.consumers:
            if consumer.announced:
                self.tell_active(consumer, consumer is active)

    def _end_hold(self) -> None:
        """The new active consumer starts where the old ones left off (minus their acks)."""
        self._hold = None
        self._return_inactive_pending()
        self.subscription.schedule_dispatch()

    def _return_inactive_pending(self) -> None:
        # Every inactive consumer's entries go back, not only the last one's: when
        # consumers join one after another within a hold, each hand-over replaces the
        # hold, and entries of an earlier active consumer must not be stranded on it.
        sub = self.subscription
        active = sub.dispatcher.active_consumer()
        for consumer in sub.consumers:
            if consumer is not active and consumer.pending:
                sub.return_pending(consumer, list(consumer.pending), count_redelivery=False)

    def notify_consumer_active(self, consumer: Consumer) -> None:
        """After SUBSCRIBE's SUCCESS: tell a consumer whether it is active."""
        self.tell_active(consumer, consumer is self.subscription.dispatcher.active_consumer())

    @staticmethod
    def tell_active(consumer: Consumer, is_active: bool) -> None:
        consumer.cnx.write_command(
            outgoing.active_consumer_change(consumer.consumer_id, is_active)
        )

    def cancel(self) -> None:
        if self._hold is not None:
            self._hold.cancel()
            self._hold = None
