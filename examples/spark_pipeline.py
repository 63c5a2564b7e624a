"""A streaming pipeline on Spark: JSON events from a topic, per-user activity per minute
of event time, written to another topic and to Parquet.

    python examples/generate_events.py            # fills the topic 'events'
    python examples/spark_pipeline.py             # reads it, writes 'user-activity'

The query reads ``--input`` from its earliest message, parses each event's JSON, and
counts events and sums amounts per user and one-minute window of event time, with a
watermark of ``--watermark`` (events later than that behind the newest one seen are
dropped, and a window is final, and written, once the watermark has passed its end).
Each final window goes to the topic ``--output`` as JSON keyed by user, and to Parquet
files under ``--parquet``.  By default the query processes what is in the topic and
stops (Trigger.AvailableNow); ``--follow`` keeps it running, a micro-batch every few
seconds.  Checkpoints live under ``--checkpoint``: run it again and it resumes where
it stopped, with the windows it still had open.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def build(spark: Any, service_url: str, source: str, watermark: str) -> Any:
    """The per-user, per-minute activity of the events in ``source``."""
    from pyspark.sql import functions as F

    schema = "user string, action string, amount double, ts long"
    events = (
        spark.readStream.format("pulsar")
        .option("service.url", service_url)
        .option("topic", source)
        .option("startingOffsets", "earliest")
        .option("maxEntriesPerTrigger", "500")
        .load()
    )
    parsed = (
        events.select(F.from_json(F.col("value").cast("string"), schema).alias("e"),
                      F.col("__eventTime"))
        .select("e.*", F.coalesce(F.col("__eventTime"),
                                  F.timestamp_millis(F.col("ts"))).alias("event_time"))
        .where(F.col("user").isNotNull())
    )
    return (
        parsed.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", "1 minute"), F.col("user"))
        .agg(F.count(F.lit(1)).alias("events"),
             F.sum(F.when(F.col("action") == "buy", 1).otherwise(0)).alias("purchases"),
             F.round(F.sum("amount"), 2).alias("amount"))
        .select(F.col("window.start").alias("window_start"),
                F.col("window.end").alias("window_end"), "user", "events", "purchases",
                "amount")
    )


def start(activity: Any, service_url: str, output: str, parquet: str, checkpoint: str,
          follow: bool) -> list[Any]:
    """Two queries on the same activity: to a topic, and to Parquet files."""
    from pyspark.sql import functions as F

    def trigger(writer: Any) -> Any:
        return writer.trigger(processingTime="5 seconds") if follow else writer.trigger(
            availableNow=True)

    as_messages = activity.select(
        F.to_json(F.struct(*activity.columns)).alias("value"),
        F.col("user").alias("__key"),
        F.col("window_end").alias("__eventTime"),
    )
    to_topic = trigger(
        as_messages.writeStream.format("pulsar")
        .option("service.url", service_url)
        .option("topic", output)
        .option("checkpointLocation", os.path.join(checkpoint, "topic"))
        .outputMode("append")
    ).start()
    to_files = trigger(
        activity.writeStream.format("parquet")
        .option("path", parquet)
        .option("checkpointLocation", os.path.join(checkpoint, "parquet"))
        .outputMode("append")
    ).start()
    return [to_topic, to_files]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument("--input", default="events")
    parser.add_argument("--output", default="user-activity")
    parser.add_argument("--parquet", default="./spark-out/user-activity")
    parser.add_argument("--checkpoint", default="./spark-out/checkpoints")
    parser.add_argument("--watermark", default="2 minutes")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--follow", action="store_true", help="keep running")
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    import magnetar.spark

    # Spark's Python workers must run this interpreter, which has magnetar installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(args.master).appName("magnetar-spark-pipeline")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    magnetar.spark.register(spark)
    activity = build(spark, args.service_url, args.input, args.watermark)
    queries = start(activity, args.service_url, args.output, args.parquet, args.checkpoint,
                    args.follow)
    try:
        for query in queries:
            query.awaitTermination()
    except KeyboardInterrupt:
        for query in queries:
            query.stop()
    written = spark.read.parquet(args.parquet) if os.path.isdir(args.parquet) else None
    if written is not None:
        print(f"{written.count()} final windows in {args.parquet}; the latest:")
        written.orderBy("window_start", "user", ascending=[False, True]).show(8, False)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
