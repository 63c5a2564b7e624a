"""Retention, message TTL and backlog quotas enforced by a real broker, seen by the
official client: what a reader or a new subscription can still read, what a producer
is told, what a slow subscription is left with, and the stats that show it. Policies
are set through the admin REST API; the checks run every fraction of a second here
(settings), and retention's minutes pass by moving the enforcer's clock."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.client import Client
from magnetar.client.errors import ProducerBlockedQuotaExceeded
from magnetar.testing import EmbeddedBroker

from .helpers import drain, receive_n

FAST_CHECKS: dict[str, Any] = {
    "admin": True,
    "retention_check_interval": 0.1,
    "cursor_flush_interval": 0.05,
    "message_expiry_check_interval_in_seconds": 0.2,
    "backlog_quota_check_interval_in_seconds": 0.2,
}
WAIT = 30.0  # seconds a condition has to come true (a busy machine is slow, not wrong)


def new_topic() -> str:
    return f"persistent://public/default/pol-{uuid.uuid4().hex[:10]}"


def rest(broker: EmbeddedBroker, method: str, path: str, body: object = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{broker.admin_url}{path}", data=data, method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    return json.loads(text) if text else None


def topic_path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def stats(broker: EmbeddedBroker, topic: str) -> dict[str, Any]:
    result: dict[str, Any] = rest(broker, "GET", topic_path(topic) + "/stats")
    return result


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {WAIT:.0f} s: {what}")
        time.sleep(0.05)


def read_all(client: pulsar.Client, topic: str) -> list[bytes]:
    """Everything a reader at the earliest position gets."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_millis=10_000).data())
    reader.close()
    return out


def payloads(count: int, size: int) -> list[bytes]:
    return [b"%05d:" % index + b"x" * size for index in range(count)]


# ------------------------------------------------------------------ retention


def test_time_retention_keeps_acked_messages_readable_until_they_are_old(
    client_factory: Callable[..., pulsar.Client],
) -> None:
    with EmbeddedBroker(segment_max_bytes=4096, **FAST_CHECKS) as broker:
        client = client_factory(broker.service_url)
        topic = new_topic()
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        rest(broker, "POST", topic_path(topic) + "/retention",
             {"retentionTimeInMinutes": 1, "retentionSizeInMB": -1})
        sent = payloads(60, 300)  # about 15 segments
        for payload in sent:
            producer.send(payload)
        receive_n(consumer, 60)  # all acknowledged
        assert broker.service is not None
        ledger = broker.service.topics[topic].ledger
        wait_until(lambda: stats(broker, topic)["subscriptions"]["s"]["msgBacklog"] == 0,
                   "the acks are in")
        time.sleep(1.0)  # ten retention passes: under a minute old, nothing goes
        assert ledger.first_entry_id == 0
        assert read_all(client, topic) == sent

        # Two minutes later (the enforcer's clock), the sealed segments are past it.
        policies = broker.service.topic_policies
        policies.clock = lambda: time.time() + 120
        wait_until(lambda: ledger.first_entry_id > 0, "retention removed the old segments")
        first = ledger.first_entry_id
        assert read_all(client, topic) == sent[first:]  # the active segment stays
        assert len(ledger.sealed_segments()) == 0


def test_size_retention_keeps_the_newest_megabyte_of_acked_messages(
    client_factory: Callable[..., pulsar.Client],
) -> None:
    with EmbeddedBroker(segment_max_bytes=64 * 1024, **FAST_CHECKS) as broker:
        client = client_factory(broker.service_url)
        topic = new_topic()
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        rest(broker, "POST", topic_path(topic) + "/retention",
             {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1})
        sent = payloads(300, 10_000)  # about 3 MB
        for payload in sent:
            producer.send_async(payload, None)
        producer.flush()
        receive_n(consumer, 300)
        wait_until(lambda: stats(broker, topic)["storageSize"] < 2 * 1024 * 1024,
                   "retention trimmed the topic towards 1 MB")
        time.sleep(0.5)  # more passes: it stops at the limit
        size = stats(broker, topic)["storageSize"]
        assert 1024 * 1024 <= size < 1024 * 1024 + 64 * 1024 + 10_100
        kept = read_all(client, topic)
        assert kept == sent[len(sent) - len(kept):]  # the newest ones, none missing
        assert 100 <= len(kept) < 120


def test_a_topic_without_subscriptions_keeps_only_what_retention_keeps(
    client_factory: Callable[..., pulsar.Client],
) -> None:
    # Pulsar: with no subscription, every message is consumed as far as retention is
    # concerned; the default (0, 0) keeps none of the sealed segments.
    with EmbeddedBroker(segment_max_bytes=4096, **FAST_CHECKS) as broker:
        client = client_factory(broker.service_url)
        plain, retained = new_topic(), new_topic()
        sent = payloads(40, 300)
        for topic in (plain, retained):
            producer = client.create_producer(topic)
            if topic == retained:
                rest(broker, "POST", topic_path(topic) + "/retention",
                     {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
            for payload in sent:
                producer.send(payload)
        assert broker.service is not None
        plain_ledger = broker.service.topics[plain].ledger
        wait_until(lambda: plain_ledger.first_entry_id > 0, "the plain topic was trimmed")
        time.sleep(0.5)  # passes over the retained one too
        assert broker.service.topics[retained].ledger.first_entry_id == 0
        assert read_all(client, retained) == sent
        assert read_all(client, plain) == sent[plain_ledger.first_entry_id:]


# ------------------------------------------------------------------ TTL


def test_message_ttl_expires_unacknowledged_messages(
    client_factory: Callable[..., pulsar.Client],
) -> None:
    with EmbeddedBroker(**FAST_CHECKS) as broker:
        client = client_factory(broker.service_url)
        topic = new_topic()
        client.subscribe(topic, "s").close()  # the subscription stays, with a backlog
        producer = client.create_producer(topic)
        for index in range(10):
            producer.send(b"old-%d" % index)
        assert stats(broker, topic)["subscriptions"]["s"]["msgBacklog"] == 10
        rest(broker, "POST", topic_path(topic) + "/messageTTL?messageTTL=1")
        wait_until(lambda: stats(broker, topic)["subscriptions"]["s"]["msgBacklog"] == 0,
                   "the TTL expired the backlog")
        sub = stats(broker, topic)["subscriptions"]["s"]
        assert sub["totalMsgExpired"] == 10
        assert sub["lastExpireTimestamp"] > 0
        assert sub["backlogSize"] == 0
        # Pulsar's msgRateExpired: the expiry seen by the next rate sample.
        wait_until(lambda: stats(broker, topic)["subscriptions"]["s"]["msgRateExpired"] > 0,
                   "an expiry rate")
        consumer = client.subscribe(topic, "s")
        producer.send(b"fresh")
        assert consumer.receive(timeout_millis=10_000).data() == b"fresh"  # nothing older


# ------------------------------------------------------------------ backlog quotas


def backlog_over_quota(
    broker: EmbeddedBroker, client: pulsar.Client, policy: str
) -> tuple[str, pulsar.Consumer, pulsar.Producer]:
    """A topic with an 8 KB size quota and a consumer that has acknowledged none of
    20 KB; returns once the quota check has detached the producer."""
    topic = new_topic()
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, send_timeout_millis=60_000)
    rest(broker, "POST", topic_path(topic) + "/backlogQuota?backlogQuotaType=destination_storage",
         {"limitSize": 8192, "limitTime": -1, "policy": policy})
    for index in range(20):
        producer.send(b"%02d" % index + b"x" * 1000)
    wait_until(lambda: not stats(broker, topic)["publishers"], "the producer was detached")
    doc = stats(broker, topic)
    assert doc["backlogSize"] >= 20_000 and doc["backlogQuotaLimitSize"] == 8192
    return topic, consumer, producer


def test_producer_exception_fails_new_producers_and_sends(
    client_factory: Callable[..., pulsar.Client],
) -> None:
    with EmbeddedBroker(**FAST_CHECKS) as broker:
        client = client_factory(broker.service_url)
        topic, consumer, producer = backlog_over_quota(broker, client, "producer_exception")
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            client.create_producer(topic)
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            producer.send(b"refused")
        assert stats(broker, topic)["msgInCounter"] == 20
        receive_n(consumer, 20)  # the backlog is gone: producers are welcome again
        wait_until(lambda: stats(broker, topic)["backlogSize"] == 0, "the acks are in")
        client.create_producer(topic).send(b"welcome")
        assert consumer.receive(timeout_millis=10_000).data() == b"welcome"


def test_producer_request_hold_holds_sends_until_the_backlog_shrinks(
    client_factory: Callable[..., pulsar.Client],
) -> None:
    with EmbeddedBroker(**FAST_CHECKS) as broker:
        client = client_factory(broker.service_url)
        topic, consumer, producer = backlog_over_quota(broker, client, "producer_request_hold")
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededError):
            client.create_producer(topic)
        results: list[pulsar.Result] = []
        producer.send_async(b"held", lambda result, _: results.append(result))
        time.sleep(1.0)
        assert results == []  # held by the client, not stored
        assert stats(broker, topic)["msgInCounter"] == 20
        received = receive_n(consumer, 20)
        assert [msg.data()[:2] for msg in received] == [b"%02d" % i for i in range(20)]
        wait_until(lambda: bool(results), "the held send went through")
        assert results == [pulsar.Result.Ok]
        assert consumer.receive(timeout_millis=10_000).data() == b"held"


def test_consumer_backlog_eviction_moves_the_slow_subscription_on(
    client_factory: Callable[..., pulsar.Client],
) -> None:
    with EmbeddedBroker(**FAST_CHECKS) as broker:
        client = client_factory(broker.service_url)
        topic = new_topic()
        client.subscribe(topic, "slow").close()
        fast = client.subscribe(topic, "fast")
        producer = client.create_producer(topic)
        rest(broker, "POST", topic_path(topic) + "/backlogQuota",
             {"limitSize": 10_240, "policy": "consumer_backlog_eviction"})
        sent = [b"%02d" % index + b"x" * 1000 for index in range(50)]
        for payload in sent:
            producer.send(payload)
        assert [msg.data() for msg in receive_n(fast, 50)] == sent

        def slow_backlog() -> int:
            size: int = stats(broker, topic)["subscriptions"]["slow"]["backlogSize"]
            return size

        wait_until(lambda: slow_backlog() <= 0.9 * 10_240, "the slow subscription was evicted")
        producer.send(b"still welcome")  # eviction does not touch producers
        slow = client.subscribe(topic, "slow")
        got = [msg.data() for msg in drain(slow)]
        assert got[-1] == b"still welcome"
        kept = got[:-1]
        assert 0 < len(kept) < 50 and kept == sent[50 - len(kept):]  # the oldest went


def test_message_age_eviction_expires_the_old_backlog(
    client_factory: Callable[..., pulsar.Client],
) -> None:
    with EmbeddedBroker(**FAST_CHECKS) as broker:
        client = client_factory(broker.service_url)
        topic = new_topic()
        client.subscribe(topic, "slow").close()
        producer = client.create_producer(topic)
        for index in range(10):
            producer.send(b"old-%d" % index)
        rest(broker, "POST", topic_path(topic) + "/backlogQuota?backlogQuotaType=message_age",
             {"limitTime": 1, "policy": "consumer_backlog_eviction"})
        wait_until(lambda: stats(broker, topic)["subscriptions"]["slow"]["msgBacklog"] == 0,
                   "the old backlog was evicted")
        assert stats(broker, topic)["backlogQuotaLimitTime"] == 1
        slow = client.subscribe(topic, "slow")
        producer.send(b"fresh")
        assert slow.receive(timeout_millis=10_000).data() == b"fresh"


def test_a_quota_and_its_backlog_survive_a_restart(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    broker = EmbeddedBroker(data_dir=tmp_path, **FAST_CHECKS)
    broker.start()
    try:
        client = client_factory(broker.service_url)
        topic = new_topic()
        client.subscribe(topic, "s").close()
        producer = client.create_producer(topic)
        for _ in range(20):
            producer.send(b"x" * 1000)
        rest(broker, "POST", "/admin/v2/namespaces/public/default/backlogQuota",
             {"limitSize": 8192, "policy": "producer_exception"})
        client.close()
        broker.restart()
        client = client_factory(broker.service_url)
        # Refused at once: the policy and the backlog came back with the broker.
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            client.create_producer(topic)
        assert rest(broker, "GET", "/admin/v2/namespaces/public/default/backlogQuotaMap") == {
            "destination_storage": {
                "limit": 8192, "limitSize": 8192, "limitTime": -1, "policy": "producer_exception",
            }
        }
    finally:
        broker.close()


def test_quota_refusals_come_at_once_with_the_official_client_error(
    client_factory: Callable[..., pulsar.Client],
) -> None:
    # No periodic check needed: a producer is checked when it attaches.
    with EmbeddedBroker(admin=True, backlog_quota_check_interval_in_seconds=3600) as broker:
        client = client_factory(broker.service_url)
        topic = new_topic()
        client.subscribe(topic, "s").close()
        client.create_producer(topic).send(b"x" * 2000)
        for policy, error in (
            ("producer_exception", pulsar.ProducerBlockedQuotaExceededException),
            ("producer_request_hold", pulsar.ProducerBlockedQuotaExceededError),
        ):
            rest(broker, "POST", topic_path(topic) + "/backlogQuota",
                 {"limitSize": 1000, "policy": policy})
            with pytest.raises(error):
                client.create_producer(topic)
            asyncio.run(magnetar_producer_refused(broker.service_url, topic))
        rest(broker, "DELETE", topic_path(topic) + "/backlogQuota")
        client.create_producer(topic).send(b"fine again")


async def magnetar_producer_refused(url: str, topic: str) -> None:
    """magnetar's own client is refused at once too (one error class for both codes)."""
    async with Client(url, operation_timeout=10) as client:
        with pytest.raises(ProducerBlockedQuotaExceeded):
            await client.create_producer(topic)


def test_magnetar_client_fails_its_waiting_sends_once_over_quota(
    client_factory: Callable[..., pulsar.Client],
) -> None:
    """magnetar's client, like Java's: a producer detached for a backlog quota with
    producer_exception fails what it was about to send, instead of holding it."""
    with EmbeddedBroker(**FAST_CHECKS) as broker:
        official = client_factory(broker.service_url)
        topic = new_topic()
        consumer = official.subscribe(topic, "s")
        rest(broker, "POST",
             topic_path(topic) + "/backlogQuota?backlogQuotaType=destination_storage",
             {"limitSize": 8192, "limitTime": -1, "policy": "producer_exception"})

        async def scenario() -> None:
            async with Client(broker.service_url, operation_timeout=30.0) as client:
                producer = await client.create_producer(topic)
                for index in range(20):
                    await producer.send(b"%02d" % index + b"x" * 1000)
                await asyncio.to_thread(
                    wait_until, lambda: not stats(broker, topic)["publishers"], "detached"
                )
                with pytest.raises(ProducerBlockedQuotaExceeded):
                    await asyncio.wait_for(producer.send(b"refused"), 30)

        asyncio.run(scenario())
        assert stats(broker, topic)["msgInCounter"] == 20
        consumer.close()
