"""Unit tests of the client's sans-IO parts: codecs, trackers, backoff, routing, names."""

from __future__ import annotations

import asyncio
import builtins
import types

import pytest

from magnetar.client import errors
from magnetar.client.backoff import Backoff, MultiplierRedeliveryBackoff
from magnetar.client.consuming.ack_timeout import AckTimeoutTracker
from magnetar.client.consuming.acks import AckGroupingTracker, BatchAcker
from magnetar.client.consuming.nack import NegativeAcksTracker
from magnetar.client.consuming.receiver_queue import ReceiverQueue
from magnetar.client.message import received
from magnetar.client.producing.batch_builder import BatchBuilder
from magnetar.client.producing.routing import KeyHashRouter, RoundRobinRouter, make_router
from magnetar.client.topic_name import (
    complete_topic_name,
    namespace_of,
    partition_index,
    partition_name,
    partitioned_base,
    pattern_namespace,
)
from magnetar.client.transport.pool import parse_service_url
from magnetar.protocol import client_codec
from magnetar.protocol.batch import split_batch
from magnetar.protocol.frames import (
    FrameDecoder,
    encode_command_with_body,
    parse_metadata,
    parse_payload,
)
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.murmur3 import key_hash
from magnetar.protocol.pb import pb


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------- codec


def test_message_metadata_encoder_matches_protobuf() -> None:
    data = client_codec.encode_message_metadata(
        b"prod-1", 300, 1_700_000_000_123,
        properties={"a": "1", "ü": "v"}, partition_key="k", compression=pb.LZ4,
        uncompressed_size=77, num_messages_in_batch=3, event_time=5, schema_version=b"\x00\x01",
        ordering_key=b"ok", deliver_at_time=1_700_000_100_000, highest_sequence_id=302,
        null_value=True,
    )
    md = pb.MessageMetadata()
    md.ParseFromString(data)
    expected = pb.MessageMetadata(
        producer_name="prod-1", sequence_id=300, publish_time=1_700_000_000_123,
        partition_key="k", compression=pb.LZ4, uncompressed_size=77, num_messages_in_batch=3,
        event_time=5, schema_version=b"\x00\x01", ordering_key=b"ok",
        deliver_at_time=1_700_000_100_000, highest_sequence_id=302, null_value=True,
    )
    expected.properties.add(key="a", value="1")
    expected.properties.add(key="ü", value="v")
    assert md == expected
    assert data == expected.SerializeToString()


def test_minimal_metadata_and_single_metadata_match_protobuf() -> None:
    data = client_codec.encode_message_metadata(b"p", 0, 1)
    assert data == pb.MessageMetadata(producer_name="p", sequence_id=0,
                                      publish_time=1).SerializeToString()
    single = client_codec.encode_single_metadata(
        10, properties={"x": "y"}, partition_key="pk", event_time=9, ordering_key=b"o",
        sequence_id=1 << 40, null_value=True,
    )
    expected = pb.SingleMessageMetadata(
        partition_key="pk", payload_size=10, event_time=9, ordering_key=b"o",
        sequence_id=1 << 40, null_value=True,
    )
    expected.properties.add(key="x", value="y")
    assert single == expected.SerializeToString()


def test_send_frame_decodes_with_the_protocol_package() -> None:
    md = client_codec.encode_message_metadata(b"p", 7, 123)
    frame = client_codec.encode_send(3, 7, 4, 10, md, b"payload")
    frames = FrameDecoder().feed(frame)
    assert len(frames) == 1
    cmd = frames[0].command
    assert cmd.type == pb.BaseCommand.SEND
    assert (cmd.send.producer_id, cmd.send.sequence_id, cmd.send.num_messages,
            cmd.send.highest_sequence_id) == (3, 7, 4, 10)
    section = parse_payload(frames[0].body)
    assert section.has_checksum and section.payload == b"payload"
    assert parse_metadata(section).sequence_id == 7


def test_flow_ping_pong_frames() -> None:
    frames = FrameDecoder().feed(
        client_codec.encode_flow(1 << 33, 500) + client_codec.PING_FRAME + client_codec.PONG_FRAME
    )
    assert [f.command.type for f in frames] == [
        pb.BaseCommand.FLOW, pb.BaseCommand.PING, pb.BaseCommand.PONG]
    assert frames[0].command.flow.consumer_id == 1 << 33
    assert frames[0].command.flow.messagePermits == 500


def test_reply_ack_encoder_matches_protobuf() -> None:
    """A PIP-371 reply's ACK, written by hand, is what the protobuf object serializes:
    with and without a batch index, ack set (negative words too), error flag and
    requester, for large ids."""
    cases = [
        (42, 7, 1, 3, [0b101], 17, "requester", True),
        (1, 2, -1, 0, None, 0, "", False),
        (1 << 40, 1 << 35, 0, 130, [-1, 7, 0], 1 << 33, "ünï", False),
    ]
    for ledger, entry, index, size, ack_set, request_id, requester, is_error in cases:
        cmd = pb.BaseCommand(type=pb.BaseCommand.ACK)
        ack = cmd.ack
        ack.consumer_id = 9
        ack.ack_type = pb.CommandAck.Individual
        ack.reply_to_client = requester
        if is_error:
            ack.reply_is_error = True
        ack.request_id = request_id
        mid = ack.message_id.add(ledgerId=ledger, entryId=entry)
        if index >= 0:
            mid.batch_index = index
        if ack_set:
            mid.ack_set.extend(ack_set)
        if size:
            mid.batch_size = size
        assert client_codec.encode_reply_ack(
            9, ledger, entry, index, size, ack_set, request_id, requester.encode(), is_error,
            b"the reply",
        ) == encode_command_with_body(cmd, b"the reply")


def test_repeated_properties_encode_the_same_from_the_cache() -> None:
    """Properties are encoded once and then taken from a table; what comes out is the
    same, whichever the order of calls, and the table stays bounded."""
    props = {"magnetar.request.timeout.ms": "30000", "ü": "v"}
    first = client_codec.encode_message_metadata(b"p", 1, 2, properties=props)
    again = client_codec.encode_message_metadata(b"p", 1, 2, properties=dict(props))
    expected = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    for key, value in props.items():
        expected.properties.add(key=key, value=value)
    assert first == again == expected.SerializeToString()
    single = client_codec.encode_single_metadata(3, properties=props)  # another tag
    parsed = pb.SingleMessageMetadata.FromString(single)
    assert {kv.key: kv.value for kv in parsed.properties} == props
    for i in range(10_000):
        client_codec.encode_key_values(b"\x22", {"k": str(i)})
    assert len(client_codec._KV_CACHE) <= client_codec._KV_CACHE_MAX


def test_varint_of_negative_int64_is_ten_bytes() -> None:
    assert client_codec.varint(-1) == b"\xff" * 9 + b"\x01"
    md = pb.MessageMetadata()
    md.ParseFromString(client_codec.encode_message_metadata(b"p", 0, 0, deliver_at_time=-5))
    assert md.deliver_at_time == -5


def test_batch_builder_limits_and_layout() -> None:
    builder = BatchBuilder(max_messages=3, max_bytes=1000)
    assert builder.has_room(5000)  # an empty batch takes any message
    for i in range(3):
        single = client_codec.encode_single_metadata(2, sequence_id=i)
        builder.add(single, b"m%d" % i, i, f"extra{i}")
    assert builder.full
    payload, seqs, extras, _ = builder.take()
    assert seqs == [0, 1, 2] and extras == ["extra0", "extra1", "extra2"]
    assert [p for _, p in split_batch(payload, 3)] == [b"m0", b"m1", b"m2"]
    assert len(builder) == 0
    small = BatchBuilder(max_messages=100, max_bytes=20)
    small.add(b"\x18\x05", b"12345", 0, None)
    assert not small.has_room(50)


# ---------------------------------------------------------------- acks


def test_batch_acker_individual_and_cumulative() -> None:
    acker = BatchAcker(5)
    assert not acker.ack(1)
    assert acker.is_acked(1) and not acker.is_acked(0)
    assert acker.outstanding == 4
    assert not acker.ack_cumulative(2)
    assert acker.outstanding == 2
    assert not acker.ack(4)
    assert acker.ack(3)
    assert acker.complete


def test_batch_acker_ack_set_words() -> None:
    acker = BatchAcker(70)
    acker.ack(0)
    acker.ack(65)
    words = acker.ack_set()
    assert len(words) == 2
    assert words[0] == -2  # all 64 bits set but bit 0, as a signed int64
    assert words[1] == 0b111101


def test_ack_grouping_tracker() -> None:
    tracker = AckGroupingTracker(max_size=3)
    assert not tracker.add((1, 1))
    assert not tracker.add((1, 2))
    assert tracker.is_duplicate((1, 2))
    assert tracker.add((1, 5))  # reaches max_size: flush now
    tracker.add_cumulative((1, 2))
    individual, cumulative = tracker.take()
    assert individual == [(1, 5)] and cumulative == (1, 2)
    assert tracker.is_duplicate((1, 1))  # covered by the cumulative ack
    assert not tracker.is_duplicate((1, 3))
    assert not tracker.pending
    tracker.restore([(2, 2)], (1, 3))
    assert tracker.take() == ([(2, 2)], (1, 3))


# ---------------------------------------------------------------- nacks & backoff


def test_multiplier_redelivery_backoff_curve() -> None:
    backoff = MultiplierRedeliveryBackoff(min_delay=1.0, max_delay=60.0, multiplier=2)
    assert [backoff.next_delay(n) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff.next_delay(10_000) == 60.0
    assert MultiplierRedeliveryBackoff(0.5, 10, 3).next_delay(2) == 4.5
    with pytest.raises(ValueError):
        MultiplierRedeliveryBackoff(5, 1)


def _loop_next_delay(min_delay: float, max_delay: float, multiplier: float, count: int) -> float:
    """The per-redelivery loop MultiplierRedeliveryBackoff used before its closed form."""
    if min_delay == 0:
        return 0.0
    delay = min_delay
    for _ in range(max(count, 0)):
        delay *= multiplier
        if delay >= max_delay:
            return max_delay
    return min(delay, max_delay)


@pytest.mark.parametrize(
    ("min_delay", "max_delay", "multiplier"),
    [(1.0, 60.0, 2), (0.5, 10.0, 3), (0.1, 600.0, 1.5), (0.2, 0.2, 2), (1.0, 5.0, 1),
     (0.0, 10.0, 2), (0.001, 1e9, 1.01)],
)
def test_multiplier_backoff_closed_form_matches_the_loop(
    min_delay: float, max_delay: float, multiplier: float
) -> None:
    backoff = MultiplierRedeliveryBackoff(min_delay, max_delay, multiplier)
    for count in range(-1, 101):
        expected = _loop_next_delay(min_delay, max_delay, multiplier, count)
        assert backoff.next_delay(count) == pytest.approx(expected, rel=1e-12), count


@pytest.mark.timeout(10)  # a hang guard: the old loop ran once per redelivery
def test_multiplier_backoff_of_a_huge_count_is_computed_not_looped() -> None:
    assert MultiplierRedeliveryBackoff(1.0, 60.0, 2).next_delay(10**9) == 60.0
    assert MultiplierRedeliveryBackoff(1.0, 60.0, 1).next_delay(10**18) == 1.0
    # A multiplier barely above 1 and a wide range: ~10**12 steps to reach max_delay.
    tiny_steps = MultiplierRedeliveryBackoff(1e-300, 1e300, 1 + 1e-9)
    assert tiny_steps.next_delay(10**18) == 1e300
    assert tiny_steps.next_delay(10**9) == pytest.approx(1e-300 * (1 + 1e-9) ** 10**9)
    assert MultiplierRedeliveryBackoff(1.0, float("inf"), 2).next_delay(10**9) == float("inf")


def test_nack_tracker_fixed_delay_with_fake_clock() -> None:
    clock = FakeClock()
    tracker = NegativeAcksTracker(delay=5.0, clock=clock)
    tracker.add((1, 1))
    clock.now += 2
    tracker.add((1, 2))
    assert tracker.next_deadline() == 1005.0
    assert tracker.pop_due() == []
    clock.now = 1005.0
    assert tracker.pop_due() == [(1, 1)]
    assert tracker.next_deadline() == 1007.0
    tracker.remove((1, 2))
    assert tracker.next_deadline() is None
    assert len(tracker) == 0


def test_nack_tracker_uses_backoff_and_redelivery_count() -> None:
    clock = FakeClock(0.0)
    tracker = NegativeAcksTracker(
        delay=60.0, backoff=MultiplierRedeliveryBackoff(1.0, 60.0, 2), clock=clock
    )
    assert tracker.add((1, 0), redelivery_count=0) == 1.0
    assert tracker.add((1, 1), redelivery_count=3) == 8.0
    assert tracker.add((1, 2), redelivery_count=20) == 60.0
    assert tracker.pop_due(0.99) == []
    assert tracker.pop_due(8.0) == [(1, 0), (1, 1)]
    # A second nack of a pending entry keeps the earlier due time.
    assert tracker.add((1, 2), redelivery_count=0) == 1.0
    assert tracker.pop_due(1.0) == [(1, 2)]
    assert tracker.pop_due(100.0) == []


def test_ack_timeout_tracker_with_fake_clock() -> None:
    clock = FakeClock(0.0)
    tracker = AckTimeoutTracker(10.0, clock=clock)
    tracker.add(MessageId(1, 1))
    clock.now = 3
    tracker.add(MessageId(1, 2, 0, -1, 2))
    tracker.add(MessageId(1, 2, 1, -1, 2))
    clock.now = 5
    tracker.add(MessageId(1, 3))
    tracker.remove(MessageId(1, 3))
    assert tracker.next_deadline() == 10.0
    assert tracker.pop_expired(9.9) == []
    assert tracker.pop_expired(10.0) == [(1, 1)]
    tracker.add(MessageId(1, 4))  # deadline 15
    assert tracker.pop_expired(13.0) == [(1, 2)]  # both batch messages, one entry
    tracker.remove_up_to(MessageId(1, 4))
    assert len(tracker) == 0
    with pytest.raises(ValueError):
        AckTimeoutTracker(0)


def test_reconnect_backoff_grows_and_resets() -> None:
    clock = FakeClock(0.0)
    backoff = Backoff(0.1, 1.0, jitter=0.0, clock=clock)
    delays = [backoff.next() for _ in range(6)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    clock.now = 3.0
    assert backoff.elapsed() == 3.0
    backoff.reset()
    assert backoff.next() == pytest.approx(0.1)
    jittered = Backoff(1.0, 10.0, jitter=0.5, rng=lambda: 1.0)
    assert jittered.next() == pytest.approx(0.5)


# ---------------------------------------------------------------- routing & names


def test_routers() -> None:
    rr = RoundRobinRouter(start=0)
    assert [rr(None, 3) for _ in range(4)] == [0, 1, 2, 0]
    assert rr("key-1", 7) == key_hash("key-1") % 7  # keys hash, as in Java
    single = KeyHashRouter(single=5)
    assert {single(None, 4) for _ in range(5)} == {1}
    assert single("abc", 4) == key_hash("abc") % 4
    assert make_router(lambda key, n: n - 1)(None, 4) == 3
    with pytest.raises(ValueError):
        make_router("random")


def test_topic_names() -> None:
    assert complete_topic_name("x") == "persistent://public/default/x"
    assert complete_topic_name("t/ns/x") == "persistent://t/ns/x"
    assert complete_topic_name("non-persistent://a/b/c") == "non-persistent://a/b/c"
    with pytest.raises(ValueError):
        complete_topic_name("a/b")
    with pytest.raises(ValueError):
        complete_topic_name("http://a/b/c")
    name = partition_name("persistent://public/default/x", 3)
    assert name == "persistent://public/default/x-partition-3"
    assert partition_index(name) == 3 and partitioned_base(name).endswith("/x")
    assert namespace_of("x") == "public/default"
    assert pattern_namespace("persistent://t1/ns1/foo-.*") == ("persistent", "t1/ns1")
    with pytest.raises(ValueError):
        pattern_namespace("persistent://t.*/ns/x")


def test_service_url_parsing() -> None:
    assert parse_service_url("pulsar://localhost:6650") == ([("localhost", 6650)], False)
    assert parse_service_url("pulsar://a:1,b:2") == ([("a", 1), ("b", 2)], False)
    assert parse_service_url("pulsar+ssl://h") == ([("h", 6651)], True)
    assert parse_service_url("pulsar://[::1]:7000") == ([("::1", 7000)], False)
    with pytest.raises(ValueError):
        parse_service_url("http://h:1")


# ---------------------------------------------------------------- errors


def test_error_mapping() -> None:
    exc = errors.error_for_code(pb.ProducerBusy, "producer x is busy")
    assert isinstance(exc, errors.ProducerBusy) and isinstance(exc, errors.PulsarError)
    assert exc.message == "producer x is busy" and exc.code == pb.ProducerBusy
    assert errors.error_class(pb.TopicTerminatedError) is errors.TopicTerminated
    assert errors.error_class(pb.NotAllowedError) is errors.NotAllowed
    assert errors.error_class(pb.ProducerFenced) is errors.ProducerFenced
    assert errors.error_class(pb.ProducerBlockedQuotaExceededException) is (
        errors.ProducerBlockedQuotaExceeded)
    assert errors.error_class(9999) is errors.UnknownError
    assert str(errors.error_for_code(pb.ServiceNotReady)) == "ServiceNotReady"
    assert issubclass(errors.TimeoutError, builtins.TimeoutError)
    assert issubclass(errors.RequestTimeout, errors.TimeoutError)
    assert errors.is_retriable(errors.ServiceNotReady("x"))
    assert not errors.is_retriable(errors.ProducerFenced("x"))
    assert not errors.is_retriable(errors.ProducerBusy("x"))


# ---------------------------------------------------------------- receiver queue


async def test_receiver_queue_hands_over_and_filters() -> None:
    queue: ReceiverQueue[int] = ReceiverQueue()
    waiter = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    queue.put(1)
    assert await waiter == 1
    for i in range(2, 6):
        queue.put(i)
    assert queue.remove_if(lambda x: x % 2 == 0) == 2
    assert [queue.get_nowait(), queue.get_nowait(), queue.get_nowait()] == [3, 5, None]
    with pytest.raises(builtins.TimeoutError):
        await queue.get(0.01)
    assert not queue._waiters  # the timed-out waiter is gone
    queue.close(errors.AlreadyClosed("closed"))
    with pytest.raises(errors.AlreadyClosed):
        await queue.get()


def test_client_frame_decoder_handles_any_split() -> None:
    from magnetar.protocol.frames import encode_payload_command
    from magnetar.protocol.pb import BaseCommand

    frames = []
    for i in range(5):
        cmd = BaseCommand(type=BaseCommand.MESSAGE)
        cmd.message.consumer_id = i
        cmd.message.message_id.ledgerId = 1
        cmd.message.message_id.entryId = i
        frames.append(encode_payload_command(cmd, b"\x0a\x01p\x10\x00\x18\x00", b"x" * i * 100))
    frames.append(client_codec.PING_FRAME)
    stream = b"".join(frames)
    for chunk in (1, 3, 7, 64, 1000, len(stream)):
        decoder = client_codec.ClientFrameDecoder(1 << 20)
        out = []
        for start in range(0, len(stream), chunk):
            out.extend(decoder.feed(stream[start:start + chunk]))
        assert [c.type for c, _ in out] == [BaseCommand.MESSAGE] * 5 + [BaseCommand.PING]
        assert [c.message.consumer_id for c, _ in out[:5]] == list(range(5))
        reference = FrameDecoder().feed(stream)
        assert [body for _, body in out] == [f.body for f in reference]
        assert decoder.buffered == 0
    from magnetar.protocol.errors import FrameTooLarge, MalformedFrame

    # Over the limit: once the head is in, any command but MESSAGE ends the stream
    # (a MESSAGE is cut to its head, tests/protocol/test_client_frame_limit.py).
    decoder = client_codec.ClientFrameDecoder(100)
    assert decoder.feed(b"\x00\x00\x10\x00") == []
    with pytest.raises(FrameTooLarge):
        decoder.feed(b"\x00\x00\x00\x02\x08\x12" + b"\x00" * 100)  # PING
    with pytest.raises(MalformedFrame):
        client_codec.ClientFrameDecoder(100).feed(b"\x00\x00\x00\x06\x00\x00\x00\x02\xff\xff")


def test_fast_split_batch_matches_the_protocol_one() -> None:
    from magnetar.protocol.batch import build_batch

    messages = [(pb.SingleMessageMetadata(sequence_id=i, partition_key=f"k{i}"), b"v" * i)
                for i in range(20)]
    payload = build_batch(messages)
    fast = client_codec.split_batch(payload, 20)
    assert [(s.sequence_id, s.partition_key, p) for s, p in fast] == [
        (s.sequence_id, s.partition_key, p) for s, p in split_batch(payload, 20)]
    from magnetar.protocol.errors import MalformedFrame

    with pytest.raises(MalformedFrame):
        client_codec.split_batch(payload, 21)
    with pytest.raises(MalformedFrame):
        client_codec.split_batch(payload[:-5], 20)


def test_a_received_message_reads_its_metadata_on_first_use() -> None:
    partition = types.SimpleNamespace(partition=3)  # what a message asks of its consumer
    metadata = pb.MessageMetadata(
        producer_name="p",
        sequence_id=9,
        publish_time=123,
        partition_key="k",
        event_time=77,
        ordering_key=b"o",
        schema_version=b"\x00\x01",
        properties=[pb.KeyValue(key="a", value="b")],
    )
    serialized = metadata.SerializeToString()
    alone = received(b"v", (5, 6), -1, "t", 2, partition, None, "p", serialized, None)
    alone.key = "mine"  # a write before any read is kept
    assert (alone.key, alone.properties, alone.event_time, alone.publish_time) == (
        "mine",
        {"a": "b"},
        77,
        123,
    )
    assert (alone.producer_name, alone.sequence_id, alone.ordering_key) == ("p", 9, b"o")
    assert (alone.schema_version, alone.redelivery_count, alone.value) == (b"\x00\x01", 2, b"v")
    mid = alone.message_id
    assert (mid.ledger_id, mid.entry_id, mid.batch_index, mid.partition) == (5, 6, -1, 3)

    single = pb.SingleMessageMetadata(
        payload_size=1, partition_key="sk", properties=[pb.KeyValue(key="x", value="y")]
    )
    shared = (123, None, 40)  # publish time, schema version, first sequence id
    in_batch = received(b"w", (5, 7), 2, "t", 0, partition, BatchAcker(4), "p", shared, single)
    assert (in_batch.sequence_id, in_batch.key, in_batch.properties) == (42, "sk", {"x": "y"})
    assert (in_batch.publish_time, in_batch.producer_name, in_batch.event_time) == (123, "p", None)
    mid = in_batch.message_id
    assert (mid.entry_id, mid.batch_index, mid.batch_size, mid.partition) == (7, 2, 4, 3)
    # A message a PIP-96 processor yields inside a batch has no metadata of its own.
    bare = received(b"z", (5, 7), 3, "t", 0, partition, None, "p", shared, None)
    assert (bare.key, bare.properties, bare.sequence_id) == (None, {}, 43)
