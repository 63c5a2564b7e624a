"""Keys, ranges, cuts and option parsing of the Spark source (no Spark, no broker)."""

from __future__ import annotations

import itertools
import json

import pytest

from magnetar.protocol.message_id import EARLIEST, LATEST, MessageId
from magnetar.spark.budget import allocate_parts, share_budget
from magnetar.spark.options import SinkConfig, SourceConfig
from magnetar.spark.positions import (
    BEFORE_ALL,
    WHOLE_ENTRY,
    cut_after_entries,
    entries_between,
    id_from_json,
    id_to_json,
    key_before,
    key_through,
    message_key,
    offsets_from_dict,
    offsets_to_dict,
    parse_topic_ids,
    parse_topic_times,
    split_in_ledger,
)

# A log of two ledgers: ledger 7 holds entries 0-3 (entry 1 a batch of 3), ledger 9
# (opened after a restart) entries 4-5 (entry 5 a batch of 2), as magnetar numbers
# them; Pulsar would restart the entry ids, which changes nothing here.
LOG = [(7, 0, -1), (7, 1, 0), (7, 1, 1), (7, 1, 2), (7, 2, -1), (7, 3, -1),
       (9, 4, -1), (9, 5, 0), (9, 5, 1)]
KEYS = [message_key(*m) for m in LOG]


def in_range(lo: tuple[int, int, int], hi: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    return [k for k in KEYS if lo < k <= hi]


def test_message_keys_order_by_ledger_then_entry_then_batch_index() -> None:
    assert sorted(KEYS) == KEYS
    assert message_key(7, 3, -1) < message_key(9, 0, -1)  # a later ledger, lower entry id


def test_inclusive_and_exclusive_bounds_select_the_right_messages() -> None:
    batch_middle = MessageId(7, 1, 1)
    assert in_range(key_before(batch_middle), KEYS[-1]) == KEYS[2:]
    assert in_range(key_through(batch_middle), KEYS[-1]) == KEYS[3:]
    whole = MessageId(7, 1, -1)  # an id without batch index stands for its entry
    assert in_range(key_before(whole), KEYS[-1]) == KEYS[1:]
    assert in_range(key_through(whole), KEYS[-1]) == KEYS[4:]
    assert in_range(BEFORE_ALL, key_through(MessageId(7, 0, -1))) == KEYS[:1]
    assert key_through(EARLIEST) == key_before(EARLIEST) == BEFORE_ALL


def test_consecutive_ranges_cover_every_message_once_whatever_the_cuts() -> None:
    cuts = [(7, 1, 0), (7, 2, WHOLE_ENTRY), (7, 99, WHOLE_ENTRY), (9, 5, -1)]
    for chosen in itertools.chain.from_iterable(
        itertools.combinations(cuts, n) for n in range(len(cuts) + 1)
    ):
        bounds = [BEFORE_ALL, *sorted(chosen), KEYS[-1]]
        seen = [k for a, b in itertools.pairwise(bounds) for k in in_range(a, b)]
        assert seen == KEYS, chosen


def test_entry_arithmetic_stays_in_one_ledger() -> None:
    assert entries_between((7, 0, -1), (7, 3, WHOLE_ENTRY)) == 4
    assert entries_between((7, 0, WHOLE_ENTRY), (7, 3, WHOLE_ENTRY)) == 3
    assert entries_between((7, 1, 1), (7, 1, 2)) == 1
    assert entries_between((7, 0, -1), (9, 5, 1)) is None
    assert cut_after_entries((7, 0, WHOLE_ENTRY), 2) == (7, 2, WHOLE_ENTRY)
    cuts = split_in_ledger((7, -1, WHOLE_ENTRY), (7, 99, WHOLE_ENTRY), 4)
    assert cuts == [(7, 24, WHOLE_ENTRY), (7, 49, WHOLE_ENTRY), (7, 74, WHOLE_ENTRY)]
    assert split_in_ledger((7, 0, -1), (7, 0, WHOLE_ENTRY), 4) == []  # one entry: no cut


def test_pulsar_spark_json_message_ids() -> None:
    # pulsar-spark's README example: ledger 11, entry 101, partition 1, batch index 1.
    mid = id_from_json([8, 11, 16, 101, 24, 1, 32, 1])
    assert (mid.ledger_id, mid.entry_id, mid.partition, mid.batch_index) == (11, 101, 1, 1)
    big = MessageId(1_764_000_000, 5, 3)
    assert id_from_json(id_to_json(big)) == big
    assert any(b < 0 for b in id_to_json(big))  # Java's signed bytes
    assert id_from_json({"ledgerId": 4, "entryId": 2}) == MessageId(4, 2)
    assert id_from_json(id_to_json(EARLIEST)).is_earliest
    assert id_from_json(id_to_json(LATEST)).is_latest
    parsed = parse_topic_ids(json.dumps({"t-partition-0": [8, 1, 16, 2]}))
    assert parsed == {"t-partition-0": MessageId(1, 2)}
    with pytest.raises(ValueError):
        parse_topic_ids("[1, 2]")
    with pytest.raises(ValueError):
        id_from_json("0:1")
    assert parse_topic_times("1700000000000") == 1_700_000_000_000
    assert parse_topic_times('{"a": 5}') == {"a": 5}


def test_streaming_offsets_survive_a_json_round_trip() -> None:
    keys = {"persistent://public/default/b": (9, 5, WHOLE_ENTRY), "persistent://x/y/a": BEFORE_ALL}
    data = json.loads(json.dumps(offsets_to_dict(keys)))
    assert offsets_from_dict(data) == keys
    with pytest.raises(ValueError):
        offsets_from_dict({"t": {"ledger": 1}})


def test_parts_follow_the_weights() -> None:
    assert allocate_parts([100, 100], 4) == [2, 2]
    assert allocate_parts([300, 100], 4) == [3, 1]
    assert allocate_parts([1, 1, 1], 2) == [1, 1, 1]
    assert sum(allocate_parts([7, 13, 0], 10)) == 10


def test_entry_budget_is_shared_and_always_moves_on() -> None:
    assert share_budget({"a": 100, "b": 100}, 10) == {"a": 5, "b": 5}
    assert share_budget({"a": 2, "b": 100}, 10) == {"a": 2, "b": 8}
    assert share_budget({"a": None, "b": 3}, 10) == {"a": 7, "b": 3}
    assert sum(share_budget({"a": 5, "b": 5, "c": 5}, 1).values()) == 1
    assert share_budget({"a": 0, "b": 4}, 10) == {"a": 0, "b": 4}


def test_source_options_as_pulsar_spark_spells_them() -> None:
    base = {"service.url": "pulsar://h:6650", "Topic": "events"}
    batch = SourceConfig.from_options(base, streaming=False)
    assert batch.selection.topics == ("persistent://public/default/events",)
    assert (batch.starting, batch.ending) == ("earliest", "latest")
    stream = SourceConfig.from_options(
        {**base, "maxEntriesPerTrigger": "50", "failOnDataLoss": "false",
         "pulsar.reader.receiverQueueSize": "100", "pollTimeoutMs": "5000"}, streaming=True)
    assert stream.starting == "latest" and stream.max_entries_per_trigger == 50
    assert not stream.fail_on_data_loss and stream.receiver_queue_size == 100
    assert stream.poll_timeout == 5.0
    topics = SourceConfig.from_options(
        {"service.url": "pulsar://h", "topics": "a, b,a"}, streaming=False)
    assert len(topics.selection.topics) == 2
    bad = [
        {"service.url": "pulsar://h"},  # no topic
        {**base, "topicsPattern": "e.*"},  # two selections
        {"topic": "t"},  # no service.url
        {**base, "startingOffsets": "latest"},  # latest start in a batch query
        {**base, "endingOffsets": "earliest"},
        {**base, "startingOffsets": "earliest", "startingTime": "5"},
        {**base, "pulsar.reader.noSuchThing": "1"},
        {**base, "minPartitions": "0"},
    ]
    for options in bad:
        with pytest.raises(ValueError):
            SourceConfig.from_options(options, streaming=False)
    with pytest.raises(ValueError):
        SourceConfig.from_options({**base, "endingOffsets": "latest"}, streaming=True)


def test_sink_options() -> None:
    sink = SinkConfig.from_options(
        {"service.url": "pulsar://h", "topic": "out", "pulsar.producer.compressionType": "ZSTD",
         "pulsar.producer.batchingMaxPublishDelayMicros": "2000"}, ("value",))
    assert sink.topic == "persistent://public/default/out"
    assert sink.compression == "zstd" and sink.batching and sink.batching_max_delay == 0.002
    routed = SinkConfig.from_options({"service.url": "pulsar://h"}, ("value", "__topic"))
    assert routed.topic is None
    with pytest.raises(ValueError):
        SinkConfig.from_options({"service.url": "pulsar://h"}, ("value",))  # nowhere to send
    with pytest.raises(ValueError):
        SinkConfig.from_options({"service.url": "pulsar://h", "topic": "t",
                                 "pulsar.producer.compressionType": "brotli"}, ("value",))


def test_row_ids_are_the_protobuf_serialisation() -> None:
    from magnetar.spark.entry_rows import id_prefix, id_suffix

    ids = [MessageId(1_764_000_000, 5, -1), MessageId(1_764_000_000, 6, 0, -1, 3),
           MessageId(1_764_000_000, 6, 2, -1, 3), MessageId(1_764_000_000, 7, 0, -1, 1),
           MessageId(7, 300, 200, 4, 1000), MessageId(7, 300, 999, 4, 1000),
           MessageId(7, 0, -1, 2), MessageId(2**40, 2**33, 127, 0, 128)]
    for mid in ids:
        got = id_prefix(mid.ledger_id, mid.entry_id, mid.partition)
        if mid.batch_index >= 0:
            got += id_suffix(mid.batch_index, mid.batch_size)
        assert got == mid.serialize(), mid
