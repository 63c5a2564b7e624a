"""``magnetar.client.payload_processor``, the documented path of PIP-96 payload
processors: the names of :mod:`magnetar.client.consuming.payload_processor`."""

from magnetar.client.consuming.payload_processor import (
    DEFAULT_PROCESSOR,
    EntryContext,
    MessagePayload,
    PayloadProcessingError,
    PayloadProcessor,
    process_entry,
)

__all__ = [
    "DEFAULT_PROCESSOR",
    "EntryContext",
    "MessagePayload",
    "PayloadProcessingError",
    "PayloadProcessor",
    "process_entry",
]
