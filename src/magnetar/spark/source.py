"""The ``pulsar`` data source: Spark's entry point, and its batch reader and writers.

Spark builds these objects on the driver and pickles readers and writers to the
executors, so they hold parsed options only; each task opens its own client.
"""

from __future__ import annotations

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

from magnetar.spark._loop import BackgroundLoop
from magnetar.spark.options import SinkConfig, SourceConfig
from magnetar.spark.planning import Planner, TopicRange
from magnetar.spark.reading import read_range
from magnetar.spark.retry import retrying
from magnetar.spark.rows import SCHEMA, check_write_columns
from magnetar.spark.stream import PulsarStreamReader
from magnetar.spark.writing import write_batches


class PulsarDataSource(DataSource):  # type: ignore[misc]
    """``format("pulsar")``: batch and streaming reads and writes of Pulsar topics."""

    @classmethod
    def name(cls) -> str:
        return "pulsar"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return PulsarBatchReader(SourceConfig.from_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> PulsarStreamReader:
        return PulsarStreamReader(SourceConfig.from_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> PulsarBatchWriter:
        return PulsarBatchWriter(self._sink(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> PulsarStreamWriter:
        return PulsarStreamWriter(self._sink(schema, overwrite))

    def _sink(self, schema: StructType, overwrite: bool) -> SinkConfig:
        if overwrite:
            raise ValueError("a pulsar topic can only be appended to: use mode('append')")
        return SinkConfig.from_options(self.options, check_write_columns(schema.fieldNames()))


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
