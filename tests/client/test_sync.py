"""The blocking facade ``magnetar.client.sync``."""

from __future__ import annotations

import threading

import pytest

from magnetar.client import EARLIEST, MessageId, TimeoutError
from magnetar.client.message import Message
from magnetar.client.request_reply import ReplyResult
from magnetar.client.sync import Client, Consumer
from magnetar.testing import EmbeddedBroker


def test_sync_produce_consume_ack_nack(broker: EmbeddedBroker, topic: str) -> None:
    with Client(broker.service_url) as client:
        producer = client.create_producer(topic, producer_name="sync-p")
        consumer = client.subscribe(topic, "s", subscription_type="shared",
                                    negative_ack_redelivery_delay=0.1)
        mid = producer.send(b"one", key="k", properties={"p": "v"})
        assert isinstance(mid, MessageId)
        assert producer.producer_name == "sync-p" and producer.last_sequence_id == 0
        msg = consumer.receive(5)
        assert (msg.value, msg.key, msg.properties) == (b"one", "k", {"p": "v"})
        consumer.negative_acknowledge(msg)
        again = consumer.receive(5)
        assert again.value == b"one" and again.redelivery_count == 1
        consumer.acknowledge(again)
        consumer.flush_acks()
        with pytest.raises(TimeoutError):
            consumer.receive(0.2)
        producer.close()
        consumer.close()


def test_sync_send_async_callback_and_flush(broker: EmbeddedBroker, topic: str) -> None:
    with Client(broker.service_url) as client:
        producer = client.create_producer(topic, batching=True, batching_max_delay=1.0)
        results: list[tuple[BaseException | None, MessageId | None]] = []
        done = threading.Event()

        def callback(error: BaseException | None, message_id: MessageId | None) -> None:
            results.append((error, message_id))
            if len(results) == 10:
                done.set()

        futures = [producer.send_async(b"x%d" % i, callback) for i in range(10)]
        producer.flush()
        assert done.wait(5)
        assert all(error is None for error, _ in results)
        assert [f.result().batch_index for f in futures] == list(range(10))


def test_sync_request_fields_and_request_async_callback(broker: EmbeddedBroker,
                                                        topic: str) -> None:
    with Client(broker.service_url) as client:
        consumer = client.subscribe(topic, "s", subscription_type="shared")
        producer = client.create_producer(topic)
        results: list[tuple[BaseException | None, ReplyResult | None]] = []
        done = threading.Event()

        def callback(error: BaseException | None, reply: ReplyResult | None) -> None:
            results.append((error, reply))
            done.set()

        future = producer.request_async(b"q", callback, timeout=5, key="k",
                                        ordering_key=b"o", properties={"p": "v"},
                                        event_time=123)
        msg = consumer.receive(5)
        assert (msg.key, msg.ordering_key, msg.event_time, msg.properties["p"]) == (
            "k", b"o", 123, "v")
        consumer.acknowledge(msg.message_id, reply=b"answer")
        assert done.wait(5)
        assert results == [(None, future.result())]
        assert future.result().value == b"answer"

        asked: list[ReplyResult] = []
        thread = threading.Thread(
            target=lambda: asked.append(producer.request(b"r", timeout=5, key="k2")))
        thread.start()
        msg = consumer.receive(5)
        assert msg.key == "k2"
        consumer.acknowledge(msg, reply=b"second")
        thread.join(5)
        assert [r.value for r in asked] == [b"second"]


def test_sync_listener_may_block_on_the_client(broker: EmbeddedBroker, topic: str) -> None:
    got: list[bytes] = []
    done = threading.Event()

    def listener(consumer: Consumer, msg: Message) -> None:
        consumer.acknowledge(msg)  # a blocking call from the listener thread
        got.append(msg.value)
        if len(got) == 3:
            done.set()

    with Client(broker.service_url) as client:
        client.subscribe(topic, "l", message_listener=listener)
        producer = client.create_producer(topic)
        for i in range(3):
            producer.send(b"%d" % i)
        assert done.wait(5)
        assert got == [b"0", b"1", b"2"]


def test_sync_reader_and_iteration(broker: EmbeddedBroker, topic: str) -> None:
    with Client(broker.service_url) as client:
        producer = client.create_producer(topic)
        ids = [producer.send(b"r%d" % i) for i in range(3)]
        reader = client.create_reader(topic, EARLIEST)
        assert reader.has_message_available()
        assert [reader.read_next(5).value for _ in range(3)] == [b"r0", b"r1", b"r2"]
        assert not reader.has_message_available()
        reader.seek(ids[0])
        assert reader.read_next(5).value == b"r1"
        consumer = client.subscribe(topic, "it", initial_position="earliest")
        seen = []
        for msg in consumer:
            seen.append(msg.value)
            if len(seen) == 3:
                break
        assert seen == [b"r0", b"r1", b"r2"]
        assert client.get_topic_partitions(topic) == [topic]


def test_sync_request_handler_sees_the_request(broker: EmbeddedBroker, topic: str) -> None:
    with Client(broker.service_url) as client:
        consumer = client.subscribe(topic, "workers", subscription_type="shared")
        producer = client.create_producer(topic, producer_name="asker")
        answered: list[tuple[str, str | None, int | None]] = []

        def serve() -> None:
            for request in consumer.requests():
                answered.append((request.requester, request.key, request.deadline_ms))
                assert isinstance(request.message_id, MessageId)
                request.reply(request.value.upper())
                return

        worker = threading.Thread(target=serve)
        worker.start()
        reply = producer.request(b"hi", timeout=5.0, key="k1")
        worker.join(5)
        assert reply.value == b"HI"
        assert answered and answered[0][:2] == ("asker", "k1")
        assert answered[0][2] is not None


def test_sync_send_entry_and_a_payload_processor(broker: EmbeddedBroker, topic: str) -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from magnetar.client import KafkaPayloadProcessor

    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    records = [(b"user-1", b"hello"), (None, b"no key")]
    for delta, (key, value) in enumerate(records):
        builder.append(delta, timestamp=1_700_000_000_000 + delta, key=key, value=value,
                       headers=[])
    entry = bytes(builder.build())
    with Client(broker.service_url) as client:
        consumer = client.subscribe(topic, "s", payload_processor=KafkaPayloadProcessor())
        producer = client.create_producer(topic)
        mid = producer.send_entry(entry, num_messages=2, properties={"entry.format": "kafka"})
        assert isinstance(mid, MessageId)
        first, second = consumer.receive(5), consumer.receive(5)
        assert (first.key, first.value) == ("user-1", b"hello")
        assert second.value == b"no key"
        assert (first.message_id.batch_index, second.message_id.batch_index) == (0, 1)
