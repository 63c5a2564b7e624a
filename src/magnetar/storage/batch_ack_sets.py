"""Batch-index acknowledgements (PIP-54): which messages of a partly acked batch remain.

A batched entry holds several messages.  With batch-index acks a client acks some of
them, and the entry stays unacknowledged until all are: the cursor keeps, for each such
entry, the set of its messages still unacked, as Pulsar's ManagedCursor keeps
``batchDeletedIndexes``.  The set is a bitmask, bit ``i`` set while message ``i`` is
still unacked — Pulsar's convention on the wire (``ack_set`` of an ACK's message id and
of a MESSAGE, as ``long`` words of a Java BitSet) and in the cursor.  An ack's set is
intersected with what is kept (acks only ever remove messages); an empty set means the
whole entry is acked, and it is then acked as an entry.

The sets are persisted with the cursor, at most ``MAX_PERSISTED`` of them (the oldest
entries first, as Pulsar's ``managedLedgerMaxBatchDeletedIndexToPersist``): past that
bound a restart forgets the rest, and those batches come whole again (at least once).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

_WORD = 64
_WORD_MASK = (1 << _WORD) - 1
# Partly acked entries a cursor file keeps (Pulsar's default for
# managedLedgerMaxBatchDeletedIndexToPersist); about 20 bytes of JSON each.
MAX_PERSISTED = 10_000


def bits_from_words(words: Iterable[int]) -> int:
    """A Java BitSet's ``long`` words (least significant first; signed or not) as a
    bitmask."""
    bits = 0
    for shift, word in enumerate(words):
        bits |= (word & _WORD_MASK) << (shift * _WORD)
    return bits


def words_from_bits(bits: int) -> list[int]:
    """A bitmask as protobuf ``int64`` words (what ``BitSet.toLongArray`` gives)."""
    words = []
    while bits:
        word = bits & _WORD_MASK
        words.append(word - (1 << _WORD) if word >> (_WORD - 1) else word)
        bits >>= _WORD
    return words


class BatchAckSets:
    """Entry id -> bitmask of the entry's messages still unacked (never 0).

    ``version`` grows with every change, so the cursor that persists the sets knows it
    is dirty.  Entries not in here are either whole (nothing acked) or acked as entries.
    """

    __slots__ = ("_sets", "version")

    def __init__(self) -> None:
        self._sets: dict[int, int] = {}
        self.version = 0

    def __len__(self) -> int:
        return len(self._sets)

    def __bool__(self) -> bool:
        return bool(self._sets)

    def __contains__(self, entry_id: int) -> bool:
        return entry_id in self._sets

    def __iter__(self) -> Iterator[int]:
        return iter(self._sets)

    def get(self, entry_id: int) -> int | None:
        """The still-unacked messages of a partly acked entry; None if not partly acked."""
        return self._sets.get(entry_id)

    def merge(self, entry_id: int, unacked: int) -> bool:
        """An ack leaves ``unacked`` of the entry's messages unacknowledged: keep the
        intersection with what was unacked before.  True when nothing is left (the
        entry is then forgotten here: the caller acks it as a whole)."""
        sets = self._sets
        previous = sets.get(entry_id)
        if previous is None:
            if not unacked:
                return True
            sets[entry_id] = unacked
        else:
            remaining = previous & unacked
            if remaining == previous:
                return False
            if not remaining:
                del sets[entry_id]
                self.version += 1
                return True
            sets[entry_id] = remaining
        self.version += 1
        return False

    def discard(self, entry_id: int) -> None:
        if self._sets.pop(entry_id, None) is not None:
            self.version += 1

    def discard_through(self, entry_id: int) -> None:
        """Forget the sets of every entry up to ``entry_id`` (acked cumulatively)."""
        dropped = [e for e in self._sets if e <= entry_id]
        for e in dropped:
            del self._sets[e]
        if dropped:
            self.version += 1

    def clear(self) -> None:
        if self._sets:
            self._sets.clear()
            self.version += 1

    def acked_messages(self, entry_id: int, num_messages: int) -> int:
        """How many of the entry's ``num_messages`` messages are acked already."""
        unacked = self._sets.get(entry_id)
        if unacked is None:
            return 0
        return num_messages - (unacked & ((1 << num_messages) - 1)).bit_count()

    # ------------------------------------------------------------ persistence

    def to_json(self) -> list[list[Any]]:
        """``[entry id, hex bitmask]`` pairs, lowest entries first, at most MAX_PERSISTED."""
        return [[entry_id, format(self._sets[entry_id], "x")]
                for entry_id in sorted(self._sets)[:MAX_PERSISTED]]

    def restore(self, doc: Iterable[Any]) -> None:
        """Loading: the pairs ``to_json`` wrote (no version change).  ValueError or
        TypeError if they are not such pairs."""
        for entry_id, hex_bits in doc:
            if not isinstance(entry_id, int) or not isinstance(hex_bits, str):
                raise ValueError(f"batch ack {entry_id!r}: {hex_bits!r} is not an id and a set")
            bits = int(hex_bits, 16)
            if bits > 0:
                self._sets[entry_id] = bits
