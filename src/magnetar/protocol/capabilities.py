"""Consumer capabilities: what a consumer of magnetar's client declares in SUBSCRIBE.

``CommandSubscribe.metadata`` (Pulsar's consumer metadata, shown in topic stats) carries
them, so that consumers of other clients, which declare nothing, are treated safely on
the same subscription (DESIGN.md, "Consumer capabilities"):

- ``magnetar.foreign-entries=read``: the consumer reads foreign entries (PIP-96: a
  payload processor); every other consumer gets each foreign entry as one message.
- ``magnetar.redelivery-backoff=client``: the consumer times its own redeliveries
  (PIP-106); the broker adds no backoff of its own to them.

Both sides use these names: the client writes them, the broker reads them once, at
subscribe.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import NamedTuple, Protocol

FOREIGN_ENTRIES = "magnetar.foreign-entries"
FOREIGN_ENTRIES_READ = "read"
REDELIVERY_BACKOFF = "magnetar.redelivery-backoff"
REDELIVERY_BACKOFF_CLIENT = "client"


class _KeyValue(Protocol):
    key: str
    value: str


class Capabilities(NamedTuple):
    reads_foreign_entries: bool = False
    backs_off_itself: bool = False


def capabilities(metadata: Iterable[_KeyValue]) -> Capabilities:
    """What a SUBSCRIBE's ``metadata`` declares (anything else in it is ignored)."""
    reads_foreign = backs_off = False
    for kv in metadata:
        if kv.key == FOREIGN_ENTRIES:
            reads_foreign = kv.value == FOREIGN_ENTRIES_READ
        elif kv.key == REDELIVERY_BACKOFF:
            backs_off = kv.value == REDELIVERY_BACKOFF_CLIENT
    return Capabilities(reads_foreign, backs_off)


def declared_by_client(has_payload_processor: bool, properties: Container[str]) -> dict[str, str]:
    """What a consumer of magnetar's client declares, but for keys its own
    ``properties`` already name (a user may say otherwise).

    It always times its own redeliveries: a nack waits its fixed delay or its PIP-106
    backoff in the client, an ack timeout its ``ack_timeout_redelivery_backoff``; a
    broker backoff on top would stack on them (the broker cannot tell a nack from an
    ack timeout). It reads foreign entries only through a payload processor.
    """
    declared = {REDELIVERY_BACKOFF: REDELIVERY_BACKOFF_CLIENT}
    if has_payload_processor:
        declared[FOREIGN_ENTRIES] = FOREIGN_ENTRIES_READ
    return {key: value for key, value in declared.items() if key not in properties}
