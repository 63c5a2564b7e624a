"""Acknowledgement bookkeeping: batch-aware acks and ack grouping (no I/O here).

* :class:`BatchAcker` tracks which messages of one batched entry are acked; the
  entry is acked to the broker only when all of them are.
* :class:`AckGroupingTracker` collects acks so that the consumer sends one ACK
  frame every ~100 ms (or as soon as many are pending) instead of one per message;
  with batch-index acks (PIP-54) it also carries, per partly acked entry, the
  ``ack_set`` of the messages still unacked (the latest one: it only shrinks).
"""

from __future__ import annotations

from collections.abc import Iterable

Position = tuple[int, int]  # (ledger id, entry id)


def bits_from_words(words: Iterable[int]) -> int:
    """An ``ack_set`` (a Java BitSet's int64 words, least significant first) as a
    bitmask: bit ``i`` set while message ``i`` of the batch is unacked."""
    bits = 0
    for shift, word in enumerate(words):
        bits |= (word & 0xFFFFFFFFFFFFFFFF) << (shift * 64)
    return bits


class BatchAcker:
    """Which messages of a batch of ``size`` are still unacknowledged (a bitmask)."""

    __slots__ = ("_unacked", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._unacked = (1 << size) - 1

    def ack(self, index: int) -> bool:
        """Mark one message acked; True when the whole batch is acked."""
        self._unacked &= ~(1 << index)
        return self._unacked == 0

    def ack_cumulative(self, index: int) -> bool:
        """Mark messages ``0..index`` acked; True when the whole batch is acked."""
        self._unacked &= ~((1 << (index + 1)) - 1)
        return self._unacked == 0

    def is_acked(self, index: int) -> bool:
        return not (self._unacked >> index) & 1

    def keep_only(self, unacked: int) -> None:
        """The broker says only ``unacked`` (a bitmask) of the batch is unacked (the
        ``ack_set`` of a redelivered batch): the others count as acked here too."""
        self._unacked &= unacked

    @property
    def none_acked(self) -> bool:
        return self._unacked == (1 << self.size) - 1

    @property
    def complete(self) -> bool:
        return self._unacked == 0

    @property
    def outstanding(self) -> int:
        return self._unacked.bit_count()

    def ack_set(self, without: int = -1) -> list[int]:
        """The unacked messages as Pulsar's ``ack_set`` (int64 words, bit set = unacked);
        ``without``: as if that message were acked too."""
        words = []
        bits = self._unacked if without < 0 else self._unacked & ~(1 << without)
        for _ in range((self.size + 63) // 64):
            word = bits & 0xFFFFFFFFFFFFFFFF
            words.append(word - (1 << 64) if word >= 1 << 63 else word)
            bits >>= 64
        return words


class AckGroupingTracker:
    """Pending individual acks (entry positions, in order) and the latest cumulative ack."""

    __slots__ = ("_individual", "_last_cumulative", "_partial", "_pending_cumulative",
                 "max_size")

    def __init__(self, max_size: int = 1000) -> None:
        self.max_size = max_size
        self._individual: dict[Position, None] = {}
        self._partial: dict[Position, list[int]] = {}  # entry -> ack_set still unacked
        self._pending_cumulative: Position | None = None
        self._last_cumulative: Position | None = None

    def add(self, position: Position) -> bool:
        """Queue an individual ack; True when enough are pending to flush at once."""
        self._individual[position] = None
        if self._partial:
            self._partial.pop(position, None)  # the whole entry now
        return len(self._individual) + len(self._partial) >= self.max_size

    def add_partial(self, position: Position, ack_set: list[int]) -> bool:
        """Queue a batch-index ack: of the entry, only ``ack_set`` is still unacked."""
        if self.is_duplicate(position):
            return False
        self._partial[position] = ack_set
        return len(self._individual) + len(self._partial) >= self.max_size

    def add_cumulative(self, position: Position) -> bool:
        if self._last_cumulative is None or position > self._last_cumulative:
            self._last_cumulative = position
            self._pending_cumulative = position
            if self._individual:
                # Individual acks covered by the cumulative one need not be sent.
                self._individual = {p: None for p in self._individual if p > position}
            if self._partial:
                self._partial = {p: s for p, s in self._partial.items() if p > position}
        return False

    def is_duplicate(self, position: Position) -> bool:
        """True if this entry's ack is already queued or covered by a cumulative ack."""
        if self._last_cumulative is not None and position <= self._last_cumulative:
            return True
        return position in self._individual

    @property
    def pending(self) -> bool:
        return (bool(self._individual) or bool(self._partial)
                or self._pending_cumulative is not None)

    def __len__(self) -> int:
        return (len(self._individual) + len(self._partial)
                + (self._pending_cumulative is not None))

    def take(self) -> tuple[list[Position], Position | None]:
        """Everything pending, emptying the tracker."""
        individual = list(self._individual)
        self._individual.clear()
        cumulative, self._pending_cumulative = self._pending_cumulative, None
        return individual, cumulative

    def take_partial(self) -> list[tuple[Position, list[int]]]:
        """The pending batch-index acks, emptying them."""
        partial = list(self._partial.items())
        self._partial.clear()
        return partial

    def restore(self, individual: list[Position], cumulative: Position | None) -> None:
        """Put back acks that could not be sent (no connection)."""
        for position in individual:
            self._individual[position] = None
        if cumulative is not None and (
            self._pending_cumulative is None or cumulative > self._pending_cumulative
        ):
            self._pending_cumulative = cumulative

    def reset_cumulative(self) -> None:
        """Forget the cumulative high-water mark (after a seek moves the cursor back)."""
        self._last_cumulative = None
        self._pending_cumulative = None
        self._individual.clear()
        self._partial.clear()
