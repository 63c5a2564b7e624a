"""Accumulates messages into one batched entry (``[u32 size][SingleMessageMetadata][payload]*``)."""

from __future__ import annotations

import struct
from typing import Any

_U32 = struct.Struct(">I")


class BatchBuilder:
    """Collects encoded messages until the batch is full by count or by bytes.

    Each message arrives with its ``SingleMessageMetadata`` already encoded; the
    builder only frames them and remembers the per-message bookkeeping
    (``extra``: the future and whatever else the producer needs back).
    """

    __slots__ = ("_parts", "extras", "first", "last_sequence_id", "max_bytes", "max_messages",
                 "num_bytes", "sequence_ids")

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self.max_messages = max(1, max_messages)
        self.max_bytes = max(1, max_bytes)
        self._parts: list[bytes] = []
        self.extras: list[Any] = []
        self.sequence_ids: list[int] = []
        self.num_bytes = 0
        self.first: Any = None  # the first message's routing fields (key, ordering key)
        self.last_sequence_id = -1

    def __len__(self) -> int:
        return len(self.extras)

    def has_room(self, payload_size: int) -> bool:
        """Whether a message of ``payload_size`` bytes fits (an empty batch takes anything)."""
        if not self.extras:
            return True
        return (
            len(self.extras) < self.max_messages
            and self.num_bytes + payload_size <= self.max_bytes
        )

    @property
    def full(self) -> bool:
        return len(self.extras) >= self.max_messages or self.num_bytes >= self.max_bytes

    def add(self, single_metadata: bytes, payload: bytes, sequence_id: int, extra: Any) -> None:
        self._parts.append(_U32.pack(len(single_metadata)))
        self._parts.append(single_metadata)
        self._parts.append(payload)
        self.num_bytes += 4 + len(single_metadata) + len(payload)
        self.extras.append(extra)
        self.sequence_ids.append(sequence_id)
        self.last_sequence_id = sequence_id

    def take(self) -> tuple[bytes, list[int], list[Any], Any]:
        """The batch payload, sequence ids and extras; the builder is empty afterwards."""
        payload = b"".join(self._parts)
        out = (payload, self.sequence_ids, self.extras, self.first)
        self._parts = []
        self.extras = []
        self.sequence_ids = []
        self.num_bytes = 0
        self.first = None
        return out
