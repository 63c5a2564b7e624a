"""Choosing the partition of a partitioned topic for each message."""

from __future__ import annotations

import random
from collections.abc import Callable

from magnetar.protocol.murmur3 import key_hash

# (key or None, number of partitions) -> partition index
Router = Callable[[str | None, int], int]


class RoundRobinRouter:
    """Keyed messages go to ``key_hash(key) % n`` (as the Java client does with
    Murmur3 hashing); the others rotate over the partitions."""

    __slots__ = ("_next",)

    def __init__(self, start: int | None = None) -> None:
        self._next = random.randrange(1 << 16) if start is None else start

    def __call__(self, key: str | None, partitions: int) -> int:
        if key is not None:
            return key_hash(key) % partitions
        index = self._next % partitions
        self._next += 1
        return index


class KeyHashRouter:
    """Keyed messages go to ``key_hash(key) % n``; messages without a key all go to
    one partition chosen at random when the producer is created (Java's
    SinglePartition mode)."""

    __slots__ = ("_single",)

    def __init__(self, single: int | None = None) -> None:
        self._single = random.randrange(1 << 16) if single is None else single

    def __call__(self, key: str | None, partitions: int) -> int:
        if key is not None:
            return key_hash(key) % partitions
        return self._single % partitions


def make_router(mode: str | Router) -> Router:
    if callable(mode):
        return mode
    if mode == "round_robin":
        return RoundRobinRouter()
    if mode == "key_hash":
        return KeyHashRouter()
    raise ValueError(
        f"message_routing must be 'round_robin', 'key_hash' or a callable, not {mode!r}"
    )
