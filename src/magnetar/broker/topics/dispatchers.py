"""Which consumer of a subscription gets an entry, one strategy per subscription type.

The subscription walks its entries in order and asks its dispatcher for a
consumer; ``None`` means "not now". Exclusive and Failover stop at the first
refusal (order is total); Shared and Key_Shared may skip ahead, Key_Shared only
for other keys.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

from magnetar.protocol.murmur3 import KEY_SHARED_HASH_RANGE, murmur3_32
from magnetar.protocol.pb import pb


class Receiver(Protocol):
    """What a dispatcher reads of a consumer (topics.Consumer has it)."""

    @property
    def name(self) -> str: ...
    @property
    def consumer_id(self) -> int: ...
    @property
    def priority_level(self) -> int: ...
    @property
    def hash_ranges(self) -> list[tuple[int, int]] | None: ...
    def can_receive(self, max_unacked: int) -> bool: ...


# The consumer type a dispatcher hands out: a parameter, so this module imports none.
Consumer = TypeVar("Consumer", bound=Receiver)

SubType = pb.CommandSubscribe.SubType
SUB_TYPE_NAMES: dict[int, str] = {
    SubType.Exclusive: "Exclusive",
    SubType.Shared: "Shared",
    SubType.Failover: "Failover",
    SubType.Key_Shared: "Key_Shared",
}


class Dispatcher(Generic[Consumer]):
    """Base strategy. ``ordered`` dispatchers never deliver past an entry they refused."""

    ordered = True
    uses_keys = False

    def __init__(self, max_unacked: int) -> None:
        self.max_unacked = max_unacked
        self.consumers: list[Consumer] = []

    def add(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)

    def remove(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)

    def pick(self, key_hash: int) -> Consumer | None:
        raise NotImplementedError

    def active_consumer(self) -> Consumer | None:
        return None

    # Key_Shared keeps each key on the consumer that holds its unacked entries; the
    # other strategies do not track keys.
    def hold(self, key_hash: int, consumer: Consumer) -> None:
        pass

    def release(self, key_hash: int) -> None:
        pass

    @property
    def holds_keys(self) -> bool:
        return False

    def clear_holders(self) -> None:
        pass


class SingleActiveDispatcher(Dispatcher[Consumer]):
    """Exclusive and Failover: one active consumer, chosen by priority then name."""

    def __init__(self, max_unacked: int, partition_index: int = -1) -> None:
        super().__init__(max_unacked)
        self.partition_index = partition_index

    def active_consumer(self) -> Consumer | None:
        consumers = self.consumers
        if len(consumers) <= 1:
            # The common case (an Exclusive subscription), asked on every pick: no sort.
            return consumers[0] if consumers else None
        ranked = sorted(self.consumers, key=lambda c: (c.priority_level, c.name))
        if self.partition_index >= 0:
            # Partitions spread their active consumers across the subscribers, as Pulsar does.
            top = [c for c in ranked if c.priority_level == ranked[0].priority_level]
            return top[self.partition_index % len(top)]
        return ranked[0]

    def pick(self, key_hash: int) -> Consumer | None:
        active = self.active_consumer()
        if active is not None and active.can_receive(self.max_unacked):
            return active
        return None


class SharedDispatcher(Dispatcher[Consumer]):
    """Round robin over consumers that have permits."""

    ordered = False

    def __init__(self, max_unacked: int) -> None:
        super().__init__(max_unacked)
        self._next = 0

    def pick(self, key_hash: int) -> Consumer | None:
        consumers = self.consumers
        n = len(consumers)
        for i in range(n):
            consumer = consumers[(self._next + i) % n]
            if consumer.can_receive(self.max_unacked):
                self._next = (self._next + i + 1) % n
                return consumer
        return None


class KeySharedDispatcher(Dispatcher[Consumer]):
    """Each key hash belongs to one consumer: a consistent-hash ring (AUTO_SPLIT) or
    the ranges a consumer declared (STICKY)."""

    ordered = False
    uses_keys = True
    POINTS_PER_CONSUMER = 100

    def __init__(self, max_unacked: int) -> None:
        super().__init__(max_unacked)
        self._ring_hashes: list[int] = []
        self._ring_consumers: list[Consumer] = []
        # Key hash -> (consumer holding unacked entries of it, how many). A hash is
        # only given to another consumer once its holder has acked them all, which
        # keeps each key in order when consumers come and go.
        self._holders: dict[int, tuple[Consumer, int]] = {}

    def add(self, consumer: Consumer) -> None:
        super().add(consumer)
        self._rebuild()

    def remove(self, consumer: Consumer) -> None:
        super().remove(consumer)
        self._rebuild()

    def _rebuild(self) -> None:
        points: list[tuple[int, int, Consumer]] = []
        for order, consumer in enumerate(self.consumers):
            if consumer.hash_ranges:
                continue
            for i in range(self.POINTS_PER_CONSUMER):
                h = murmur3_32(f"{consumer.name}{consumer.consumer_id}#{i}".encode())
                points.append((h % KEY_SHARED_HASH_RANGE, order, consumer))
        points.sort(key=lambda p: (p[0], p[1]))
        self._ring_hashes = [p[0] for p in points]
        self._ring_consumers = [p[2] for p in points]

    def owner(self, key_hash: int) -> Consumer | None:
        for consumer in self.consumers:
            if consumer.hash_ranges and any(
                lo <= key_hash <= hi for lo, hi in consumer.hash_ranges
            ):
                return consumer
        if not self._ring_hashes:
            return None
        i = bisect.bisect_left(self._ring_hashes, key_hash)
        return self._ring_consumers[i % len(self._ring_consumers)]

    def pick(self, key_hash: int) -> Consumer | None:
        consumer = self.owner(key_hash)
        if consumer is None or not consumer.can_receive(self.max_unacked):
            return None
        holder = self._holders.get(key_hash)
        if holder is not None and holder[0] is not consumer:
            return None  # the key is still draining from another consumer
        return consumer

    def hold(self, key_hash: int, consumer: Consumer) -> None:
        holder = self._holders.get(key_hash)
        self._holders[key_hash] = (consumer, holder[1] + 1 if holder else 1)

    def release(self, key_hash: int) -> None:
        holder = self._holders.get(key_hash)
        if holder is not None:
            if holder[1] <= 1:
                del self._holders[key_hash]
            else:
                self._holders[key_hash] = (holder[0], holder[1] - 1)

    @property
    def holds_keys(self) -> bool:
        return bool(self._holders)

    def clear_holders(self) -> None:
        self._holders.clear()

    def check_ranges(self, ranges: Sequence[tuple[int, int]]) -> str | None:
        """Error text if STICKY ranges are invalid or overlap another consumer's."""
        for lo, hi in ranges:
            if lo < 0 or hi >= KEY_SHARED_HASH_RANGE or lo > hi:
                return f"invalid hash range [{lo}, {hi}]"
            for other in self.consumers:
                for olo, ohi in other.hash_ranges or ():
                    if lo <= ohi and olo <= hi:
                        return (
                            f"range [{lo}, {hi}] overlaps [{olo}, {ohi}] of consumer {other.name}"
                        )
        return None


def make_dispatcher(sub_type: int, max_unacked: int, partition_index: int) -> Dispatcher[Any]:
    if sub_type == SubType.Shared:
        return SharedDispatcher(max_unacked)
    if sub_type == SubType.Key_Shared:
        return KeySharedDispatcher(max_unacked)
    if sub_type == SubType.Failover:
        return SingleActiveDispatcher(max_unacked, partition_index)
    return SingleActiveDispatcher(max_unacked)
