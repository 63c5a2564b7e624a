"""Schema-aware columns, as pulsar-spark's: a topic's Avro, JSON or primitive schema
read as columns and written from them, on a local Spark session against a real broker,
checked against the official client's schema classes on the same topics."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

import pulsar
import pytest
from pulsar.schema import Array, AvroSchema, Integer, JsonSchema, Record, String, StringSchema

from magnetar.client import Client, SchemaInfo
from magnetar.testing import EmbeddedBroker

pytestmark = pytest.mark.timeout(600)

META = ["__key", "__topic", "__messageId", "__publishTime", "__eventTime",
        "__messageProperties"]


class User(Record):
    name = String()
    age = Integer()
    tags = Array(String())


USERS = [User(name="ada", age=36, tags=["math"]), User(name="bob", age=None, tags=[]),
         User(name="cy", age=7, tags=["a", "b"])]


def new_topic(label: str) -> str:
    return f"persistent://public/default/schema-{label}-{uuid.uuid4().hex[:8]}"


def read(spark: Any, broker: EmbeddedBroker, topic: str, **options: str) -> Any:
    return (spark.read.format("pulsar").option("service.url", broker.service_url)
            .option("topic", topic).options(**options).load())


def write(df: Any, broker: EmbeddedBroker, topic: str) -> None:
    (df.write.format("pulsar").option("service.url", broker.service_url)
     .option("topic", topic).mode("append").save())


async def schema_of(broker: EmbeddedBroker, topic: str) -> SchemaInfo | None:
    async with Client(broker.service_url) as client:
        return await client.get_schema(topic)


def as_tuples(users: list[Any]) -> list[tuple[Any, ...]]:
    return [(u.name, u.age, list(u.tags)) for u in users]


def received(client: pulsar.Client, topic: str, schema: Any, n: int) -> list[Any]:
    consumer = client.subscribe(topic, "check", schema=schema,
                                initial_position=pulsar.InitialPosition.Earliest)
    try:
        return [consumer.receive(10_000).value() for _ in range(n)]
    finally:
        consumer.close()


@pytest.mark.parametrize("kind", [AvroSchema, JsonSchema])
def test_a_record_topic_reads_as_its_fields(
    kind: Any, spark: Any, spark_broker: EmbeddedBroker,
    client_factory: Callable[..., pulsar.Client],
) -> None:
    topic = new_topic(kind.__name__)
    producer = client_factory(spark_broker.service_url).create_producer(
        topic, schema=kind(User), batching_enabled=True)
    for user in USERS:
        producer.send_async(user, None, partition_key="k")
    producer.flush()

    df = read(spark, spark_broker, topic)
    assert df.columns == ["name", "age", "tags", *META]
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert (types["name"], types["age"], types["tags"]) == ("string", "int", "array<string>")
    rows = df.orderBy("__messageId").collect()
    assert [(r["name"], r["age"], r["tags"]) for r in rows] == as_tuples(USERS)
    assert {bytes(r["__key"]) for r in rows} == {b"k"}
    assert {r["__topic"] for r in rows} == {topic}


@pytest.mark.parametrize("kind", [AvroSchema, JsonSchema])
def test_a_write_encodes_the_columns_with_the_topics_schema(
    kind: Any, spark: Any, spark_broker: EmbeddedBroker,
    client_factory: Callable[..., pulsar.Client],
) -> None:
    topic = new_topic(kind.__name__ + "-w")
    official = client_factory(spark_broker.service_url)
    official.create_producer(topic, schema=kind(User)).close()  # the topic's schema

    df = spark.createDataFrame(as_tuples(USERS), "name string, age int, tags array<string>")
    write(df.withColumn("__key", df["name"]), spark_broker, topic)

    # Two tasks write at once: the order between them is not kept.
    values = received(official, topic, kind(User), len(USERS))
    assert sorted(as_tuples(values)) == as_tuples(USERS)
    # ... and Spark reads back what it wrote.
    back = read(spark, spark_broker, topic).orderBy("name").collect()
    assert [(r["name"], r["age"], r["tags"]) for r in back] == as_tuples(USERS)
    assert [bytes(r["__key"]).decode() for r in back] == [u.name for u in USERS]


def test_a_column_the_schema_lacks_is_refused(
    spark: Any, spark_broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client],
) -> None:
    topic = new_topic("extra")
    client_factory(spark_broker.service_url).create_producer(
        topic, schema=AvroSchema(User)).close()
    df = spark.createDataFrame([("ada", 36, "x")], "name string, age int, city string")
    with pytest.raises(Exception, match="city"):
        write(df, spark_broker, topic)


def test_a_topic_without_schema_gets_an_avro_one_from_the_columns(
    spark: Any, spark_broker: EmbeddedBroker,
) -> None:
    topic = new_topic("new")
    df = spark.createDataFrame([("ada", 36), ("bob", None)], "name string, age int")
    write(df, spark_broker, topic)
    info = asyncio.run(schema_of(spark_broker, topic))
    assert info is not None and info.type == "AVRO"
    assert [f["name"] for f in json.loads(info.schema)["fields"]] == ["name", "age"]
    back = read(spark, spark_broker, topic).orderBy("name").collect()
    assert [(r["name"], r["age"]) for r in back] == [("ada", 36), ("bob", None)]
    # A second write whose columns the schema lacks is refused.
    with pytest.raises(Exception, match="city"):
        write(spark.createDataFrame([("x",)], "city string"), spark_broker, topic)


def test_primitive_topics(spark: Any, spark_broker: EmbeddedBroker,
                          client_factory: Callable[..., pulsar.Client]) -> None:
    text = new_topic("string")
    official = client_factory(spark_broker.service_url)
    producer = official.create_producer(text, schema=StringSchema())
    for word in ("héllo", "world"):
        producer.send(word)
    df = read(spark, spark_broker, text)
    assert df.schema["value"].dataType.simpleString() == "string"
    assert sorted(r["value"] for r in df.collect()) == ["héllo", "world"]
    write(spark.createDataFrame([("again",)], "value string"), spark_broker, text)
    assert sorted(received(official, text, StringSchema(), 3)) == ["again", "héllo", "world"]

    longs = new_topic("int64")
    write(spark.createDataFrame([(1,), (-(2**40),)], "value long"), spark_broker, longs)
    df = read(spark, spark_broker, longs)
    assert df.schema["value"].dataType.simpleString() == "bigint"
    assert sorted(r["value"] for r in df.collect()) == [-(2**40), 1]


def test_different_schemas_are_an_error_unless_allowed(
    spark: Any, spark_broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client],
) -> None:
    avro, plain = new_topic("mix-a"), new_topic("mix-b")
    official = client_factory(spark_broker.service_url)
    official.create_producer(avro, schema=AvroSchema(User)).send(USERS[0])
    official.create_producer(plain).send(b"raw")
    both = (spark.read.format("pulsar").option("service.url", spark_broker.service_url)
            .option("topics", f"{avro},{plain}"))
    with pytest.raises(Exception, match="allowDifferentTopicSchemas"):
        both.load().collect()
    rows = both.option("allowDifferentTopicSchemas", "true").load().collect()
    assert len(rows) == 2 and "name" not in rows[0].asDict()
