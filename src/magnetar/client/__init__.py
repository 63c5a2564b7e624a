"""magnetar's asyncio Pulsar client.

```
from magnetar.client import Client
async with Client("pulsar://127.0.0.1:6650") as client:
    producer = await client.create_producer("my-topic")
    await producer.send(b"hello")
```

It speaks the standard Pulsar protocol (so it works against Apache Pulsar) plus
magnetar's PIP-371 request-reply extension.  ``magnetar.client.sync`` offers the
same API with blocking calls.
"""

from magnetar.client.backoff import Backoff, MultiplierRedeliveryBackoff, RedeliveryBackoff
from magnetar.client.client import Client
from magnetar.client.consuming.consumer import Consumer
from magnetar.client.consuming.dead_letter import DeadLetterPolicy
from magnetar.client.consuming.kafka_processor import KafkaPayloadProcessor
from magnetar.client.consuming.options import (
    ConsumerConfigError,
    consumer_options,
    load_consumer_options,
)
from magnetar.client.consuming.payload_processor import (
    DEFAULT_PROCESSOR,
    EntryContext,
    MessagePayload,
    PayloadProcessingError,
    PayloadProcessor,
)
from magnetar.client.consuming.reader import Reader
from magnetar.client.errors import (
    AlreadyClosed,
    ConnectError,
    ConsumerBusy,
    IncompatibleSchema,
    MessageTooBig,
    NotAllowed,
    PersistenceError,
    ProducerBusy,
    ProducerFenced,
    ProducerQueueIsFull,
    PulsarError,
    RequestTimeout,
    ServiceNotReady,
    TimeoutError,
    TopicNotFound,
    TopicTerminated,
)
from magnetar.client.message import Message
from magnetar.client.producing.producer import Producer
from magnetar.client.request_reply.requests import ReplyResult, Request
from magnetar.client.schema import BytesSchema, JsonSchema, SchemaInfo, StringSchema
from magnetar.client.transport.auth import (
    Authentication,
    AuthenticationBasic,
    AuthenticationTLS,
    AuthenticationToken,
)
from magnetar.protocol.message_id import EARLIEST, LATEST, MessageId

__all__ = [
    "DEFAULT_PROCESSOR",
    "EARLIEST",
    "LATEST",
    "AlreadyClosed",
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationTLS",
    "AuthenticationToken",
    "Backoff",
    "BytesSchema",
    "Client",
    "ConnectError",
    "Consumer",
    "ConsumerBusy",
    "ConsumerConfigError",
    "DeadLetterPolicy",
    "EntryContext",
    "IncompatibleSchema",
    "JsonSchema",
    "KafkaPayloadProcessor",
    "Message",
    "MessageId",
    "MessagePayload",
    "MessageTooBig",
    "MultiplierRedeliveryBackoff",
    "NotAllowed",
    "PayloadProcessingError",
    "PayloadProcessor",
    "PersistenceError",
    "Producer",
    "ProducerBusy",
    "ProducerFenced",
    "ProducerQueueIsFull",
    "PulsarError",
    "Reader",
    "RedeliveryBackoff",
    "ReplyResult",
    "Request",
    "RequestTimeout",
    "SchemaInfo",
    "ServiceNotReady",
    "StringSchema",
    "TimeoutError",
    "TopicNotFound",
    "TopicTerminated",
    "consumer_options",
    "load_consumer_options",
]
