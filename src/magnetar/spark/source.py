"""The ``pulsar`` data source: Spark's entry point, and its batch reader and writers.

Spark builds these objects on the driver and pickles readers and writers to the
executors, so they hold parsed options only; each task opens its own client.  The
source's columns follow its topics' schema, asked of the broker once on the driver
(:meth:`PulsarDataSource.schema`) and carried to the tasks in the source's config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from magnetar.client.schema import SchemaInfo
from magnetar.spark._loop import BackgroundLoop
from magnetar.spark.options import SinkConfig, SourceConfig
from magnetar.spark.planning import Planner, TopicRange
from magnetar.spark.reading import read_range
from magnetar.spark.retry import retrying
from magnetar.spark.rows import check_write_columns
from magnetar.spark.stream import PulsarStreamReader
from magnetar.spark.topic_schema import source_schema
from magnetar.spark.writing import write_batches


class PulsarDataSource(DataSource):  # type: ignore[misc]
    """``format("pulsar")``: batch and streaming reads and writes of Pulsar topics."""

    @classmethod
    def name(cls) -> str:
        return "pulsar"

    def schema(self) -> StructType:
        """The topics' schema as columns (``value`` bytes for topics without one, and
        with ``allowDifferentTopicSchemas``), then the metadata columns."""
        return source_schema(self._value_schema())

    def _value_schema(self) -> SchemaInfo | None:
        """The topics' schema, asked once (Spark pickles this object after
        :meth:`schema` and builds the reader from the copy)."""
        config = SourceConfig.for_topics(self.options)  # batch or stream: not known here
        if config.allow_different_topic_schemas:
            return None
        if not hasattr(self, "_topic_schema"):
            with BackgroundLoop() as loop:
                self._topic_schema = loop.run(retrying(
                    lambda: topics_schema(config), timeout=config.client.operation_timeout,
                    what="asking for the pulsar topics' schema"))
        return self._topic_schema

    def _source(self, streaming: bool) -> SourceConfig:
        config = SourceConfig.from_options(self.options, streaming=streaming)
        return dataclasses.replace(config, value_schema=self._value_schema())

    def reader(self, schema: StructType) -> DataSourceReader:
        return PulsarBatchReader(self._source(streaming=False))

    def streamReader(self, schema: StructType) -> PulsarStreamReader:
        return PulsarStreamReader(self._source(streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> PulsarBatchWriter:
        return PulsarBatchWriter(self._sink(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> PulsarStreamWriter:
        return PulsarStreamWriter(self._sink(schema, overwrite))

    def _sink(self, schema: StructType, overwrite: bool) -> SinkConfig:
        if overwrite:
            raise ValueError("a pulsar topic can only be appended to: use mode('append')")
        return SinkConfig.from_options(self.options, *check_write_columns(schema))


async def topics_schema(config: SourceConfig) -> SchemaInfo | None:
    """The schema the source's topic partitions share (None if none has one); topics
    of different schemas are an error, as pulsar-spark's, unless
    ``allowDifferentTopicSchemas`` reads them all as bytes."""
    client = config.client.connect()
    try:
        topics = await Planner(client, config).partitions()
        found = {}
        for topic in topics:
            info = await client.get_schema(topic)
            found[topic] = info
        kinds = {(i.type.upper(), i.schema) if i else None for i in found.values()}
        if len(kinds) > 1:
            described = {t: (i.type if i else "none") for t, i in found.items()}
            raise ValueError(f"the topics to read have different schemas ({described}); "
                             "set 'allowDifferentTopicSchemas' to 'true' to read their "
                             "values as bytes")
        return next(iter(found.values()), None)
    finally:
        await client.close()


class PulsarBatchReader(DataSourceReader):  # type: ignore[misc]
    """``spark.read.format("pulsar")``: ranges planned on the driver, read by tasks."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config

    def partitions(self) -> Sequence[InputPartition]:
        async def plan() -> list[TopicRange]:
            planner = Planner(self.config.client.connect(), self.config)
            try:
                return await planner.batch_ranges()
            finally:
                await planner.close()
                await planner.client.close()

        with BackgroundLoop() as loop:
            return loop.run(retrying(plan, timeout=self.config.client.operation_timeout,
                                     what="planning the pulsar source's ranges"))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.config, partition)


class PulsarBatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """``df.write.format("pulsar")``: each task sends its rows and waits for receipts."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.config, iterator)


class PulsarStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    """``df.writeStream.format("pulsar")``: as the batch writer, micro-batch by
    micro-batch; a micro-batch that Spark runs again may be sent again."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.config, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every message was receipted before its task ended."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing can be taken back: what was sent stays (at-least-once)."""
