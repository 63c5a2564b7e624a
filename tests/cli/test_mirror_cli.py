"""``magnetar mirror`` as a subprocess, from one real magnetar broker to another (the
target with deduplication on, as a migration should have it). The official client
writes the source and reads both sides."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from official_client import quiet_logger
from pulsar.schema import JsonSchema, Record, String

from magnetar.commands.rest import AdminError, RestClient
from magnetar.testing import EmbeddedBroker

from .helpers import MAGNETAR, TIMEOUT, magnetar

Row = tuple[int, bytes, str, str, dict[str, str], int]


@pytest.fixture(scope="module")
def source() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True) as broker:
        yield broker


@pytest.fixture(scope="module")
def target() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True, broker_deduplication_enabled=True) as broker:
        yield broker


def _rest(broker: EmbeddedBroker) -> RestClient:
    assert broker.admin_url is not None
    return RestClient(broker.admin_url)


@pytest.fixture
def namespace(source: EmbeddedBroker) -> str:
    """A namespace of the source's own, which the target does not have."""
    name = f"public/m-{uuid.uuid4().hex[:10]}"
    _rest(source).call("PUT", f"/admin/v2/namespaces/{name}")
    return name


def _partitioned(broker: EmbeddedBroker, topic: str, count: int) -> None:
    _rest(broker).call("PUT", f"/admin/v2/persistent/{topic}/partitions", count)


def _mirror_args(source: EmbeddedBroker, target: EmbeddedBroker, *args: str,
                 to_admin: bool = True) -> list[str]:
    assert source.admin_url is not None and target.admin_url is not None
    return ["mirror", "--service-url", source.service_url, "--admin-url", source.admin_url,
            "--to", target.service_url,
            *(["--to-admin-url", target.admin_url] if to_admin else []), *args]


def _rows(broker: EmbeddedBroker, topic: str, count: int) -> list[Row]:
    """Every message of ``topic`` from the earliest, as (partition, payload, key,
    ordering key, properties, event time), in each partition's order; ``count`` of
    them and no more."""
    client = pulsar.Client(broker.service_url,
                           logger=quiet_logger())
    try:
        consumer = client.subscribe(topic, f"check-{uuid.uuid4().hex[:8]}",
                                    initial_position=pulsar.InitialPosition.Earliest)
        rows = []
        for _ in range(count):
            m = consumer.receive(timeout_millis=20_000)
            rows.append((m.message_id().partition(), m.data(), m.partition_key(),
                         m.ordering_key(), m.properties(), m.event_timestamp()))
            consumer.acknowledge(m)
        with pytest.raises(pulsar.Timeout):  # an extra one would be prefetched by now
            consumer.receive(timeout_millis=500)
        return sorted(rows, key=lambda row: row[0])  # stable: each partition's order kept
    finally:
        client.close()


def _produce(broker: EmbeddedBroker, topic: str, start: int, count: int,
             batching: bool = False) -> None:
    client = pulsar.Client(broker.service_url,
                           logger=quiet_logger())
    # The source keeps what the mirror acknowledges only while another subscription
    # holds it (no retention), for _rows to compare with.
    client.subscribe(topic, "keep").close()
    producer = client.create_producer(topic, batching_enabled=batching,
                                      batching_max_publish_delay_ms=5,
                                      block_if_queue_full=True)
    failed: list[pulsar.Result] = []
    for i in range(start, start + count):
        producer.send_async(f"m{i}".encode(),
                            lambda result, _id: failed.append(result)
                            if result != pulsar.Result.Ok else None,
                            partition_key=f"k{i % 7}", ordering_key=f"o{i % 3}",
                            properties={"i": str(i)}, event_timestamp=1_700_000_000_000 + i)
    producer.flush()
    client.close()
    assert not failed


class Source(Record):
    name = String()


def _source_v2() -> type[Record]:
    """``Source`` with a field added, which FULL compatibility allows (a default)."""

    class Source(Record):  # the same record name: Avro resolution compares names
        name = String()
        city = String(required_default=True)

    return Source


def test_mirror_keeps_keys_properties_event_times_partitions_and_schemas(
    source: EmbeddedBroker, target: EmbeddedBroker, namespace: str
) -> None:
    parted, plain, typed = (f"persistent://{namespace}/{n}" for n in ("parted", "plain", "typed"))
    _partitioned(source, f"{namespace}/parted", 3)
    _produce(source, parted, 0, 60)
    _produce(source, plain, 0, 200, batching=True)
    client = pulsar.Client(source.service_url,
                           logger=quiet_logger())
    first = client.create_producer(typed, schema=JsonSchema(Source))
    first.send(Source(name="ada"), partition_key="a")
    first.close()
    v2 = _source_v2()
    second = client.create_producer(typed, schema=JsonSchema(v2))
    second.send(v2(name="bob", city="oslo"), partition_key="b")
    client.close()

    done = magnetar(*_mirror_args(source, target, "--namespace", namespace))

    assert done.returncode == 0, done.stderr
    assert f"{parted} (3 partitions): 60 copied, 0 already there" in done.stdout
    assert f"{plain}: 200 copied, 0 already there" in done.stdout
    assert "262 messages copied, 0 already on the target, 3 topics" in done.stdout
    assert _rest(target).call("GET", f"/admin/v2/persistent/{namespace}/parted/partitions"
                              ).json() == {"partitions": 3}
    for topic, count in ((parted, 60), (plain, 200)):
        assert _rows(target, topic, count) == _rows(source, topic, count)
    # Each schema version came over, and each message names the version it was
    # written with.
    path = f"/admin/v2/schemas/{namespace}/typed/schemas"
    versions = [json.loads(v["data"]) for v in _rest(target).call("GET", path).json()[
        "getSchemaResponses"]]
    assert versions == [json.loads(v["data"]) for v in _rest(source).call("GET", path).json()[
        "getSchemaResponses"]]
    assert {f["name"] for f in versions[1]["fields"]} == {"city", "name"}
    reader = pulsar.Client(target.service_url,
                           logger=quiet_logger())
    consumer = reader.subscribe(typed, "check", schema=JsonSchema(v2),
                                initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(timeout_millis=20_000) for _ in range(2)]
    assert [(m.value().name, m.value().city, m.partition_key()) for m in got] == [
        ("ada", None, "a"), ("bob", "oslo", "b")]
    reader.close()


def test_mirror_again_from_the_start_stores_nothing_twice(
    source: EmbeddedBroker, target: EmbeddedBroker, namespace: str
) -> None:
    topic = f"persistent://{namespace}/again"
    _partitioned(source, f"{namespace}/again", 2)
    _produce(source, topic, 0, 300, batching=True)
    assert magnetar(*_mirror_args(source, target, "--topic", topic)).returncode == 0
    # The subscription back at the start: everything is read and offered again.
    _rest(source).call("POST", f"/admin/v2/persistent/{namespace}/again/subscription/"
                       "magnetar-mirror/resetcursor/0")

    done = magnetar(*_mirror_args(source, target, "--topic", topic))

    assert done.returncode == 0, done.stderr
    assert "0 messages copied, 300 already on the target" in done.stdout
    assert _rows(target, topic, 300) == _rows(source, topic, 300)


def _copied_on_target(target: EmbeddedBroker, namespace: str, local: str) -> int:
    try:
        stats: Any = _rest(target).call(
            "GET", f"/admin/v2/persistent/{namespace}/{local}/partitioned-stats").json()
    except AdminError:  # not created yet
        return 0
    return int(stats.get("msgInCounter", 0))


def test_mirror_killed_midway_resumes_with_nothing_lost_or_duplicated(
    source: EmbeddedBroker, target: EmbeddedBroker, namespace: str
) -> None:
    topic = f"persistent://{namespace}/moving"
    _partitioned(source, f"{namespace}/moving", 3)
    _produce(source, topic, 0, 6000)
    follow = subprocess.Popen([*MAGNETAR, *_mirror_args(source, target, "--topic", topic,
                                                        "--follow")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while _copied_on_target(target, namespace, "moving") < 1000:
            assert follow.poll() is None, follow.communicate()
            assert time.monotonic() < deadline, "the mirror copied nothing"
            time.sleep(0.02)
    finally:
        follow.kill()  # mid-way: sends in flight, acks not yet sent
        follow.communicate()
    _produce(source, topic, 6000, 1000)

    # Resumed, it copies the rest; what it had sent but not acknowledged is dropped.
    done = magnetar(*_mirror_args(source, target, "--topic", topic))
    assert done.returncode == 0, done.stderr
    assert _rows(target, topic, 7000) == _rows(source, topic, 7000)

    # Then it tails: new messages come over until SIGINT, which prints the summary.
    tail = subprocess.Popen([*MAGNETAR, *_mirror_args(source, target, "--topic", topic,
                                                      "--follow")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _produce(source, topic, 7000, 500)
        deadline = time.monotonic() + TIMEOUT
        while _copied_on_target(target, namespace, "moving") < 7500:
            assert tail.poll() is None, tail.communicate()
            assert time.monotonic() < deadline, "the mirror did not tail"
            time.sleep(0.02)
        tail.send_signal(signal.SIGINT)
        out, err = tail.communicate(timeout=TIMEOUT)
    finally:
        if tail.poll() is None:
            tail.kill()
    assert tail.returncode == 0, err
    assert f"{topic} (3 partitions): 500 copied, 0 already there" in out
    assert _rows(target, topic, 7500) == _rows(source, topic, 7500)


def test_mirror_following_a_namespace_copies_its_new_topics(
    source: EmbeddedBroker, target: EmbeddedBroker, namespace: str
) -> None:
    _produce(source, f"persistent://{namespace}/first", 0, 10)
    tail = subprocess.Popen([*MAGNETAR, *_mirror_args(source, target, "--namespace", namespace,
                                                      "--follow", "--discovery-interval", "0.2")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _produce(source, f"persistent://{namespace}/later", 0, 20)
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                stats: Any = _rest(target).call(
                    "GET", f"/admin/v2/persistent/{namespace}/later/stats").json()
            except AdminError:
                stats = {}
            if stats.get("msgInCounter", 0) >= 20:
                break
            assert tail.poll() is None, tail.communicate()
            assert time.monotonic() < deadline, "the new topic was not copied"
            time.sleep(0.02)
        tail.send_signal(signal.SIGTERM)
        out, err = tail.communicate(timeout=TIMEOUT)
    finally:
        if tail.poll() is None:
            tail.kill()
    assert tail.returncode == 0, err
    assert "30 messages copied, 0 already on the target, 2 topics" in out
    assert _rows(target, f"persistent://{namespace}/later", 20) == _rows(
        source, f"persistent://{namespace}/later", 20)


def test_mirror_needs_the_targets_partitions_without_its_admin_url(
    source: EmbeddedBroker, target: EmbeddedBroker, namespace: str
) -> None:
    _partitioned(source, f"{namespace}/wide", 2)
    _rest(target).call("PUT", f"/admin/v2/namespaces/{namespace}")
    done = magnetar(*_mirror_args(source, target, "--namespace", namespace, to_admin=False))
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"magnetar mirror: persistent://{namespace}/wide has 2 partitions on the source and "
        "0 on the target: create it there so, or give --to-admin-url")


@pytest.mark.parametrize(("args", "code", "words"), [
    (["--namespace", "public"], 2, "namespace 'public' is not tenant/namespace"),
    (["--topic", "public/default/x-partition-1"], 2, "name the partitioned topic"),
    (["--topic", "public/default/no-such-topic"], 1, "no such topic on the source"),
])
def test_mirror_errors_are_one_line(source: EmbeddedBroker, target: EmbeddedBroker,
                                    args: list[str], code: int, words: str) -> None:
    done = magnetar(*_mirror_args(source, target, *args))
    assert done.returncode == code
    assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr


def test_mirror_unreachable_source_is_exit_1(target: EmbeddedBroker) -> None:
    done = magnetar("mirror", "--admin-url", "http://127.0.0.1:9", "--to", target.service_url)
    assert done.returncode == 1
    assert done.stderr.startswith("magnetar mirror: source admin API, GET /admin/v2/tenants: "
                                  "cannot reach http://127.0.0.1:9")


def test_mirror_help_has_examples() -> None:
    done = magnetar("mirror", "--help")
    assert done.returncode == 0
    assert "examples:" in done.stdout and "--follow" in done.stdout


def test_mirror_unreachable_target_is_exit_1(source: EmbeddedBroker) -> None:
    _produce(source, f"persistent://public/default/t-{uuid.uuid4().hex[:8]}", 0, 1)
    assert source.admin_url is not None
    done = magnetar("mirror", "--service-url", source.service_url, "--admin-url",
                    source.admin_url, "--to", "pulsar://127.0.0.1:9")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("magnetar mirror: ConnectError: cannot connect to 127.0.0.1:9")
    assert done.stderr.count("\n") == 1


def test_mirror_takes_the_source_admin_url_and_service_url_from_the_environment(
    source: EmbeddedBroker, target: EmbeddedBroker, namespace: str
) -> None:
    topic = f"persistent://{namespace}/from-env"
    _produce(source, topic, 0, 20)
    assert source.admin_url is not None and target.admin_url is not None

    done = magnetar("mirror", "--to", target.service_url, "--to-admin-url", target.admin_url,
                    "--topic", topic,
                    env={"MAGNETAR_ADMIN_URL": source.admin_url,
                         "MAGNETAR_SERVICE_URL": source.service_url})

    assert done.returncode == 0, done.stderr
    assert _rows(target, topic, 20) == _rows(source, topic, 20)
