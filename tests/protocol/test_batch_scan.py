"""The scans of plain batches (protocol/batch_scan.py): the spans they give are the cut
split_batch makes, a batch that is not plain is refused, and no payload, however it
lies, makes them raise or point past its end."""

from __future__ import annotations

import random
import re
import struct

import pytest

from magnetar.protocol.batch import build_batch, split_batch
from magnetar.protocol.batch_scan import (
    PLAIN_METADATA,
    check_guess,
    guess_spans,
    strided_spans,
)
from magnetar.protocol.pb import pb

Single = pb.SingleMessageMetadata


def batch(values: list[bytes], first_seq: int | None = 0, **fields: object) -> bytes:
    return build_batch([
        (Single(**fields) if first_seq is None else Single(sequence_id=first_seq + i, **fields),
         v) for i, v in enumerate(values)])


def values_of(payload: bytes, spans: object) -> list[bytes]:
    s = list(spans)  # type: ignore[call-overload]
    return [payload[s[i]:s[i + 1]] for i in range(1, len(s) - 1, 2)]


def metas_of(payload: bytes, spans: object) -> list[bytes]:
    s = list(spans)  # type: ignore[call-overload]
    return [payload[s[i]:s[i + 1]] for i in range(0, len(s) - 1, 2)]


def expected(payload: bytes, count: int) -> list[bytes]:
    return [v for _, v in split_batch(payload, count)]


@pytest.mark.parametrize(("values", "first_seq"), [
    ([b"x" * 100] * 200, 0),         # sequence ids of one and two bytes: not strided
    ([b"x" * 100] * 50, 200),        # two bytes each: strided
    ([b"y" * 300] * 20, 1 << 40),    # a two-byte payload size, a six-byte sequence id
    ([b""] * 30, 5),                 # empty values
    ([b"z" * 20_000] * 3, 9),        # a three-byte payload size
    ([b"v"] * 7, None),              # no sequence id at all
])
def test_strided_batches_are_cut_as_split_batch_cuts_them(
        values: list[bytes], first_seq: int | None) -> None:
    payload = batch(values, first_seq)
    count = len(values)
    spans = strided_spans(payload, count)
    if first_seq == 0:
        assert spans is None  # message 128's sequence id takes a byte more: not alike
    else:
        assert spans is not None
        assert values_of(payload, spans) == expected(payload, count)
        assert spans[-1] == len(payload)
    guessed = guess_spans(payload, count)
    if len(values[0]) >= 1 << 14:
        assert guessed is None  # the loop reads payload sizes of two bytes at most
        return
    assert guessed is not None and check_guess(payload, guessed)
    assert values_of(payload, guessed) == expected(payload, count)
    if spans is not None:
        assert list(spans) == list(guessed)


def test_variable_values_are_guessed_and_checked() -> None:
    rnd = random.Random(7)
    values = [bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 400)))
              for _ in range(200)]
    payload = batch(values, 100_000)
    assert strided_spans(payload, 200) is None
    spans = guess_spans(payload, 200)
    assert spans is not None and check_guess(payload, spans)
    assert values_of(payload, spans) == values
    pattern = re.compile(PLAIN_METADATA, re.DOTALL)
    assert all(pattern.fullmatch(m) for m in metas_of(payload, spans))


@pytest.mark.parametrize("fields", [
    {"partition_key": "k"}, {"properties": [pb.KeyValue(key="a", value="b")]},
    {"event_time": 5}, {"null_value": True}, {"ordering_key": b"o"}, {"compacted_out": True},
])
def test_a_batch_whose_messages_carry_more_than_values_is_not_plain(
        fields: dict[str, object]) -> None:
    payload = batch([b"x" * 10] * 20, 300, **fields)
    assert strided_spans(payload, 20) is None
    guessed = guess_spans(payload, 20)
    assert guessed is None or not check_guess(payload, guessed)
    # One such message among plain ones is enough.
    mixed = build_batch([(Single(sequence_id=300 + i, **(fields if i == 13 else {})), b"x" * 10)
                         for i in range(20)])
    assert strided_spans(mixed, 20) is None
    guessed = guess_spans(mixed, 20)
    assert guessed is None or not check_guess(mixed, guessed)


def test_a_sequence_id_of_ten_bytes_is_left_to_the_parser() -> None:
    payload = batch([b"x" * 10] * 20, (1 << 63) + 1)
    assert strided_spans(payload, 20) is None
    guessed = guess_spans(payload, 20)
    assert guessed is None or not check_guess(payload, guessed)


def test_count_and_length_must_agree() -> None:
    payload = batch([b"x" * 10] * 20, 300)
    for count in (19, 21, 0, -1):
        assert strided_spans(payload, count) is None
    assert guess_spans(payload, 21) is None
    assert guess_spans(payload, 0) is None
    assert strided_spans(payload + b"\x00", 20) is None  # a byte after the last message
    assert strided_spans(payload[:-1], 20) is None
    assert guess_spans(payload[:-1], 20) is None


def lies(payload: bytes) -> list[bytes]:
    """``payload`` with sizes that lie: each size field and payload size replaced by
    small and huge numbers, bytes cut off, bytes flipped."""
    out = [payload[:n] for n in range(0, len(payload), 7)]
    for at in range(0, len(payload), 3):
        for byte in (0x00, 0x7F, 0x80, 0xFF, 0x18, 0x40):
            out.append(payload[:at] + bytes([byte]) + payload[at + 1:])
    for at in (0, 18, 36):
        for size in (0, 1, 3, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF):
            out.append(payload[:at] + struct.pack(">I", size) + payload[at + 4:])
    return out


@pytest.mark.parametrize("first_seq", [200, 0])
def test_lying_batches_give_none_or_spans_inside_the_payload(first_seq: int) -> None:
    count = 8
    payload = batch([b"v" * 10] * count, first_seq)
    for bad in lies(payload):
        for scan in (strided_spans, guess_spans):
            spans = scan(bad, count)
            if spans is None:
                continue
            offsets = list(spans)
            assert len(offsets) == 2 * count + 1
            assert offsets == sorted(offsets) and offsets[0] == 0
            assert offsets[-1] <= len(bad)
            if scan is strided_spans or check_guess(bad, spans):
                # Claimed plain: then split_batch cuts the same values.
                assert values_of(bad, spans) == expected(bad, count)
