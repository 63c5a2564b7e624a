"""PIP-68 producer access modes on one topic: exclusivity, the waiting line, fencing,
and the persisted topic epoch."""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING

from magnetar.broker.topics.producer import (
    EXCLUSIVE,
    EXCLUSIVE_WITH_FENCING,
    SHARED,
    WAIT_FOR_EXCLUSIVE,
    Producer,
)
from magnetar.protocol.pb import pb

if TYPE_CHECKING:
    from magnetar.broker.topics.view import TopicWithProducers

log = logging.getLogger("magnetar.broker.exclusive")


class ProducerRefused(Exception):
    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error


class ProducerAccess:
    """Decides whether a producer may attach, and keeps the topic epoch."""

    def __init__(self, topic: TopicWithProducers) -> None:
        # Weak: the topic owns this object, and a strong reference back would make
        # every unloaded topic cyclic garbage for the next full collection.
        self.topic: TopicWithProducers = weakref.proxy(topic)
        self.holder: Producer | None = None
        # WaitForExclusive producers in arrival order; a list, as there are few (a
        # deque's first block would cost ~600 bytes on every loaded topic)
        self.waiters: list[Producer] = []
        # Names evicted by ExclusiveWithFencing; while the fencer holds the topic a
        # reconnect under such a name is told it was fenced, not merely busy.
        self.fenced_names: set[str] = set()

    @property
    def epoch(self) -> int:
        return self.topic.metadata.topic_epoch

    def holder_name(self) -> str | None:
        return self.holder.name if self.holder else None

    def mode_name(self) -> str:
        return self.holder.access_mode_name if self.holder else "Shared"

    def admit(self, producer: Producer, requested_epoch: int | None) -> bool:
        """Attach ``producer``; True if it may send now, False if it waits in line."""
        topic = self.topic
        mode = producer.access_mode
        if requested_epoch is not None and mode != SHARED and requested_epoch < self.epoch:
            raise ProducerRefused(
                pb.ProducerFenced,
                f"producer '{producer.name}' has topic epoch {requested_epoch}, older than the "
                f"topic's epoch {self.epoch}: a newer exclusive producer took over {topic.name}",
            )
        if producer.name in self.fenced_names and self.holder is not None:
            raise ProducerRefused(
                pb.ProducerFenced,
                f"producer '{producer.name}' was fenced by '{self.holder.name}' on {topic.name}",
            )
        # Codes and words as Apache Pulsar's AbstractTopic answers them, so code that
        # catches ProducerFenced / ProducerBusy by type behaves the same here.
        exclusive_name = self._exclusive_name()
        if mode == SHARED:
            if exclusive_name is not None:
                raise ProducerRefused(
                    pb.ProducerBusy, f"Topic has an existing exclusive producer: {exclusive_name}"
                )
            topic.producers[producer.name] = producer
            return True
        if mode == EXCLUSIVE_WITH_FENCING:
            self._fence_everyone(producer)
            self._take(producer, requested_epoch)
            return True
        if mode == EXCLUSIVE:
            if exclusive_name is not None:
                raise ProducerRefused(
                    pb.ProducerFenced,
                    f"Topic has an existing exclusive producer: {exclusive_name}",
                )
            if topic.producers:
                raise ProducerRefused(pb.ProducerFenced, "Topic has existing shared producers")
            self._take(producer, requested_epoch)
            return True
        if mode == WAIT_FOR_EXCLUSIVE:
            if self.holder is None and not topic.producers and not self.waiters:
                self._take(producer, requested_epoch)
                return True
            producer.ready = False
            self.waiters.append(producer)
            log.info(
                "producer %s waits for exclusive access to %s (%d in line)",
                producer.name,
                topic.name,
                len(self.waiters),
            )
            return False
        raise ProducerRefused(pb.NotAllowedError, f"unknown producer access mode {mode}")

    def _exclusive_name(self) -> str | None:
        """The exclusive producer that holds the topic, or the first one waiting for it."""
        if self.holder is not None:
            return self.holder.name
        for waiter in self.waiters:
            if not waiter.fenced and waiter.cnx.alive:
                return waiter.name
        return None

    def _take(self, producer: Producer, requested_epoch: int | None) -> None:
        metadata = self.topic.metadata
        if requested_epoch is None or requested_epoch != metadata.topic_epoch:
            metadata.topic_epoch += 1
            metadata.save()
        producer.topic_epoch = metadata.topic_epoch
        producer.ready = True
        self.holder = producer
        self.topic.producers[producer.name] = producer
        log.info(
            "producer %s holds %s (%s), topic epoch %d",
            producer.name,
            self.topic.name,
            producer.access_mode_name,
            metadata.topic_epoch,
        )

    def _fence_everyone(self, newcomer: Producer) -> None:
        topic = self.topic
        for other in list(topic.producers.values()):
            if other is not newcomer:
                self._fence(other)
        while self.waiters:
            self._fence(self.waiters.pop(0))
        self.holder = None

    def _fence(self, producer: Producer) -> None:
        producer.fenced = True
        self.fenced_names.add(producer.name)
        self.topic.producers.pop(producer.name, None)
        log.info("fenced producer %s on %s", producer.name, self.topic.name)
        producer.cnx.producer_fenced(producer)

    def release(self, producer: Producer) -> None:
        """``producer`` is gone (closed, disconnected or fenced); promote the next waiter
        once the topic has no producer left: the exclusive holder or the last shared one."""
        if producer in self.waiters:
            self.waiters.remove(producer)
            return
        if self.topic.producers.get(producer.name) is producer:
            del self.topic.producers[producer.name]
        if self.holder is producer:
            self.holder = None
            self.fenced_names.clear()
        if self.holder is not None or self.topic.producers:
            return
        while self.waiters:
            nxt = self.waiters.pop(0)
            if nxt.fenced or not nxt.cnx.alive:
                continue
            self._take(nxt, None)
            nxt.cnx.producer_promoted(nxt)
            break

    def producer_named(self, name: str) -> Producer | None:
        found = self.topic.producers.get(name)
        if found is None:
            found = next((w for w in self.waiters if w.name == name), None)
        return found

    def name_in_use(self, name: str) -> bool:
        return name in self.topic.producers or any(w.name == name for w in self.waiters)
