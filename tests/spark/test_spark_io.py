"""The ``pulsar`` data source on a local Spark session (local[2]) against a real broker:
batch reads (batched + compressed, partitioned, offset ranges, ledgers), streaming reads
across micro-batches and restarts, batch and streaming writes."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.client.sync import Client
from magnetar.protocol.message_id import MessageId
from magnetar.spark import id_to_json
from magnetar.testing import EmbeddedBroker

pytestmark = pytest.mark.timeout(600)


def new_topic(label: str) -> str:
    return f"persistent://public/default/spark-{label}-{uuid.uuid4().hex[:8]}"


def produce(
    broker: EmbeddedBroker, topic: str, values: list[str], **producer: Any
) -> list[MessageId]:
    """Send ``values`` (key ``k<i % 5>``, property ``i``, event time) with magnetar's
    client; returns their ids in order."""
    client = Client(broker.service_url)
    try:
        p = client.create_producer(topic, **producer)
        futures = [
            p.send_async(v.encode(), key=f"k{i % 5}", properties={"i": str(i)},
                         event_time=1_700_000_000_000 + i)
            for i, v in enumerate(values)
        ]
        p.flush()
        return [f.result(30) for f in futures]
    finally:
        client.close()


def read(spark: Any, broker: EmbeddedBroker, **options: str) -> Any:
    return (spark.read.format("pulsar").option("service.url", broker.service_url)
            .options(**options).load())


def values_of(rows: list[Any]) -> list[str]:
    return [bytes(r["value"]).decode() for r in rows]


def test_batch_read_of_a_batched_compressed_topic_is_what_was_produced(
    spark: Any, spark_broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]
) -> None:
    topic = new_topic("official")
    client = client_factory(spark_broker.service_url)
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=40,
        batching_max_publish_delay_ms=100, compression_type=pulsar.CompressionType.LZ4,
        block_if_queue_full=True,
    )
    sent: dict[int, pulsar.MessageId] = {}
    n = 300
    for i in range(n):
        def done(result: Any, mid: pulsar.MessageId, i: int = i) -> None:
            sent[i] = mid
        producer.send_async(f"value-{i}".encode(), done, partition_key=f"key-{i % 7}",
                            properties={"i": str(i), "even": str(i % 2 == 0)},
                            event_timestamp=1_700_000_000_000 + i)
    producer.flush()
    assert len(sent) == n

    rows = read(spark, spark_broker, topic=topic).collect()

    assert values_of(rows) == [f"value-{i}" for i in range(n)]  # order within the partition
    assert [bytes(r["__key"]).decode() for r in rows] == [f"key-{i % 7}" for i in range(n)]
    assert [r["__messageProperties"] for r in rows] == [
        {"i": str(i), "even": str(i % 2 == 0)} for i in range(n)]
    # PySpark hands timestamps back as naive datetimes in the local time zone.
    assert [r["__eventTime"] for r in rows] == [
        datetime.fromtimestamp((1_700_000_000_000 + i) / 1000) for i in range(n)]
    assert {r["__topic"] for r in rows} == {topic}
    ids = [MessageId.deserialize(bytes(r["__messageId"])) for r in rows]
    assert [(m.ledger_id, m.entry_id, m.batch_index) for m in ids] == [
        (sent[i].ledger_id(), sent[i].entry_id(), sent[i].batch_index()) for i in range(n)]
    assert max(m.batch_index for m in ids) > 0  # it was batched
    assert all(r["__publishTime"] is not None for r in rows)


def test_partitioned_topic_one_spark_partition_per_topic_partition(
    spark: Any, spark_broker: EmbeddedBroker
) -> None:
    topic = new_topic("parted")
    spark_broker.create_partitioned_topic(topic, 3)
    values = [f"p{i}" for i in range(240)]
    ids = produce(spark_broker, topic, values, batching=True, compression="zstd")
    df = read(spark, spark_broker, topic=topic)
    assert df.rdd.getNumPartitions() == 3
    rows = df.collect()
    assert sorted(values_of(rows)) == sorted(values)
    for part in range(3):
        name = f"{topic}-partition-{part}"
        expected = [v for v, mid in zip(values, ids, strict=True) if mid.partition == part]
        assert expected, "keys k0..k4 should reach every partition"
        assert values_of([r for r in rows if r["__topic"] == name]) == expected


def test_topics_list_and_pattern(spark: Any, spark_broker: EmbeddedBroker) -> None:
    prefix = f"spark-pat-{uuid.uuid4().hex[:6]}"
    names = [f"persistent://public/default/{prefix}-{s}" for s in ("a", "b")]
    produce(spark_broker, names[0], ["a0", "a1"])
    produce(spark_broker, names[1], ["b0"])
    produce(spark_broker, f"persistent://public/default/other-{prefix}", ["no"])
    by_pattern = read(spark, spark_broker, topicsPattern=f"{prefix}-.*").collect()
    by_list = read(spark, spark_broker, topics=",".join(names)).collect()
    # Namespace-relative, as Pulsar completes a topic name.
    relative = read(spark, spark_broker, topicsPattern=f"public/default/{prefix}-.*").collect()
    for rows in (by_pattern, by_list, relative):
        assert sorted((r["__topic"], bytes(r["value"]).decode()) for r in rows) == [
            (names[0], "a0"), (names[0], "a1"), (names[1], "b0")]


def test_offset_ranges_time_and_splits(spark: Any, spark_broker: EmbeddedBroker) -> None:
    topic = new_topic("ranges")
    values = [f"r{i}" for i in range(100)]
    ids = produce(spark_broker, topic, values, batching=True, batching_max_messages=10)
    assert ids[15].batch_index >= 0
    # pulsar-spark's offsets: a JSON object of topic -> serialised id; start and end
    # inclusive, mid-batch ids honoured.
    ranged = read(spark, spark_broker, topic=topic,
                  startingOffsets=json.dumps({topic: id_to_json(ids[15])}),
                  endingOffsets=json.dumps({topic: id_to_json(ids[42])})).collect()
    assert values_of(ranged) == values[15:43]
    with pytest.raises(Exception, match="which the query does not read"):
        read(spark, spark_broker, topic=topic,
             startingOffsets=json.dumps({f"{topic}-typo": id_to_json(ids[1])})).collect()

    # startingTime: from the first message published at or after that time.
    everything = read(spark, spark_broker, topic=topic).collect()
    publish = [r["__publishTime"] for r in everything]
    since = read(spark, spark_broker, topic=topic,
                 startingTime=str(round(publish[55].timestamp() * 1000))).collect()
    assert values_of(since) == [v for v, t in zip(values, publish, strict=True)
                                if t >= publish[55]]

    # A backlog cut into message-id ranges read in parallel: same rows, same order.
    split = read(spark, spark_broker, topic=topic, minPartitions="4")
    assert split.rdd.getNumPartitions() == 4
    assert values_of(split.collect()) == values


def test_ranges_across_ledgers(spark: Any, spark_broker: EmbeddedBroker) -> None:
    """A restart opens a new ledger: ids of the second half carry another ledger id and
    their entry ids say nothing about the first half's; ranges still cover each message
    once, split by publish time."""
    topic = new_topic("ledgers")
    first = [f"a{i}" for i in range(60)]
    ids = produce(spark_broker, topic, first, batching=True, batching_max_messages=6)
    spark_broker.restart()
    second = [f"b{i}" for i in range(60)]
    ids += produce(spark_broker, topic, second, batching=True, batching_max_messages=6)
    assert ids[0].ledger_id != ids[-1].ledger_id

    df = read(spark, spark_broker, topic=topic, minPartitions="4")
    assert df.rdd.getNumPartitions() >= 2
    assert values_of(df.collect()) == first + second
    middle = read(spark, spark_broker, topic=topic,
                  startingOffsets=json.dumps({topic: id_to_json(ids[50])}),
                  endingOffsets=json.dumps({topic: id_to_json(ids[70])})).collect()
    assert values_of(middle) == (first + second)[50:71]


def subscriptions(broker: EmbeddedBroker, topic: str) -> dict[str, Any]:
    path = topic.replace("persistent://", "persistent/")
    with urllib.request.urlopen(f"{broker.admin_url}/admin/v2/{path}/stats", timeout=30) as r:
        return json.load(r)["subscriptions"]  # type: ignore[no-any-return]


def backlog(broker: EmbeddedBroker, topic: str, subscription: str) -> int:
    return int(subscriptions(broker, topic)[subscription]["msgBacklog"])


def run_stream(spark: Any, options: dict[str, str], checkpoint: Path,
               batches: list[tuple[int, list[str]]], fail_on: int | None = None) -> None:
    """Run a streaming query to the end of what is there (Trigger.AvailableNow),
    recording each micro-batch that succeeds; ``fail_on`` fails that batch."""

    def each(df: Any, batch_id: int) -> None:
        got = values_of(df.collect())
        if batch_id == fail_on:
            raise RuntimeError("a planned failure")
        batches.append((batch_id, got))

    query = (spark.readStream.format("pulsar").options(**options).load()
             .writeStream.foreachBatch(each).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert not query.isActive


def test_streaming_read_micro_batches_and_restarts(
    spark: Any, spark_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = new_topic("stream")
    first = [f"s{i}" for i in range(30)]
    produce(spark_broker, topic, first)  # unbatched: one entry per message
    options = {"service.url": spark_broker.service_url, "topic": topic,
               "startingOffsets": "earliest", "maxEntriesPerTrigger": "10",
               "predefinedSubscription": "spark-stream-test"}
    batches: list[tuple[int, list[str]]] = []

    # The second micro-batch fails: the query stops, and its restart from the
    # checkpoint runs that micro-batch again with the same offsets.
    with pytest.raises(Exception, match="planned failure"):
        run_stream(spark, options, tmp_path / "cp", batches, fail_on=1)
    assert batches == [(0, first[:10])]
    run_stream(spark, options, tmp_path / "cp", batches)
    assert batches[1:] == [(1, first[10:20]), (2, first[20:30])]

    # The broker restarts (a new ledger); batched entries of 5 messages, 2 entries
    # per micro-batch: the query resumes where it was.
    spark_broker.restart()
    second = [f"t{i}" for i in range(25)]
    produce(spark_broker, topic, second, batching=True, batching_max_messages=5,
            batching_max_delay=1.0)
    run_stream(spark, {**options, "maxEntriesPerTrigger": "2"}, tmp_path / "cp", batches)
    assert [b for b, _ in batches] == list(range(len(batches)))
    assert [v for _, got in batches for v in got] == first + second  # no gap, no repeat
    assert [len(got) for _, got in batches[3:]] == [10, 10, 5]
    # What the query committed is acknowledged on its subscription: at most the last
    # micro-batch (whose commit may come with the next one) is left in its backlog.
    assert backlog(spark_broker, topic, "spark-stream-test") <= 5


def test_batch_write_round_trip(
    spark: Any, spark_broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]
) -> None:
    out = new_topic("write")
    other = new_topic("write-other")
    rows = [(f"w{i}".encode(), f"key{i % 3}", {"n": str(i)},
             datetime(2024, 1, 1, 0, 0, i % 60), out if i % 4 else other)
            for i in range(200)]
    df = spark.createDataFrame(
        rows, "value binary, __key string, __messageProperties map<string,string>, "
              "__eventTime timestamp, __topic string").coalesce(1)
    df.write.format("pulsar").option("service.url", spark_broker.service_url) \
        .mode("append").save()
    for topic, wanted in ((out, [r for r in rows if r[4] == out]),
                          (other, [r for r in rows if r[4] == other])):
        back = read(spark, spark_broker, topic=topic).collect()
        assert [(bytes(r["value"]), bytes(r["__key"]).decode(), r["__messageProperties"],
                 r["__eventTime"]) for r in back] == [w[:4] for w in wanted]
        ids = [MessageId.deserialize(bytes(r["__messageId"])) for r in back]
        assert max(m.batch_index for m in ids) > 0  # the producer batched
    # The official client reads the batches the writer built as any batch.
    official = client_factory(spark_broker.service_url)
    reader = official.create_reader(out, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        m = reader.read_next(10_000)
        got.append((m.data(), m.partition_key(), m.properties(), m.event_timestamp()))
    assert got == [(w[0], w[1], w[2], round(w[3].timestamp() * 1000))
                   for w in rows if w[4] == out]

    with pytest.raises(Exception, match="needs a 'value' column"):
        spark.createDataFrame([("x",)], "v string").write.format("pulsar") \
            .option("service.url", spark_broker.service_url).option("topic", out) \
            .mode("append").save()


def test_streaming_write_round_trip(
    spark: Any, spark_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    source, sink = new_topic("src"), new_topic("sink")
    values = [f"x{i}" for i in range(50)]
    produce(spark_broker, source, values, batching=True, batching_max_messages=7)
    query = (spark.readStream.format("pulsar")
             .option("service.url", spark_broker.service_url).option("topic", source)
             .option("startingOffsets", "earliest").option("maxEntriesPerTrigger", "3").load()
             .select("value", "__key", "__messageProperties", "__eventTime")
             .writeStream.format("pulsar").option("service.url", spark_broker.service_url)
             .option("topic", sink).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.lastProgress is not None
    # The query's own durable subscription goes with it (Spark stops the source's
    # planner process as the query ends, not before awaitTermination returns).
    deadline = time.monotonic() + 60
    while subscriptions(spark_broker, source) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not subscriptions(spark_broker, source)
    back = read(spark, spark_broker, topic=sink).collect()
    original = read(spark, spark_broker, topic=source).collect()
    columns = ("value", "__key", "__messageProperties", "__eventTime")
    assert [tuple(r[c] for c in columns) for r in back] == [
        tuple(r[c] for c in columns) for r in original]


def test_streaming_max_bytes_per_trigger(
    spark: Any, spark_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """maxBytesPerTrigger (a soft limit, as pulsar-spark's): about that many bytes of
    entries per micro-batch, every message once."""
    topic = new_topic("bytes")
    values = [f"{i:03d}".ljust(100, ".") for i in range(30)]
    produce(spark_broker, topic, values)  # unbatched: entries of 100 bytes
    options = {"service.url": spark_broker.service_url, "topic": topic,
               "startingOffsets": "earliest", "maxBytesPerTrigger": "1000"}
    batches: list[tuple[int, list[str]]] = []
    run_stream(spark, options, tmp_path / "cp", batches)
    assert [v for _, got in batches for v in got] == values
    assert [len(got) for _, got in batches] == [10, 10, 10]
