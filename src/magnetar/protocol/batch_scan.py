"""Where a batch's values lie, without a metadata object per message: the cut a bulk
reader (the Spark source, a PIP-96 processor making columns) wants when the messages
carry nothing but their values.

Most batches are *plain*: every ``SingleMessageMetadata`` is ``payload_size`` and
perhaps ``sequence_id`` (no key, property, event time or flag), the two fields a
batching producer always writes.  A plain batch's layout is given as *spans*: an
``array('i')`` of ``2 * count + 1`` offsets into the payload, element ``2i`` (from
``spans[2i]`` to ``spans[2i + 1]``) being message ``i``'s size field and metadata and
element ``2i + 1`` its value: an Arrow binary array's offsets as they are
(``pa.Array.from_buffers``), whose odd elements are the values.  Spans may be shared
between calls: never change them.

Two scans, both bounded by the payload whatever it claims (a lying batch gives
``None``, never an offset past its end, nor an exception):

- :func:`strided_spans`: the batch whose messages all have the first one's layout
  (same metadata size and payload size; only the sequence id's digits differ), which
  fixed-size values give.  Proved plain and exact with a few C-level byte slices
  (each a column of one byte position of every message): no Python per message.
- :func:`guess_spans`: any batch, one short loop per message that *assumes* each
  metadata is plain.  Its answer is a guess until every even element is checked to
  match :data:`PLAIN_METADATA` (one regular-expression kernel over all of them, as
  ``pyarrow.compute.match_substring_regex``; :func:`check_guess` in pure Python).

A batch that is not plain (or is malformed) is left to
:func:`magnetar.protocol.batch.split_batch`, which parses each metadata and raises
:class:`~magnetar.protocol.errors.MalformedFrame` for a lie.
"""

from __future__ import annotations

import re
import struct
from array import array
from functools import lru_cache

# An even element of a plain batch's spans: the u32 size field (already followed),
# then payload_size (field 3, a varint of 1-4 bytes) and perhaps sequence_id (field 8,
# a varint of at most 9 bytes, so never past 63 bits), nothing else. Written for RE2
# (Arrow, bytes as Latin-1) and Python's re alike.
PLAIN_METADATA = (rb"^[\x00-\xff]{4}\x18(?:[\x80-\xff]{0,3}[\x00-\x7f])"
                  rb"(?:\x40[\x80-\xff]{0,8}[\x00-\x7f])?$")
_PLAIN = re.compile(PLAIN_METADATA[1:-1])
_HEAD = struct.Struct(">IxB")  # size field, payload_size's tag, its first byte
_HIGH = bytes(range(0x80, 0x100))
_LOW = bytes(range(0x80))
_MAX_OFFSET = (1 << 31) - 1  # offsets are int32 (Arrow's binary)


def _varint(data: bytes) -> int:
    value = 0
    for shift, byte in enumerate(data):
        value |= (byte & 0x7F) << (7 * shift)
    return value


def strided_spans(payload: bytes, count: int) -> array[int] | None:
    """The spans of a plain batch of ``count`` messages laid out alike (see the
    module's docstring); ``None`` for any other payload."""
    total = len(payload)
    if count < 1 or total < 6 or total > _MAX_OFFSET:
        return None
    (size, _) = _HEAD.unpack_from(payload, 0)
    head = 4 + size
    first = _PLAIN.fullmatch(payload, 0, head) if head <= total else None
    if first is None:
        return None
    ps_end = 6  # payload_size's varint ends at its first byte below 0x80
    while payload[ps_end - 1] >= 0x80:
        ps_end += 1
    stride = head + _varint(payload[5:ps_end])
    if stride * count != total:
        return None
    # Every message's bytes before its value, position by position: the size field,
    # the tags and payload_size as the first message's; the sequence id's varint of
    # the same length (continuation bits where the first one has them).
    for k in range(head):
        column = payload[k::stride]
        if ps_end < k < head:  # sequence_id's digits (k == ps_end is its tag)
            last = k == head - 1
            if column.translate(None, _LOW if last else _HIGH):
                return None
        elif column.count(payload[k]) != count:
            return None
    return _strided(count, stride, head)


@lru_cache(maxsize=64)
def _strided(count: int, stride: int, head: int) -> array[int]:
    """The spans of ``count`` messages of ``stride`` bytes whose values start ``head``
    bytes in: the same for every batch of that layout, so made once (callers must not
    change them)."""
    total = count * stride
    spans = array("i", bytes(4 * (2 * count + 1)))
    spans[0:2 * count:2] = array("i", range(0, total, stride))
    spans[1:2 * count:2] = array("i", range(head, head + total, stride))
    spans[2 * count] = total
    return spans


def guess_spans(payload: bytes, count: int) -> array[int] | None:
    """The spans ``payload`` would have if it were a plain batch of ``count`` messages:
    a guess to check (see the module's docstring). ``None`` when the guess fails on
    its own: a message runs past the end, or a value is 16 KB or more."""
    total = len(payload)
    if count < 1 or total > _MAX_OFFSET:
        return None
    spans = array("i")
    add = spans.append
    head = _HEAD.unpack_from
    pos = 0
    # The loop of every batched message of a bulk read: two offsets each, no slice.
    try:
        for _ in range(count):
            size, ps = head(payload, pos)
            add(pos)
            pos += 4 + size
            add(pos)
            if ps > 0x7F:
                ps2 = payload[pos - size + 2]
                if ps2 > 0x7F:
                    return None
                ps = (ps & 0x7F) | ps2 << 7
            pos += ps
    except (struct.error, IndexError, OverflowError):
        return None
    if pos > total:
        return None
    add(pos)
    return spans


def check_guess(payload: bytes, spans: array[int]) -> bool:
    """Whether every even element of ``spans`` is a plain metadata (pure Python, about
    0.4 us a message: a caller with Arrow uses :data:`PLAIN_METADATA` there)."""
    match = _PLAIN.fullmatch
    return all(match(payload, spans[i], spans[i + 1]) is not None
               for i in range(0, len(spans) - 1, 2))
