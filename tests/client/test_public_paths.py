"""The client's public import paths: what README, examples and users import keeps
working wherever the code behind it lives (the sub-packages are internal homes)."""

from __future__ import annotations

import importlib

import pytest

# Module -> names importable from it, as documented (README, examples, docstrings).
DOCUMENTED = {
    "magnetar.client": [
        "DEFAULT_PROCESSOR", "EARLIEST", "LATEST", "AlreadyClosed", "Authentication",
        "AuthenticationBasic", "AuthenticationTLS", "AuthenticationToken", "Backoff",
        "BytesSchema", "Client", "ConnectError", "Consumer", "ConsumerBusy",
        "ConsumerConfigError", "DeadLetterPolicy", "EntryContext", "IncompatibleSchema",
        "JsonSchema", "KafkaPayloadProcessor", "Message", "MessageId", "MessagePayload",
        "MessageTooBig", "MultiplierRedeliveryBackoff", "NotAllowed",
        "PayloadProcessingError", "PayloadProcessor", "PersistenceError", "Producer",
        "ProducerBusy", "ProducerFenced", "ProducerQueueIsFull", "PulsarError", "Reader",
        "RedeliveryBackoff", "ReplyResult", "Request", "RequestTimeout", "SchemaInfo",
        "ServiceNotReady", "StringSchema", "TimeoutError", "TopicNotFound",
        "TopicTerminated", "consumer_options", "load_consumer_options",
    ],
    "magnetar.client.sync": ["Client", "Consumer", "Producer", "Reader"],
    "magnetar.client.request_reply": [
        "REQUEST_TIMEOUT_PROPERTY", "PendingRequests", "ReplyReceipt", "ReplyResult",
        "Request",
    ],
    "magnetar.client.payload_processor": [
        "DEFAULT_PROCESSOR", "EntryContext", "MessagePayload", "PayloadProcessingError",
        "PayloadProcessor",
    ],
    "magnetar.client.errors": ["PulsarError", "RequestTimeout", "is_retriable"],
    "magnetar.client.message": ["Message"],
    "magnetar.client.schema": ["JsonSchema", "SchemaInfo"],
    "magnetar.client.topic_name": ["complete_topic_name", "partition_index"],
    "magnetar.client.backoff": ["Backoff", "MultiplierRedeliveryBackoff"],
}


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_documented_names_import(module: str) -> None:
    mod = importlib.import_module(module)
    missing = [name for name in DOCUMENTED[module] if not hasattr(mod, name)]
    assert missing == []


def test_package_exports_exactly_its_api() -> None:
    import magnetar.client

    assert sorted(magnetar.client.__all__) == sorted(DOCUMENTED["magnetar.client"])


def test_old_paths_name_the_same_objects() -> None:
    from magnetar.client import EntryContext, Request
    from magnetar.client.payload_processor import EntryContext as ShimEntryContext
    from magnetar.client.request_reply import Request as PackageRequest

    assert ShimEntryContext is EntryContext
    assert PackageRequest is Request
