"""The PIP-96 shield: foreign entries reach consumers that cannot read them as one message.

A foreign entry is one whose ``entry.format`` property names another format than
Pulsar's (Kafka-on-Pulsar writes ``kafka``; raw ingest always sets one, ``raw`` unless
told otherwise). Framed as a batch (``num_messages_in_batch`` set), it is what a Pulsar
client would cut into messages: the official client then reads empty messages or
crashes. Only a consumer that declared ``magnetar.foreign-entries=read`` at subscribe
(a payload processor: protocol/capabilities.py) gets such an entry as it is stored;
every other one gets it re-encoded as one message: the same payload and properties,
``num_messages_in_batch`` left out, charged one permit.

The decision is taken once per entry (``EntryInfo.foreign_batch``, kept with the
topic's entry infos): dispatching an ordinary entry costs one flag test, and only a
foreign entry going to a consumer that cannot read it is re-encoded.
"""

from __future__ import annotations

from magnetar.protocol.frames import build_entry, parse_metadata, parse_payload
from magnetar.protocol.pb import pb

ENTRY_FORMAT_PROPERTY = "entry.format"
# ``entry.format`` values that mean Pulsar's own format (Kafka-on-Pulsar's word).
PULSAR_FORMATS = frozenset({"pulsar"})
# What raw ingest writes when its caller names no format.
RAW_FORMAT = "raw"


def is_foreign(metadata: pb.MessageMetadata) -> bool:
    """Does the entry's ``entry.format`` name a format other than Pulsar's?"""
    for kv in metadata.properties:
        if kv.key == ENTRY_FORMAT_PROPERTY:
            return kv.value.lower() not in PULSAR_FORMATS
    return False


def as_one_message(entry: bytes) -> bytes:
    """The stored ``entry`` re-encoded as one message: its metadata without
    ``num_messages_in_batch`` (everything else kept, the properties included), its
    payload as it is, a fresh checksum."""
    section = parse_payload(entry, verify_checksum=False)
    metadata = parse_metadata(section)
    metadata.ClearField("num_messages_in_batch")
    return build_entry(metadata.SerializeToString(), section.payload)
