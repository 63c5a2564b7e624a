"""Positions in a topic partition's log as the Spark source compares and stores them.

A message id is (ledger id, entry id, batch index).  A topic's log is a sequence of
ledgers (each load of the topic writes into a new ledger id) and an entry may hold a
batch of messages, so a position is ordered by all three numbers, never by one
integer.  The source compares *keys*: a message's key is its (ledger, entry, batch
index), with :data:`WHOLE_ENTRY` as the batch index of a message that is not in a
batch.  Every range the source reads is ``(lo, hi]`` over keys, so that consecutive
ranges neither overlap nor leave gaps, whatever the bounds are: real message ids, or
cuts computed between them (a cut need not name a message that exists).

This module is pure: no client, no Spark.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from magnetar.protocol.message_id import MessageId

# A batch index above any real one: "every message of the entry".
WHOLE_ENTRY = 2**31 - 1

Key = tuple[int, int, int]

# Below every message of every ledger: a range starting here starts at the earliest.
BEFORE_ALL: Key = (-1, -1, -1)


def message_key(ledger: int, entry: int, batch_index: int) -> Key:
    """The key of a received message."""
    return (ledger, entry, batch_index if batch_index >= 0 else WHOLE_ENTRY)


def key_through(mid: MessageId) -> Key:
    """The key that ends a range *with* ``mid``: as ``lo``, reading starts after it.

    An id without a batch index stands for its whole entry.
    """
    if mid.is_earliest:
        return BEFORE_ALL
    return message_key(mid.ledger_id, mid.entry_id, mid.batch_index)


def key_before(mid: MessageId) -> Key:
    """The key that ends a range just *before* ``mid``: as ``lo``, reading starts at it.

    An id without a batch index stands for its whole entry.
    """
    if mid.is_earliest:
        return BEFORE_ALL
    return (mid.ledger_id, mid.entry_id, max(mid.batch_index - 1, -1))


def seek_id(lo: Key, partition: int = -1) -> MessageId:
    """Where a reader of the range ``(lo, ...]`` starts: the entry holding ``lo`` (the
    broker moves on to the next valid position if that entry is gone)."""
    if lo == BEFORE_ALL:
        return MessageId(-1, -1, -1, partition)
    return MessageId(lo[0], lo[1], -1, partition)


def entries_between(lo: Key, hi: Key) -> int | None:
    """How many entries hold messages of ``(lo, hi]``, when both lie in one ledger
    (entries of a ledger are numbered without gaps); ``None`` across ledgers."""
    if lo[0] != hi[0]:
        return None
    first = lo[1] + 1 if lo[2] == WHOLE_ENTRY else lo[1]
    return max(0, hi[1] - first + 1)


def cut_after_entries(lo: Key, entries: int) -> Key:
    """The key that ends ``entries`` whole entries after ``lo`` in ``lo``'s ledger.

    Past the end of that ledger the cut is still valid: it simply ends the range
    at the ledger's last entry (a later ledger's messages have greater keys).
    """
    first = lo[1] + 1 if lo[2] == WHOLE_ENTRY else lo[1]
    return (lo[0], first + entries - 1, WHOLE_ENTRY)


def split_in_ledger(lo: Key, hi: Key, parts: int) -> list[Key]:
    """Cuts that split ``(lo, hi]`` (one ledger) into ``parts`` ranges of about as many
    entries each; the cuts lie strictly between ``lo`` and ``hi``, ascending."""
    count = entries_between(lo, hi)
    if count is None or parts <= 1 or count <= 1:
        return []
    parts = min(parts, count)
    cuts = [cut_after_entries(lo, (count * k) // parts) for k in range(1, parts)]
    return sorted({c for c in cuts if lo < c < hi})


# ---------------------------------------------------------------- pulsar-spark JSON


def id_from_json(value: Any) -> MessageId:
    """A message id as pulsar-spark writes it in ``startingOffsets``/``endingOffsets``:
    the bytes of its serialised ``MessageIdData`` as a JSON array of (signed) bytes.
    An object ``{"ledgerId": .., "entryId": .., "batchIndex": ..}`` is accepted too."""
    if isinstance(value, list) and all(isinstance(b, int) and -128 <= b <= 255 for b in value):
        return MessageId.deserialize(bytes(b & 0xFF for b in value))
    if isinstance(value, dict) and {"ledgerId", "entryId"} <= value.keys():
        return MessageId(int(value["ledgerId"]), int(value["entryId"]),
                         int(value.get("batchIndex", -1)))
    raise ValueError(
        f"a message id must be a JSON array of the bytes of a serialised MessageIdData "
        f"(as pulsar-spark writes it) or {{\"ledgerId\": L, \"entryId\": E}}, not {value!r}"
    )


def id_to_json(mid: MessageId) -> list[int]:
    """``mid`` as pulsar-spark's JSON (signed bytes, as Java's ``byte[]``)."""
    return [b - 256 if b > 127 else b for b in mid.serialize()]


def parse_topic_ids(text: str) -> dict[str, MessageId]:
    """``{"topic": <message id>, ...}`` from a ``startingOffsets``/``endingOffsets`` value."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"offsets must be 'earliest', 'latest' or JSON: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise ValueError("JSON offsets must be an object of topic -> message id")
    return {str(topic): id_from_json(value) for topic, value in data.items()}


def parse_topic_times(text: str) -> int | dict[str, int]:
    """``startingTime``: milliseconds since the epoch, or JSON ``{"topic": ms, ...}``."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(
            f"startingTime must be milliseconds since the epoch or JSON of topic -> ms, "
            f"not {text!r}"
        ) from None
    if not isinstance(data, dict) or not all(isinstance(v, int) for v in data.values()):
        raise ValueError("startingTime JSON must map topics to milliseconds since the epoch")
    return {str(k): int(v) for k, v in data.items()}


# ---------------------------------------------------------------- streaming offsets


def offsets_to_dict(keys: Mapping[str, Key]) -> dict[str, dict[str, int]]:
    """A streaming offset (what Spark writes in its checkpoint): per topic partition,
    the key of the last message the query has covered."""
    return {
        topic: {"ledger": key[0], "entry": key[1], "batch": key[2]}
        for topic, key in sorted(keys.items())
    }


def offsets_from_dict(data: Mapping[str, Any]) -> dict[str, Key]:
    try:
        return {
            str(topic): (int(v["ledger"]), int(v["entry"]), int(v["batch"]))
            for topic, v in data.items()
        }
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"not an offset of the pulsar source: {data!r}") from None
