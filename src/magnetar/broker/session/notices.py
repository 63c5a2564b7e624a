"""What the broker tells a client on its own initiative about its producers and
consumers: a waiting exclusive producer promoted, a producer fenced, a producer or a
consumer closed by the broker (its client attaches again).

``ClientNotices`` is a part of ``ServerCnx`` (a base class): it names the connection's
attributes it uses, and ServerCnx sets them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magnetar.broker.session.handlers import consumers, producers
from magnetar.protocol.pb import pb

if TYPE_CHECKING:
    from magnetar.broker.session.context import Session, SessionService
    from magnetar.broker.topics.consumer import Consumer
    from magnetar.broker.topics.producer import Producer


class ClientNotices:
    """Broker-initiated closes and promotions; a base class of ServerCnx."""

    # Set by ServerCnx.
    service: SessionService[Any]
    alive: bool
    producers: dict[int, Producer]
    consumers: dict[int, Consumer]

    if TYPE_CHECKING:  # ServerCnx's
        def write_error(self, request_id: int, error: int, message: str) -> None: ...

    def producer_promoted(self: Session, producer: Producer) -> None:
        """A WaitForExclusive producer reached the front of the line."""
        if self.producers.get(producer.producer_id) is producer:
            producers.write_producer_success(self, producer, producer.request_id)
            topic = self.service.topics.get(producer.topic_name)
            if topic is not None:
                self.service.replies.producer_attached(topic, producer)

    def producer_fenced(self: Session, producer: Producer) -> None:
        """Another producer took the topic with ExclusiveWithFencing."""
        if self.producers.get(producer.producer_id) is not producer or not self.alive:
            return
        if not producer.ready:
            self.write_error(
                producer.request_id,
                pb.ProducerFenced,
                f"producer '{producer.name}' was fenced while waiting for {producer.topic_name}",
            )
            del self.producers[producer.producer_id]
            return
        producers.write_close_producer(self, producer.producer_id)

    def close_producer_by_broker(self: Session, producer: Producer) -> None:
        """Detach ``producer`` and tell its client, which will try to attach again."""
        if self.producers.get(producer.producer_id) is producer:
            del self.producers[producer.producer_id]
            producers.detach_producer(self, producer)
        if self.alive:
            producers.write_close_producer(self, producer.producer_id)

    def consumer_closed_by_broker(self: Session, consumer: Consumer) -> None:
        """Tell the client its consumer is gone (it will subscribe again)."""
        if self.consumers.get(consumer.consumer_id) is consumer:
            del self.consumers[consumer.consumer_id]
            consumer.subscription.remove_consumer(consumer)
        if self.alive:
            consumers.write_close_consumer(self, consumer.consumer_id)

