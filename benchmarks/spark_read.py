"""The Spark source's read throughput, against spark.read.parquet of the same rows, and
the job ``select("value").write.parquet`` from either, the write rate of
``mode("append")``, and its streaming end-to-end latency per micro-batch.

A broker in a child process gets a topic of ``--messages`` messages of ``--size`` bytes
(batched, lz4).  With a local[2] session, the topic is read in full into Spark's
``noop`` sink (every row and column materialised, nothing written) as one range per
topic partition and cut into ``--parts`` ranges (``minPartitions``); the same rows are
written to Parquet once and read back the same way: the ceiling on this machine.
The ceiling of any Python source on this machine is measured too (``--ceiling``): a
source whose tasks only hand Spark ready-made record batches of the same columns (no
broker, no decoding), against Parquet in the same jobs.
Then a streaming query follows the topic while a producer sends ``--rate`` messages a
second; each micro-batch's latency is the time from a message's publish time to its
row reaching the foreachBatch sink on the driver.  The write (two tasks) is timed
against ``write.parquet`` of the same cached rows and a Python writer that drops them
(Spark's hand-off alone), interleaved; ``--write-only`` runs only that, on rows Spark
makes.

    .venv/bin/python benchmarks/spark_read.py [--messages 1000000] [--size 100]
    .venv/bin/python benchmarks/spark_read.py --write-only --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from magnetar.client import Client
from magnetar.testing import EmbeddedBroker


async def fill(url: str, topic: str, n: int, size: int) -> float:
    payload = b"x" * size
    async with Client(url) as client:
        producer = await client.create_producer(
            topic, batching=True, batching_max_messages=1000, compression="lz4",
            max_pending_messages=5000,
        )
        started = time.perf_counter()
        window: list[asyncio.Future[Any]] = []
        for _ in range(n):
            window.append(producer.send_async(payload))
            if len(window) >= 5000:
                await asyncio.gather(*window)
                window.clear()
        await asyncio.gather(*window)
        elapsed = time.perf_counter() - started
        await producer.close()
    return n / elapsed


def session(master: str) -> Any:
    from pyspark.sql import SparkSession

    import magnetar.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master(master).appName("magnetar-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    magnetar.spark.register(spark)
    return spark


def canned_source(rows: int, parts: int, batch: Any) -> Any:
    """A Python data source whose ``parts`` tasks yield ``batch`` (a record batch of the
    pulsar source's columns) until each has ``rows`` rows: Spark's own cost of taking
    Arrow batches from Python, the ceiling of any Python source."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from magnetar.spark.rows import SCHEMA

    class CannedReader(DataSourceReader):  # type: ignore[misc]
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(parts)]

        def read(self, partition: InputPartition) -> Any:
            sent = 0
            while sent < rows:
                yield batch
                sent += batch.num_rows

    class Canned(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "canned"

        def schema(self) -> Any:
            return SCHEMA

        def reader(self, schema: Any) -> CannedReader:
            return CannedReader()

    return Canned


def ceiling(spark: Any, parquet: Any, n: int, parts: int, runs: int, out: str) -> None:
    """The jobs from a source that costs nothing but Spark's Arrow hand-off."""
    from magnetar.spark.rows import arrow_schema

    batch = parquet.limit(8192).toArrow().cast(arrow_schema()).combine_chunks().to_batches()[0]
    spark.dataSource.register(canned_source(n // parts, parts, batch))
    canned = spark.read.format("canned").load()
    t_noop = timed_noop(canned, runs)
    t_pq = timed_noop(parquet, runs)
    j_canned = timed_job(lambda: canned.select("value").write.mode("overwrite").parquet(out),
                         runs)
    j_pq = timed_job(lambda: parquet.select("value").write.mode("overwrite").parquet(out), runs)
    print(f"ceiling, a Python source of ready batches ({parts} tasks): noop "
          f"{n / t_noop:,.0f} rows/s ({t_pq / t_noop:.2f} of parquet's {n / t_pq:,.0f}), "
          f"write.parquet {n / j_canned:,.0f} ({j_pq / j_canned:.2f} of {n / j_pq:,.0f})")


def timed_noop(df: Any, runs: int) -> float:
    """Best wall time of ``runs`` full reads (after one warm-up)."""
    df.write.format("noop").mode("overwrite").save()
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        best = min(best, time.perf_counter() - started)
    return best


def timed_job(job: Any, runs: int) -> float:
    """Best wall time of ``runs`` runs of ``job()`` (after one warm-up)."""
    job()
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        job()
        best = min(best, time.perf_counter() - started)
    return best


def streaming_latency(spark: Any, url: str, rate: int, seconds: float) -> None:
    topic = f"persistent://public/default/bench-stream-{uuid.uuid4().hex[:8]}"
    latencies: list[tuple[int, float, float]] = []  # (rows, median ms, max ms)

    def each(df: Any, batch_id: int) -> None:
        times = [r[0] for r in df.select("__publishTime").collect()]
        now = time.time()
        if times:
            waits = sorted((now - t.timestamp()) * 1000 for t in times)
            latencies.append((len(waits), statistics.median(waits), waits[-1]))

    async def produce(stop: threading.Event) -> int:
        sent = 0
        async with Client(url) as client:
            producer = await client.create_producer(topic)
            await producer.send(b"warm-up")
            while not stop.is_set():
                await producer.send(b"y" * 100)
                sent += 1
                await asyncio.sleep(1 / rate)
        return sent

    checkpoint = tempfile.mkdtemp(prefix="spark-bench-cp-")
    # The topic must exist before the query asks for its partitions.
    asyncio.run(fill(url, topic, 1, 10))
    query = (spark.readStream.format("pulsar").option("service.url", url)
             .option("topic", topic).option("startingOffsets", "latest").load()
             .writeStream.foreachBatch(each).option("checkpointLocation", checkpoint)
             .trigger(processingTime="0 seconds").start())
    try:
        deadline = time.monotonic() + 120
        while query.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.5)
        stop = threading.Event()
        timer = threading.Timer(seconds, stop.set)
        timer.start()
        sent = asyncio.run(produce(stop))
        time.sleep(5)  # let the last micro-batches land
        progress = list(query.recentProgress)
    finally:
        query.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
    received = sum(n for n, _, _ in latencies)
    medians = sorted(m for _, m, _ in latencies)
    maxima = sorted(m for _, _, m in latencies)
    durations = sorted(p["durationMs"].get("triggerExecution", 0) for p in progress
                       if p.get("numInputRows"))
    print(f"streaming: {sent} messages at ~{rate}/s for {seconds:.0f}s, {received} rows in "
          f"{len(latencies)} micro-batches")
    if latencies:
        print(f"  per micro-batch, median publish->foreachBatch latency: "
              f"p50 {statistics.median(medians):.0f} ms, "
              f"p90 {medians[int(0.9 * (len(medians) - 1))]:.0f} ms; "
              f"worst message p50 {statistics.median(maxima):.0f} ms")
    if durations:
        print(f"  trigger execution per micro-batch: p50 {statistics.median(durations):.0f} ms, "
              f"max {durations[-1]:.0f} ms")


class _PythonNoopSink:
    """A Python data source whose writer only takes the Arrow batches Spark hands it:
    the JVM -> Python hand-off alone, the ceiling of any Python writer."""

    @staticmethod
    def register(spark: Any) -> None:
        from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

        class Writer(DataSourceArrowWriter):  # type: ignore[misc]
            def write(self, iterator: Any) -> Any:
                for _ in iterator:
                    pass
                return WriterCommitMessage()

        class Source(DataSource):  # type: ignore[misc]
            @classmethod
            def name(cls) -> str:
                return "python-noop"

            def writer(self, schema: Any, overwrite: bool) -> Any:
                return Writer()

        spark.dataSource.register(Source)


def write_rates(spark: Any, url: str, values: Any, work: Path, runs: int) -> float:
    """``values`` appended to a new topic (two tasks), against ``write.parquet`` of the
    same cached rows and a Python writer that drops them, interleaved; returns the best
    pulsar write time."""
    _PythonNoopSink.register(spark)
    rows = values.repartition(2).cache()
    n = rows.count()
    out = str(work / "write-ref.parquet")
    best = {"parquet": float("inf"), "python-noop": float("inf"), "pulsar": float("inf")}
    times: dict[str, list[float]] = {name: [] for name in best}
    for _ in range(runs):
        for name in best:
            if name == "parquet":
                job = rows.write.mode("overwrite").parquet
                args: tuple[str, ...] = (out,)
            elif name == "python-noop":
                job = rows.write.format("python-noop").mode("append").save
                args = ()
            else:
                topic = f"persistent://public/default/bench-write-{uuid.uuid4().hex[:8]}"
                job = (rows.write.format("pulsar").option("service.url", url)
                       .option("topic", topic).mode("append").save)
                args = ()
            started = time.perf_counter()
            job(*args)
            took = time.perf_counter() - started
            times[name].append(took)
            best[name] = min(best[name], took)
    rows.unpersist()
    t_write = best["pulsar"]
    print(f"write {n:,} rows, {rows.rdd.getNumPartitions()} tasks, best of {runs}:")
    for name, t in best.items():
        print(f"  {name + ':':<13}{n / t:>12,.0f} rows/s ({t:.2f} s; runs "
              f"{' '.join(f'{x:.2f}' for x in times[name])} s)")
    print(f"  pulsar / parquet {best['parquet'] / t_write:.2f}, "
          f"pulsar / python-noop {best['python-noop'] / t_write:.2f}")
    return t_write


def write_only(args: argparse.Namespace) -> int:
    """Only the write: ``--messages`` rows of ``--size`` bytes made by Spark."""
    from pyspark.sql import functions as F

    work = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    with EmbeddedBroker(mode="subprocess", data_dir=work / "broker", log_level="warning") as broker:
        spark = session(args.master)
        try:
            values = spark.range(args.messages).select(
                F.lit(b"x" * args.size).alias("value"))
            t_write = write_rates(spark, broker.service_url, values, work, args.runs)
            print(f"RATIOS write {args.messages / t_write:,.0f} rows/s; load "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        finally:
            spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--parts", type=int, default=2, help="minPartitions for the cut read")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--rate", type=int, default=100, help="messages/s while streaming")
    parser.add_argument("--stream-seconds", type=float, default=20.0)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--ceiling", action="store_true",
                        help="also time a Python source of ready-made batches")
    parser.add_argument("--write-only", action="store_true",
                        help="only the write, against write.parquet of the same rows")
    args = parser.parse_args()
    if args.write_only:
        return write_only(args)

    work = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    with EmbeddedBroker(mode="subprocess", data_dir=work / "broker", log_level="warning") as broker:
        url = broker.service_url
        topic = f"persistent://public/default/bench-read-{uuid.uuid4().hex[:8]}"
        rate = asyncio.run(fill(url, topic, args.messages, args.size))
        print(f"filled {topic}: {args.messages} x {args.size} B, batched, lz4 "
              f"({rate:,.0f} msg/s)")
        spark = session(args.master)
        try:
            source = (spark.read.format("pulsar").option("service.url", url)
                      .option("topic", topic))
            whole = source.load()
            cut = source.option("minPartitions", str(args.parts)).load()
            parquet_dir = str(work / "rows.parquet")
            cut.write.parquet(parquet_dir)
            parquet = spark.read.parquet(parquet_dir)
            assert parquet.count() == args.messages
            t_whole = timed_noop(whole, args.runs)
            t_cut = timed_noop(cut, args.runs)
            t_parquet = timed_noop(parquet, args.runs)
            n = args.messages
            print(f"read {n:,} rows with {args.master}, best of {args.runs}:")
            print(f"  pulsar, {whole.rdd.getNumPartitions()} range(s):   "
                  f"{n / t_whole:>12,.0f} rows/s ({t_whole:.2f} s)")
            print(f"  pulsar, {cut.rdd.getNumPartitions()} range(s):   "
                  f"{n / t_cut:>12,.0f} rows/s ({t_cut:.2f} s)")
            print(f"  parquet, {parquet.rdd.getNumPartitions()} file split(s): "
                  f"{n / t_parquet:>12,.0f} rows/s ({t_parquet:.2f} s)")
            print(f"  pulsar / parquet: {t_parquet / t_whole:.2f} (1 range), "
                  f"{t_parquet / t_cut:.2f} ({cut.rdd.getNumPartitions()} ranges)")

            # The job of a pipeline that lands a topic in files, from either source.
            out = str(work / "job.parquet")

            def to_files(df: Any) -> Any:
                return lambda: df.select("value").write.mode("overwrite").parquet(out)

            j_pulsar = timed_job(to_files(cut), args.runs)
            j_parquet = timed_job(to_files(parquet), args.runs)
            print(f"select('value').write.parquet, best of {args.runs}:")
            print(f"  from pulsar, {cut.rdd.getNumPartitions()} range(s): "
                  f"{n / j_pulsar:>12,.0f} rows/s ({j_pulsar:.2f} s)")
            print(f"  from parquet:            {n / j_parquet:>12,.0f} rows/s ({j_parquet:.2f} s)")

            t_write = write_rates(spark, url, parquet.select("value"), work, args.runs)
            print(f"RATIOS pulsar/parquet: noop {t_parquet / min(t_whole, t_cut):.2f}, "
                  f"write.parquet job {j_parquet / j_pulsar:.2f}; "
                  f"write {n / t_write:,.0f} rows/s; load "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            if args.ceiling:
                ceiling(spark, parquet, n, args.parts, args.runs, out)
            if args.stream_seconds > 0:
                streaming_latency(spark, url, args.rate, args.stream_seconds)
        finally:
            spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
