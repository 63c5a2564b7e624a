"""Topic compaction through the admin REST API, against a real broker: trigger and
status (Pulsar's LongRunningProcessStatus), 409 while one runs, an ERROR with its
reason, partitioned topics, 404s, and the compactionThreshold policy of namespaces and
topics (set, read, applied, removed, refused, kept across a restart)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import http
from official_client import quiet_logger

from magnetar.testing import EmbeddedBroker

NS_PATH = "/admin/v2/namespaces/public/default/compactionThreshold"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True, data_dir=tmp_path_factory.mktemp("compaction-api")) as b:
        yield b


def new_topic() -> str:
    return f"persistent://public/default/capi-{uuid.uuid4().hex[:10]}"


def rest(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def fill(client: pulsar.Client, topic: str, count: int, keys: int = 10) -> None:
    producer = client.create_producer(topic, block_if_queue_full=True)
    for i in range(count):
        producer.send_async(b"value-%d" % i, None, partition_key=f"k{i % keys}")
    producer.flush()
    producer.close()


def wait_status(broker: EmbeddedBroker, topic: str) -> dict[str, str]:
    deadline = time.monotonic() + 120
    while True:
        reply = http(broker, "GET", rest(topic) + "/compaction")
        assert reply.status == 200
        if reply.json()["status"] != "RUNNING" or time.monotonic() > deadline:
            return dict(reply.json())
        time.sleep(0.05)


# ------------------------------------------------------------ trigger and status


def test_status_goes_from_not_run_to_success(broker: EmbeddedBroker,
                                             client: pulsar.Client) -> None:
    topic = new_topic()
    fill(client, topic, 50)
    reply = http(broker, "GET", rest(topic) + "/compaction")
    assert (reply.status, reply.json()) == (200, {"status": "NOT_RUN", "lastError": ""})
    assert http(broker, "PUT", rest(topic) + "/compaction").status == 204
    assert wait_status(broker, topic) == {"status": "SUCCESS", "lastError": ""}
    reader = client.create_reader(topic, pulsar.MessageId.earliest,
                                         is_read_compacted=True)
    values = []
    while True:
        try:
            values.append(reader.read_next(1500).data())
        except pulsar.Timeout:
            break
    assert values == [b"value-%d" % i for i in range(40, 50)]
    # The compaction's subscription shows in the stats, as Pulsar's does.
    stats = http(broker, "GET", rest(topic) + "/stats").json()
    assert stats["subscriptions"]["__compaction"]["msgBacklog"] == 0


def test_a_second_trigger_while_running_is_a_conflict(
    broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    topic = new_topic()
    fill(client, topic, 30_000, keys=3000)
    assert http(broker, "PUT", rest(topic) + "/compaction").status == 204
    again = http(broker, "PUT", rest(topic) + "/compaction")
    assert again.status == 409
    assert "already in progress" in again.text
    assert wait_status(broker, topic)["status"] == "SUCCESS"
    assert http(broker, "PUT", rest(topic) + "/compaction").status == 204  # done: allowed
    assert wait_status(broker, topic)["status"] == "SUCCESS"


def test_a_failed_compaction_reports_error(broker: EmbeddedBroker,
                                           client: pulsar.Client) -> None:
    topic = new_topic()
    fill(client, topic, 10)
    service = broker.service
    assert service is not None
    # Where the compacted ledger goes, a file: the compactor cannot write there.
    topic_dir = service.store.topic_dir(topic)
    (topic_dir / "compacted").write_bytes(b"in the way")
    assert http(broker, "PUT", rest(topic) + "/compaction").status == 204
    status = wait_status(broker, topic)
    assert status["status"] == "ERROR"
    assert status["lastError"]
    (topic_dir / "compacted").unlink()
    assert http(broker, "PUT", rest(topic) + "/compaction").status == 204  # a retry works
    assert wait_status(broker, topic) == {"status": "SUCCESS", "lastError": ""}


def test_partitioned_topics_compact_every_partition(
    broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    topic = new_topic()
    assert http(broker, "PUT", rest(topic) + "/partitions", b"3").status == 204
    fill(client, topic, 60)
    assert http(broker, "PUT", rest(topic) + "/compaction").status == 204
    assert wait_status(broker, topic) == {"status": "SUCCESS", "lastError": ""}
    for index in range(3):
        partition = f"{topic}-partition-{index}"
        reply = http(broker, "GET", rest(partition) + "/compaction")
        assert reply.json()["status"] == "SUCCESS"


def test_unknown_topics_are_404(broker: EmbeddedBroker) -> None:
    missing = new_topic()
    assert http(broker, "PUT", rest(missing) + "/compaction").status == 404
    assert http(broker, "GET", rest(missing) + "/compaction").status == 404
    assert http(broker, "GET", rest(missing) + "/compactionThreshold").status == 404


# ------------------------------------------------------------ compactionThreshold


def test_namespace_threshold_set_read_removed(broker: EmbeddedBroker) -> None:
    assert http(broker, "GET", NS_PATH).status == 204  # unset, as Pulsar answers
    assert http(broker, "POST", NS_PATH, b"104857600").status == 204
    reply = http(broker, "GET", NS_PATH)
    assert (reply.status, reply.json()) == (200, 104857600)
    try:
        assert http(broker, "POST", NS_PATH, b"-1").status == 412
        assert http(broker, "POST", NS_PATH, b"lots").status == 400
        assert http(broker, "GET", NS_PATH).json() == 104857600  # refusals changed nothing
    finally:
        assert http(broker, "DELETE", NS_PATH).status == 204
    assert http(broker, "GET", NS_PATH).status == 204


def test_topic_threshold_overrides_the_namespace(broker: EmbeddedBroker,
                                                 client: pulsar.Client) -> None:
    topic = new_topic()
    fill(client, topic, 1)
    path = rest(topic) + "/compactionThreshold"
    assert http(broker, "GET", path).status == 204
    assert http(broker, "GET", path + "?applied=true").json() == 0  # the broker's: off
    assert http(broker, "POST", NS_PATH, b"5000").status == 204
    try:
        assert http(broker, "GET", path + "?applied=true").json() == 5000
        assert http(broker, "POST", path, b"0").status == 204  # off for this topic
        assert http(broker, "GET", path).json() == 0
        assert http(broker, "GET", path + "?applied=true").json() == 0
        assert http(broker, "POST", path, b"-5").status == 412
        assert http(broker, "DELETE", path).status == 204
        assert http(broker, "GET", path + "?applied=true").json() == 5000
    finally:
        http(broker, "DELETE", NS_PATH)


def test_a_threshold_creates_the_compaction_cursor(broker: EmbeddedBroker,
                                                   client: pulsar.Client) -> None:
    """Pulsar's preCreateSubscriptionForCompactionIfNeeded: with a threshold in force
    the compactor's cursor exists before any compaction, holding the backlog."""
    topic = new_topic()
    fill(client, topic, 3)
    stats = http(broker, "GET", rest(topic) + "/stats").json()
    assert "__compaction" not in stats["subscriptions"]
    assert http(broker, "POST", rest(topic) + "/compactionThreshold", b"1000000").status == 204
    stats = http(broker, "GET", rest(topic) + "/stats").json()
    assert stats["subscriptions"]["__compaction"]["msgBacklog"] == 3


def test_thresholds_survive_a_restart(tmp_path: Path) -> None:
    topic = new_topic()
    with EmbeddedBroker(admin=True, data_dir=tmp_path) as broker:
        client = pulsar.Client(broker.service_url,
                               logger=quiet_logger())
        fill(client, topic, 1)
        client.close()
        assert http(broker, "POST", rest(topic) + "/compactionThreshold", b"1234").status == 204
        assert http(broker, "POST", NS_PATH, b"4321").status == 204
        broker.restart()
        assert http(broker, "GET", rest(topic) + "/compactionThreshold").json() == 1234
        assert http(broker, "GET", NS_PATH).json() == 4321
