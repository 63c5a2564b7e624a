"""check_batch's column check of a batch of one shape (batch_shape.py) against the
message-by-message walk it stands in for: it must take every regular batch the walk
takes, and never take one the walk refuses, whatever byte of it is changed."""

from __future__ import annotations

import random
import struct

import pytest

from magnetar.protocol.batch import _walk, build_batch, check_batch
from magnetar.protocol.batch_shape import FREE, LAST, MORE, SAME, metadata_kinds, uniform_batch
from magnetar.protocol.errors import MalformedFrame
from magnetar.protocol.pb import pb


def official_batch(count: int, size: int = 100, first_sequence: int = 2000) -> bytes:
    """The batch the official client writes: payload_size and sequence_id per message."""
    return build_batch(
        (pb.SingleMessageMetadata(sequence_id=first_sequence + i), bytes([i % 251]) * size)
        for i in range(count)
    )


def walk_accepts(payload: bytes, count: int) -> bool:
    """The walk's verdict (check_batch before the column check)."""
    if count * 6 > len(payload):
        return False
    try:
        return _walk(payload, count) == len(payload)
    except MalformedFrame:
        return False


def check_accepts(payload: bytes | memoryview, count: int, start: int = 0) -> bool:
    try:
        check_batch(payload, count, start)
    except MalformedFrame:
        return False
    return True


def test_the_official_clients_batches_are_proven_without_the_walk() -> None:
    for size in (0, 1, 100, 1024):
        payload = official_batch(300, size)
        assert uniform_batch(payload, 300)
        assert check_accepts(payload, 300)


def test_a_lying_count_around_a_uniform_batch_is_refused() -> None:
    payload = official_batch(300)
    for count in (299, 301, 150, 600, 1):
        assert not uniform_batch(payload, count)
        assert not check_accepts(payload, count)


def test_irregular_batches_are_left_to_the_walk_which_takes_them() -> None:
    varied_sizes = build_batch(
        (pb.SingleMessageMetadata(sequence_id=i), b"x" * (i % 7)) for i in range(50)
    )
    crossing_a_varint_width = official_batch(50, first_sequence=100)  # 127 -> 128
    with_properties = build_batch(
        (pb.SingleMessageMetadata(properties=[pb.KeyValue(key="k", value=str(i))]), b"v")
        for i in range(50)
    )
    for payload in (varied_sizes, crossing_a_varint_width, with_properties):
        assert not uniform_batch(payload, 50)
        assert check_accepts(payload, 50)


def test_constant_properties_and_fixed_width_fields_are_proven() -> None:
    payload = build_batch(
        (
            pb.SingleMessageMetadata(
                properties=[pb.KeyValue(key="type", value="reading")],
                partition_key="sensor-7",
                event_time=1_700_000_000_000 + i,
                sequence_id=5000 + i,
                null_value=bool(i % 2),
            ),
            b"0123456789",
        )
        for i in range(64)
    )
    assert uniform_batch(payload, 64)


def test_metadata_kinds_mark_what_may_vary() -> None:
    single = pb.SingleMessageMetadata(payload_size=300, sequence_id=2000)
    assert metadata_kinds(single.SerializeToString()) == bytes(
        [SAME, SAME, SAME, SAME, MORE, LAST]  # tag, payload_size 300; tag, sequence_id
    )
    # an unknown fixed64 field (number 15): its eight value bytes may be anything
    fixed = pb.SingleMessageMetadata(payload_size=1).SerializeToString() + b"\x79" + bytes(8)
    assert metadata_kinds(fixed) == bytes([SAME, SAME, SAME]) + bytes([FREE]) * 8
    assert metadata_kinds(b"\x1b\x1c") is None  # a group


@pytest.mark.parametrize("seed", range(6))
def test_no_changed_byte_makes_it_take_what_the_walk_refuses(seed: int) -> None:
    """Every byte of the first messages' size fields and metadata, and random bytes
    further on, set to values that keep or break the varint shape: the verdict is the
    walk's each time."""
    rng = random.Random(seed)
    count = rng.choice((8, 20, 100))
    size = rng.choice((0, 3, 100))
    base = official_batch(count, size, first_sequence=rng.choice((200, 20_000, 3_000_000)))
    assert uniform_batch(base, count)
    stride = len(base) // count
    head = stride - size  # the size field and metadata of each message
    positions = [m * stride + k for m in (0, 1, count - 1) for k in range(head)]
    positions += [rng.randrange(len(base)) for _ in range(40)]
    for position in positions:
        for value in {0x00, 0x01, 0x7F, 0x80, 0xFF, base[position] ^ 0x80, rng.randrange(256)}:
            payload = bytearray(base)
            payload[position] = value
            data = bytes(payload)
            assert check_accepts(data, count) == walk_accepts(data, count), (position, value)


def test_a_middle_message_that_does_not_parse_is_refused() -> None:
    base = bytearray(official_batch(40))
    stride = len(base) // 40
    middle = 20 * stride
    (md_size,) = struct.unpack_from(">I", base, middle)
    base[middle + 4 + md_size - 1] |= 0x80  # its sequence_id varint now runs on
    assert not walk_accepts(bytes(base), 40)
    assert not check_accepts(bytes(base), 40)


def test_a_batch_inside_its_entry_or_a_view_gets_the_same_verdicts() -> None:
    payload = official_batch(50)
    entry = b"head" + payload
    view = memoryview(entry)[4:]
    assert uniform_batch(view, 50) and uniform_batch(entry, 50, 4)
    for data, start in ((view, 0), (entry, 4)):
        assert check_accepts(data, 50, start)
        assert not check_accepts(data, 49, start)
    broken = bytearray(entry)
    broken[4 + 3] = 0xFF  # the first message's metadata size
    assert not check_accepts(memoryview(bytes(broken))[4:], 50)
    assert not check_accepts(bytes(broken), 50, 4)
    assert not check_accepts(entry, 50, 3)  # a start off by one
