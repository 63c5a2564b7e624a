"""A streaming query that outlives a broker outage: the broker (a child process) is
killed mid-stream and started again 10 s later on the same port and data directory;
the same query, with no supervisor, finishes with every message once in its Parquet
sink.  The driver's offset queries and the tasks' readers retry within
``operationTimeoutMs``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from magnetar.client.sync import Client
from magnetar.testing import EmbeddedBroker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def produce(service_url: str, topic: str, values: list[str]) -> None:
    client = Client(service_url)
    try:
        producer = client.create_producer(topic, batching=True, batching_max_messages=20,
                                          compression="lz4")
        futures = [producer.send_async(v.encode()) for v in values]
        producer.flush()
        for f in futures:
            f.result(60)
    finally:
        client.close()


def committed_values(spark: Any, path: Path) -> list[str]:
    """What the file sink has committed (its _spark_metadata log), as strings."""
    if not list(path.glob("*.parquet")):
        return []  # no file committed yet: no schema to read
    return [r["v"] for r in spark.read.parquet(str(path)).select("v").collect()]


def test_streaming_query_outlives_a_broker_restart(spark: Any, tmp_path: Path) -> None:
    topic = "persistent://public/default/spark-outage"
    first = [f"a{i:05d}" for i in range(4000)]
    second = [f"b{i:05d}" for i in range(1000)]
    broker = EmbeddedBroker(data_dir=tmp_path / "data", mode="subprocess")
    broker.start()
    try:
        produce(broker.service_url, topic, first)
        out = tmp_path / "out"
        query = (spark.readStream.format("pulsar")
                 .option("service.url", broker.service_url).option("topic", topic)
                 .option("startingOffsets", "earliest").option("maxEntriesPerTrigger", "10")
                 .load().selectExpr("CAST(value AS STRING) AS v")
                 .writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(processingTime="200 milliseconds").start())
        try:
            # Mid-stream: some micro-batches are in, most of the backlog is not.
            deadline = time.monotonic() + 300
            while (query.lastProgress is None or query.lastProgress["batchId"] < 2) \
                    and time.monotonic() < deadline:
                assert query.isActive, query.exception()
                time.sleep(0.2)
            assert query.lastProgress is not None and query.lastProgress["batchId"] >= 2
            broker.kill()
            time.sleep(10)
            assert query.isActive, query.exception()
            broker.start()  # the same port and data directory
            produce(broker.service_url, topic, second)

            expected = sorted(first + second)
            deadline = time.monotonic() + 400
            got: list[str] = []
            while time.monotonic() < deadline:
                assert query.isActive, query.exception()
                got = committed_values(spark, out)
                if len(got) >= len(expected):
                    break
                time.sleep(1)
            assert query.exception() is None
        finally:
            query.stop()
        got = committed_values(spark, out)
        assert len(got) == len(expected)  # nothing twice
        assert sorted(got) == expected  # nothing lost
    finally:
        broker.stop()
