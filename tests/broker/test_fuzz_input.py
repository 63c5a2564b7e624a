"""Seeded fuzzing of the wire protocol against a real broker.

The promise under test: bad input gets a clear error and loses nothing. A malformed
frame, an oversized message, an unknown command, a wrong topic name: the offending
connection gets a Pulsar error (or is closed) with a message that says what was
wrong, every other connection keeps working, and no stored data is harmed.

Each fuzzed session is a raw socket: a valid handshake and setup (a producer, a
consumer, a few stored messages with real message ids), then a handful of commands
built with the codec and mutated at three levels: field values (edge ids, negative
numbers as uint64, empty and bad names, ids of entries that do not exist, ...), the
command bytes of one frame (bit flips, truncation, duplicated fields), and the byte
stream (wrong sizes in frame headers, cut frames, inserted garbage). A PING ends the
session.

The oracle decodes the exact bytes sent with the codec's own ``FrameDecoder`` (the
broker starts the fuzzed part with an empty buffer, so it sees the same frames) and
predicts, frame by frame, what the broker must answer: a response for every request
(by request id, or producer and sequence id for SEND), an ERROR for an unknown or
unexpected command, a PONG for the PING, or an ERROR naming the problem followed by
the broker closing the connection when the stream cannot be framed or a command comes
before CONNECT. Whatever the broker says, no error may be an "internal error".

Each SEND body is also judged from the message format (checksum, metadata size,
payload size against the broker's limit): one the format forbids must get a SEND_ERROR
that says why. A name that cannot be a topic must get InvalidTopicName. After a framing
error the broker must stop reading: the sentinel PING behind it gets no PONG.

Between batches of sessions: the broker still accepts connections, two bystanders
created before the fuzzing still round-trip (the official ``pulsar`` client, and a raw
connection that must never be dropped, since the official client would silently
reconnect), and the broker's thread logged nothing at ERROR level. At the end:
everything the bystander published is readable from the earliest position with the
right payloads and properties, nothing foreign reached it, and every entry any fuzzed
session got a SEND_RECEIPT for reads back byte for byte.

Re-run one seed with ``MAGNETAR_FUZZ_SEED=<n>``. The bugs this fuzzer found are
pinned by the tests after it, one behaviour each.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import struct
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import crc32c
import pulsar
import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError

from magnetar.protocol.client_codec import varint
from magnetar.protocol.errors import FrameTooLarge, ProtocolError
from magnetar.protocol.frames import (
    Frame,
    FrameDecoder,
    build_entry,
    encode_command_with_body,
    max_frame_size,
)
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .rawclient import RawPeer

pytestmark = pytest.mark.timeout(60)

T = BaseCommand
SEED = int(os.environ.get("MAGNETAR_FUZZ_SEED", "371068"))
SESSIONS = 800
BATCHES = 8
MAX_MESSAGE_SIZE = 64 * 1024
FRAME_LIMIT = max_frame_size(MAX_MESSAGE_SIZE)
SESSION_DEADLINE = 5.0

U64_EDGE = [0, 1, 2, 7, 2**31 - 1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1]
I64_EDGE = [0, 1, -1, 2**63 - 1, -(2**63), 2**40]
U32_EDGE = [0, 1, 5, 2**31 - 1, 2**31, 2**32 - 1]
I32_EDGE = [0, 1, -1, 7, 2**31 - 1, -(2**31)]
STR_EDGE = ["", " ", "\x00", "é", "💥", "a" * 200, "%2F..", "../..", "\n", "public/default"]

INVALID_TOPICS = [
    "",
    " ",
    "persistent://",
    "persistent:///",
    "ftp://public/default/x",
    "persistent://public/x",
    "a/b",
    "a/b/c/d",
    "persistent://public/default/",
    "persistent://public/default/nul\x00x",
    "persistent://pub lic/default/x",
    "persistent://public/default/a/b",
    "://x",
    "persistent://public/default/tab\tx",
    "PERSISTENT://public/default/x",
]
# Names TopicName accepts but the store does not (tenant or namespace "." / "..",
# local names longer than a file name may be).
STORE_REJECTED_TOPICS = [
    "persistent://../../fz-escape",
    "persistent://./public/default",
    "persistent://public/../fz-dots",
    "persistent://public/default/" + "L" * 300,
]
NAMESPACES = ["public/default", "", "/", "public", "a/b/c", "../..", "public/default/x", "é/ü"]

CLIENT_COMMANDS = {
    T.CONNECT,
    T.PING,
    T.PONG,
    T.LOOKUP,
    T.PARTITIONED_METADATA,
    T.GET_TOPICS_OF_NAMESPACE,
    T.PRODUCER,
    T.SEND,
    T.CLOSE_PRODUCER,
    T.SUBSCRIBE,
    T.FLOW,
    T.ACK,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES,
    T.UNSUBSCRIBE,
    T.CLOSE_CONSUMER,
    T.SEEK,
    T.GET_LAST_MESSAGE_ID,
    T.GET_SCHEMA,
    T.GET_OR_CREATE_SCHEMA,
    T.CONSUMER_STATS,
}
# request command -> (its field in BaseCommand, the answer that carries its request id)
REQUESTS: dict[int, tuple[str, int]] = {
    T.PRODUCER: ("producer", T.PRODUCER_SUCCESS),
    T.SUBSCRIBE: ("subscribe", T.SUCCESS),
    T.UNSUBSCRIBE: ("unsubscribe", T.SUCCESS),
    T.CLOSE_PRODUCER: ("close_producer", T.SUCCESS),
    T.CLOSE_CONSUMER: ("close_consumer", T.SUCCESS),
    T.SEEK: ("seek", T.SUCCESS),
    T.LOOKUP: ("lookupTopic", T.LOOKUP_RESPONSE),
    T.PARTITIONED_METADATA: ("partitionMetadata", T.PARTITIONED_METADATA_RESPONSE),
    T.GET_TOPICS_OF_NAMESPACE: ("getTopicsOfNamespace", T.GET_TOPICS_OF_NAMESPACE_RESPONSE),
    T.GET_SCHEMA: ("getSchema", T.GET_SCHEMA_RESPONSE),
    T.GET_OR_CREATE_SCHEMA: ("getOrCreateSchema", T.GET_OR_CREATE_SCHEMA_RESPONSE),
    T.CONSUMER_STATS: ("consumerStats", T.CONSUMER_STATS_RESPONSE),
    T.GET_LAST_MESSAGE_ID: ("getLastMessageId", T.GET_LAST_MESSAGE_ID_RESPONSE),
}
# answer -> its field in BaseCommand (each has a request_id)
ANSWER_FIELDS = {
    T.PRODUCER_SUCCESS: "producer_success",
    T.SUCCESS: "success",
    T.ERROR: "error",
    T.LOOKUP_RESPONSE: "lookupTopicResponse",
    T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse",
    T.GET_SCHEMA_RESPONSE: "getSchemaResponse",
    T.GET_OR_CREATE_SCHEMA_RESPONSE: "getOrCreateSchemaResponse",
    T.CONSUMER_STATS_RESPONSE: "consumerStatsResponse",
    T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    T.ACK_RESPONSE: "ackResponse",
}
TOPIC_FIELDS = {
    T.PRODUCER: "producer",
    T.SUBSCRIBE: "subscribe",
    T.LOOKUP: "lookupTopic",
    T.PARTITIONED_METADATA: "partitionMetadata",
    T.GET_SCHEMA: "getSchema",
    T.GET_OR_CREATE_SCHEMA: "getOrCreateSchema",
}


# ---------------------------------------------------------------- broker, logs


@pytest.fixture(scope="module")
def fuzz_broker() -> Iterator[EmbeddedBroker]:
    """A broker of its own (a small message limit keeps oversized frames cheap)."""
    with EmbeddedBroker(max_message_size=MAX_MESSAGE_SIZE) as broker:
        yield broker


class ErrorRecords(logging.Handler):
    """Collects what one broker's thread logs at ERROR: a handler that raised ("error
    handling ..."), a failed dispatch, an exception in an event-loop callback."""

    def __init__(self, thread_name: str) -> None:
        super().__init__(logging.ERROR)
        self.thread_name = thread_name
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.threadName == self.thread_name:
            self.records.append(record)

    def report(self) -> str:
        out = []
        for record in self.records[:5]:
            text = f"{record.name}: {record.getMessage()}"
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            out.append(text)
        return "\n---\n".join(out)


@pytest.fixture
def broker_errors(fuzz_broker: EmbeddedBroker) -> Iterator[ErrorRecords]:
    handler = ErrorRecords(f"magnetar-{fuzz_broker.port}")  # EmbeddedBroker's thread
    loggers = [logging.getLogger("magnetar"), logging.getLogger("asyncio")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        if logger.getEffectiveLevel() > logging.ERROR:
            logger.setLevel(logging.ERROR)
    yield handler
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(handler)
        logger.setLevel(level)


# ---------------------------------------------------------------- frames


def frame_bytes(command: BaseCommand, body: bytes | None = None) -> bytes:
    """A frame with correct sizes; required fields may be missing (the fuzzer cleared them)."""
    return reframe(command.SerializePartialToString(), body or b"")


def reframe(command_bytes: bytes, body: bytes = b"") -> bytes:
    """A frame with correct sizes around whatever command bytes."""
    return (
        struct.pack(">II", 4 + len(command_bytes) + len(body), len(command_bytes))
        + command_bytes
        + body
    )


def answer_key(frame: Frame) -> object:
    command = frame.command
    kind = command.type
    if kind == T.SEND_RECEIPT:
        return (command.send_receipt.producer_id, command.send_receipt.sequence_id)
    if kind == T.SEND_ERROR:
        return (command.send_error.producer_id, command.send_error.sequence_id)
    name = ANSWER_FIELDS.get(kind)
    return getattr(command, name).request_id if name else None


def error_text(frame: Frame) -> str | None:
    """The error a frame from the broker reports, if any ('' when it gives no words)."""
    command = frame.command
    kind = command.type
    if kind == T.ERROR:
        return command.error.message
    if kind == T.SEND_ERROR:
        return command.send_error.message
    if kind == T.LOOKUP_RESPONSE and command.lookupTopicResponse.HasField("error"):
        return command.lookupTopicResponse.message
    if kind == T.PARTITIONED_METADATA_RESPONSE and command.partitionMetadataResponse.HasField(
        "error"
    ):
        return command.partitionMetadataResponse.message
    if kind == T.ACK_RESPONSE and command.ackResponse.HasField("error"):
        return command.ackResponse.message
    if kind == T.GET_SCHEMA_RESPONSE and command.getSchemaResponse.HasField("error_code"):
        return command.getSchemaResponse.error_message
    if kind == T.GET_OR_CREATE_SCHEMA_RESPONSE and command.getOrCreateSchemaResponse.HasField(
        "error_code"
    ):
        return command.getOrCreateSchemaResponse.error_message
    if kind == T.CONSUMER_STATS_RESPONSE and command.consumerStatsResponse.HasField("error_code"):
        return command.consumerStatsResponse.error_message
    return None


def describe(frame: Frame) -> str:
    if frame.unknown_type is not None:
        return f"<unknown command type {frame.unknown_type}>"
    text = " ".join(str(frame.command).split())
    if len(text) > 300:
        text = text[:300] + "..."
    return text + (f" +body[{len(frame.body)}]" if frame.body else "")


# ---------------------------------------------------------------- the oracle


def error_code(frame: Frame) -> int | None:
    command = frame.command
    kind = command.type
    if kind == T.ERROR:
        return command.error.error
    if kind == T.SEND_ERROR:
        return command.send_error.error
    if kind == T.LOOKUP_RESPONSE and command.lookupTopicResponse.HasField("error"):
        return command.lookupTopicResponse.error
    if kind == T.PARTITIONED_METADATA_RESPONSE and command.partitionMetadataResponse.HasField(
        "error"
    ):
        return command.partitionMetadataResponse.error
    if kind == T.GET_SCHEMA_RESPONSE and command.getSchemaResponse.HasField("error_code"):
        return command.getSchemaResponse.error_code
    if kind == T.GET_OR_CREATE_SCHEMA_RESPONSE and command.getOrCreateSchemaResponse.HasField(
        "error_code"
    ):
        return command.getOrCreateSchemaResponse.error_code
    return None


@dataclass
class Expect:
    kinds: frozenset[int]
    key: object  # request id, (producer id, sequence id), or None for any
    label: str
    texts: tuple[str, ...] = ()  # an error answering it must say one of these
    code: int | None = None  # ... and carry this error code
    frame: Frame | None = None

    def accepts(self, frame: Frame) -> bool:
        if frame.command.type not in self.kinds:
            return False
        if self.key is not None and answer_key(frame) != self.key:
            return False
        text = error_text(frame)
        if text is not None and self.texts and not any(t in text for t in self.texts):
            return False
        return self.code is None or error_code(frame) == self.code


@dataclass
class Prediction:
    frames: list[Frame]
    decode_error: ProtocolError | None
    leftover: int
    expects: list[Expect]
    close_reasons: list[str]  # non-empty: the broker must say one of these and hang up
    handled: list[Frame]  # the frames the broker acts on (not those after the failure)


def refused_payload(body: bytes) -> str | None:
    """Why the message format itself forbids storing this SEND body (None: it may be
    stored). Read from the format, not from the broker's code."""
    if body[:2] == b"\x0e\x02":
        return None  # broker entry metadata in front: not judged here
    pos = 0
    if len(body) >= 6 and body[:2] == b"\x0e\x01":
        (checksum,) = struct.unpack_from(">I", body, 2)
        if crc32c.crc32c(body[6:]) != checksum:
            return "checksum"
        pos = 6
    if len(body) - pos < 4:
        return "bad message"
    (size,) = struct.unpack_from(">I", body, pos)
    if size > len(body) - pos - 4:
        return "bad message"
    try:
        pb.MessageMetadata().MergeFromString(body[pos + 4 : pos + 4 + size])
    except DecodeError:
        return "bad message"
    if len(body) - pos - 4 - size > MAX_MESSAGE_SIZE:
        return "maximum message size"
    return None


def topic_expectation(kind: int, topic: str) -> tuple[frozenset[int], int] | None:
    """For a topic name that cannot be one: the answer and error code the client needs."""
    if topic not in INVALID_TOPICS:
        return None
    if kind == T.LOOKUP:
        return frozenset({T.LOOKUP_RESPONSE}), pb.InvalidTopicName
    if kind == T.PARTITIONED_METADATA:
        return frozenset({T.PARTITIONED_METADATA_RESPONSE}), pb.InvalidTopicName
    if kind == T.GET_SCHEMA:  # as Pulsar, in the schema commands' own responses
        return frozenset({T.GET_SCHEMA_RESPONSE}), pb.InvalidTopicName
    if kind == T.GET_OR_CREATE_SCHEMA:
        return frozenset({T.GET_OR_CREATE_SCHEMA_RESPONSE}), pb.InvalidTopicName
    return frozenset({T.ERROR}), pb.InvalidTopicName


def decode_exactly(data: bytes) -> tuple[list[Frame], ProtocolError | None, int]:
    """The frames the broker cuts out of ``data``, the error it stops at, bytes left."""
    decoder = FrameDecoder(FRAME_LIMIT)
    try:
        frames = decoder.feed(data)
    except ProtocolError as exc:  # the very first frame is broken
        return [], exc, 0
    if decoder.failure is not None:  # good frames, then a broken one
        return frames, decoder.failure, 0
    return frames, None, decoder.buffered


def predict(data: bytes, connected: bool, consumer_ids: set[int]) -> Prediction:
    """What the broker must answer to ``data`` (``consumer_ids``: ids maybe in use)."""
    frames, decode_error, leftover = decode_exactly(data)
    expects: list[Expect] = []
    close_reasons: list[str] = []
    consumer_ids = set(consumer_ids)
    # Two SENDs with one (producer, sequence) key: which answer is whose is unknown.
    send_keys = Counter(
        (f.command.send.producer_id, f.command.send.sequence_id)
        for f in frames
        if f.unknown_type is None and f.command.type == T.SEND
    )
    handled: list[Frame] = []
    for frame in frames:
        handled.append(frame)
        if frame.unknown_type is not None:
            text = f"unsupported command type {frame.unknown_type}"
            expects.append(Expect(frozenset({T.ERROR}), 0, "unknown type", (text,)))
            continue
        command = frame.command
        kind = command.type
        if not connected and kind != T.CONNECT:
            close_reasons.append("sent before CONNECT")
            handled.pop()
            break
        if kind == T.CONNECT:
            if connected:
                expects.append(Expect(frozenset({T.ERROR}), 0, "second CONNECT", ("CONNECT",)))
            else:
                expects.append(Expect(frozenset({T.CONNECTED}), None, "CONNECT"))
            connected = True
        elif kind == T.PING:
            expects.append(Expect(frozenset({T.PONG}), None, "PING"))
        elif kind == T.SEND:
            key = (command.send.producer_id, command.send.sequence_id)
            why = refused_payload(frame.body)
            if why is None or send_keys[key] > 1:
                kinds = frozenset({T.SEND_RECEIPT, T.SEND_ERROR})
                expects.append(Expect(kinds, key, "SEND", frame=frame))
            else:  # refused, saying why (or that the producer is the problem)
                texts = (why, "producer")
                expects.append(Expect(frozenset({T.SEND_ERROR}), key, "SEND", texts, frame=frame))
        elif kind == T.ACK:
            if command.ack.HasField("request_id"):
                expects.append(
                    Expect(frozenset({T.ACK_RESPONSE}), command.ack.request_id, "ACK with id")
                )
        elif kind in REQUESTS:
            name, answer = REQUESTS[kind]
            request = getattr(command, name)
            label = T.Type.Name(kind)
            bad_name = None
            if kind in TOPIC_FIELDS and not (
                # the consumer id in use, or no subscription name: that error may come first
                kind == T.SUBSCRIBE
                and (request.consumer_id in consumer_ids or not request.subscription)
            ):
                bad_name = topic_expectation(kind, request.topic)
            if kind == T.SUBSCRIBE:
                consumer_ids.add(request.consumer_id)
            if bad_name is not None:
                kinds, code = bad_name
                expects.append(Expect(kinds, request.request_id, label + " bad name", code=code))
            else:
                kinds = frozenset({answer, T.ERROR})
                expects.append(Expect(kinds, request.request_id, label))
        elif kind not in CLIENT_COMMANDS:
            text = f"unexpected command {T.Type.Name(kind)}"
            expects.append(Expect(frozenset({T.ERROR}), 0, "broker-bound command", (text,)))
    if decode_error is not None:
        close_reasons.append(
            "frame too large" if isinstance(decode_error, FrameTooLarge) else "malformed frame"
        )
    return Prediction(frames, decode_error, leftover, expects, close_reasons, handled)


def match(expects: list[Expect], answers: list[Frame]) -> list[Expect]:
    """The expectations no answer met (answers are used once, in order)."""
    used: set[int] = set()
    missing = []
    for expect in expects:
        for i, answer in enumerate(answers):
            if i not in used and expect.accepts(answer):
                used.add(i)
                break
        else:
            missing.append(expect)
    return missing


# ---------------------------------------------------------------- a fuzzed session


class Peer:
    """A raw socket with a frame decoder; remembers everything the broker sent."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder()
        self.received: list[Frame] = []
        self.eof = False

    def send(self, data: bytes) -> bool:
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        return True

    def pump(self, timeout: float) -> None:
        if self.eof:
            return
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data = self.sock.recv(262144)
        except TimeoutError:
            return
        except OSError:  # reset: what came before it was read already
            self.eof = True
            return
        if not data:
            self.eof = True
            return
        self.received.extend(self.decoder.feed(data))

    def wait_for(self, done: Callable[[], bool], deadline: float) -> bool:
        while not done():
            if self.eof or time.monotonic() > deadline:
                return done()
            self.pump(min(0.2, deadline - time.monotonic()))
        return True

    def await_answer(self, kinds: set[int], key: object, start: int, what: str) -> Frame:
        """The first answer after ``start`` of one of ``kinds`` (or an ERROR) with ``key``."""
        found: list[Frame] = []

        def done() -> bool:
            for frame in self.received[start:]:
                if frame.command.type in kinds | {T.ERROR} and (
                    key is None or answer_key(frame) == key
                ):
                    found.append(frame)
                    return True
            return False

        assert self.wait_for(done, time.monotonic() + SESSION_DEADLINE), (
            f"setup: no answer to {what}"
        )
        return found[0]

    def request(self, command: BaseCommand, kinds: set[int], key: object) -> Frame:
        """Setup step: send, and return the answer (ERROR included) with this key."""
        start = len(self.received)
        self.send(frame_bytes(command))
        return self.await_answer(kinds, key, start, describe(Frame(command)))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


@dataclass
class World:
    port: int
    bystander_topic: str
    bystander_sub: str
    bystander_producer: str
    fuzz_topics: list[str]
    extra_topics: list[str]
    # topic -> entry id -> (ledger id, the entry as sent); every one of them got a receipt
    stored: dict[str, dict[int, tuple[int, bytes]]] = field(default_factory=dict)
    stats: Counter[str] = field(default_factory=Counter)

    def remember(self, topic: str, ledger_id: int, entry_id: int, body: bytes) -> None:
        entries = self.stored.setdefault(topic, {})
        previous = entries.get(entry_id)
        assert previous is None or previous == (ledger_id, body), (
            f"two receipts for entry {entry_id} of {topic} with different contents"
        )
        entries[entry_id] = (ledger_id, body)


@dataclass
class Ctx:
    n: int
    rng: random.Random
    world: World
    topic: str
    connected: bool = False
    producer_name: str = "nobody"
    ledger_id: int = 1
    real_ids: list[tuple[int, int]] = field(default_factory=list)
    bystander_ids: list[tuple[int, int]] = field(default_factory=list)
    consumer_ids: list[int] = field(default_factory=list)
    producer_ids: set[int] = field(default_factory=set)
    next_seq: int = 2


def metadata(ctx: Ctx, seq: int) -> pb.MessageMetadata:
    rng = ctx.rng
    md = pb.MessageMetadata(
        producer_name=ctx.producer_name, sequence_id=seq, publish_time=int(time.time() * 1000)
    )
    if rng.random() < 0.3:
        md.partition_key = rng.choice(["k", "", "é", "key-" + str(rng.randrange(9))])
    if rng.random() < 0.15:
        md.ordering_key = rng.randbytes(rng.randrange(4))
    if rng.random() < 0.2:
        md.properties.add(key=rng.choice(STR_EDGE), value=rng.choice(STR_EDGE))
    if rng.random() < 0.15:
        md.num_messages_in_batch = rng.choice(I32_EDGE)
    if rng.random() < 0.1:
        md.deliver_at_time = rng.choice([*I64_EDGE, int(time.time() * 1000) + 50])
    if rng.random() < 0.1:
        md.event_time = rng.choice(U64_EDGE)
    if rng.random() < 0.05:
        md.compression = rng.choice(list(pb.CompressionType.values()))
        md.uncompressed_size = rng.choice(U32_EDGE)
    if rng.random() < 0.05:
        md.ClearField(rng.choice(["producer_name", "sequence_id", "publish_time"]))
    return md


def send_body(ctx: Ctx, seq: int) -> tuple[bytes, str]:
    """A SEND body, well formed or broken in one of the ways a payload can be."""
    rng = ctx.rng
    md = metadata(ctx, seq).SerializePartialToString()
    payload = rng.randbytes(rng.choice([0, 1, 16, 200, 3000]))
    variant = rng.choices(
        [
            "valid",
            "bad-crc",
            "no-checksum",
            "metadata-size-huge",
            "metadata-garbage",
            "empty",
            "short",
            "oversize",
            "frame-too-large",
            "entry-metadata",
        ],
        [50, 8, 6, 5, 5, 4, 4, 4, 1, 3],
    )[0]
    if variant == "valid":
        return build_entry(md, payload), variant
    if variant == "bad-crc":
        entry = bytearray(build_entry(md, payload or b"x"))
        entry[rng.randrange(6, len(entry))] ^= 1 << rng.randrange(8)
        return bytes(entry), variant
    if variant == "no-checksum":
        return struct.pack(">I", len(md)) + md + payload, variant
    if variant == "metadata-size-huge":
        tail = struct.pack(">I", rng.choice([len(md) + 10_000, 2**32 - 1])) + md + payload
        return struct.pack(">HI", 0x0E01, 0) + tail, variant
    if variant == "metadata-garbage":
        return build_entry(rng.randbytes(rng.randrange(1, 40)), payload), variant
    if variant == "empty":
        return b"", variant
    if variant == "short":
        return rng.randbytes(rng.randrange(1, 6)), variant
    if variant == "oversize":
        return build_entry(md, b"o" * (MAX_MESSAGE_SIZE + rng.randrange(1, 2000))), variant
    if variant == "frame-too-large":
        return build_entry(md, b"f" * FRAME_LIMIT), variant
    extra = rng.randbytes(rng.randrange(0, 12))
    size = rng.choice([len(extra), len(extra) + 5, 2**32 - 1])
    return struct.pack(">HI", 0x0E02, size) + extra + build_entry(md, payload), variant


class Gen:
    """Commands for one session: plausible fields, mixed with edge values."""

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.rng = ctx.rng
        self.request_ids = iter(range(100, 10_000))

    def rid(self) -> int:
        return self.rng.choice(U64_EDGE) if self.rng.random() < 0.15 else next(self.request_ids)

    def consumer_id(self) -> int:
        rng = self.rng
        if self.ctx.consumer_ids and rng.random() < 0.7:
            return rng.choice(self.ctx.consumer_ids)
        return rng.choice([0, 3, 4, 99, 2**63, 2**64 - 1])

    def producer_id(self) -> int:
        rng = self.rng
        return 1 if rng.random() < 0.7 else rng.choice([0, 2, 3, 42, 2**63, 2**64 - 1])

    def topic(self, bystander_ok: bool = False) -> str:
        rng = self.rng
        world = self.ctx.world
        r = rng.random()
        if r < 0.4:
            return self.ctx.topic
        if r < 0.55:
            return rng.choice(world.fuzz_topics)
        if r < 0.68:
            return rng.choice(world.extra_topics)
        if r < 0.86:
            return rng.choice(INVALID_TOPICS)
        if r < 0.93:
            return rng.choice(STORE_REJECTED_TOPICS)
        return world.bystander_topic if bystander_ok else self.ctx.topic

    def message_id(self) -> pb.MessageIdData:
        rng = self.rng
        ids = self.ctx.real_ids + self.ctx.bystander_ids or [(1, 0)]
        ledger, entry = rng.choice(ids)
        variant = rng.randrange(10)
        if variant == 1:
            entry += rng.choice([1, 1000])  # past the end
        elif variant == 2:
            ledger += 1
        elif variant == 3:
            ledger -= 1
        elif variant == 4:
            ledger, entry = rng.choice([(0, 0), (2**64 - 1, 2**64 - 1), (2**63 - 1, 2**63 - 1)])
        elif variant == 5:
            ledger, entry = rng.choice(U64_EDGE), rng.choice(U64_EDGE)
        mid = pb.MessageIdData(ledgerId=ledger % 2**64, entryId=entry % 2**64)
        if rng.random() < 0.2:
            mid.partition = rng.choice(I32_EDGE)
        if rng.random() < 0.2:
            mid.batch_index = rng.choice(I32_EDGE)
        if rng.random() < 0.15:
            mid.ack_set.extend(rng.choice(I64_EDGE) for _ in range(rng.randrange(1, 3)))
        if rng.random() < 0.1:
            mid.batch_size = rng.choice(I32_EDGE)
        return mid

    def schema(self) -> pb.Schema:
        rng = self.rng
        return pb.Schema(
            name=rng.choice(STR_EDGE),
            schema_data=rng.randbytes(rng.choice([0, 3, 40])),
            type=rng.choice(list(pb.Schema.Type.values())),
            properties=[pb.KeyValue(key="k", value=rng.choice(STR_EDGE))]
            if rng.random() < 0.3
            else [],
        )

    # -------------------------------------------------------- one per command

    def send(self) -> tuple[BaseCommand, bytes | None, str]:
        rng = self.rng
        seq = self.ctx.next_seq if rng.random() < 0.8 else rng.choice(U64_EDGE)
        self.ctx.next_seq += 1
        body, variant = send_body(self.ctx, seq)
        send = pb.CommandSend(producer_id=self.producer_id(), sequence_id=seq)
        if rng.random() < 0.15:
            send.num_messages = rng.choice(I32_EDGE)
        if rng.random() < 0.1:
            send.highest_sequence_id = rng.choice(U64_EDGE)
        if rng.random() < 0.05:
            send.is_chunk = True
        if rng.random() < 0.05:
            send.marker = True
        if rng.random() < 0.05:
            send.txnid_most_bits = rng.choice(U64_EDGE)
        return T(type=T.SEND, send=send), body, f"send/{variant}"

    def ack(self) -> tuple[BaseCommand, bytes | None, str]:
        rng = self.rng
        cumulative = rng.random() < 0.3
        ack = pb.CommandAck(
            consumer_id=self.consumer_id(),
            ack_type=pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual,
        )
        count = rng.choice([1, 1, 1, 2, 4]) if cumulative else rng.choice([0, 1, 1, 2, 3, 40])
        ack.message_id.extend(self.message_id() for _ in range(count))
        if rng.random() < 0.5:
            ack.request_id = self.rid()
        if rng.random() < 0.1:
            ack.validation_error = rng.choice(list(pb.CommandAck.ValidationError.values()))
        if rng.random() < 0.1:
            ack.properties.add(key=rng.choice(STR_EDGE), value=rng.choice(I64_EDGE) % 2**64)
        body = None
        label = "ack/cumulative" if cumulative else "ack/individual"
        if rng.random() < 0.3:
            # PIP-371: a reply rides on the ack, as the bytes after the command.
            ack.reply_to_client = rng.choice(
                [
                    self.ctx.producer_name,
                    self.ctx.world.bystander_producer,
                    "nobody-" + str(rng.randrange(5)),
                    "",
                    "a" * 200,
                ]
            )
            if rng.random() < 0.3:
                ack.reply_is_error = True
            size = rng.choice([0, 1, 100, 5000, MAX_MESSAGE_SIZE + 1])
            body = rng.randbytes(size) if size < 10_000 else b"r" * size
            label += "+reply"
        return T(type=T.ACK, ack=ack), body, label

    def producer(self) -> tuple[BaseCommand, bytes | None, str]:
        rng = self.rng
        topic = self.topic(bystander_ok=True)
        bystander = topic == self.ctx.world.bystander_topic
        modes = list(pb.ProducerAccessMode.values())
        if bystander:  # an exclusive take-over of someone's topic is no bad input
            modes = [pb.Exclusive, pb.WaitForExclusive]
        producer = pb.CommandProducer(
            topic=topic,
            producer_id=self.producer_id() if rng.random() < 0.5 else rng.randrange(2, 9),
            request_id=self.rid(),
        )
        if rng.random() < 0.6:
            producer.producer_name = rng.choice(
                [
                    self.ctx.producer_name,
                    self.ctx.world.bystander_producer,
                    "",
                    "fz-name-" + str(rng.randrange(4)),
                    *STR_EDGE,
                ]
            )
        if rng.random() < 0.4:
            producer.producer_access_mode = rng.choice(modes)
        if rng.random() < 0.2:
            producer.topic_epoch = rng.choice(U64_EDGE)
        if rng.random() < 0.2 and not bystander:
            producer.schema.CopyFrom(self.schema())
        if rng.random() < 0.1:
            producer.metadata.add(key=rng.choice(STR_EDGE), value=rng.choice(STR_EDGE))
        if rng.random() < 0.1:
            producer.epoch = rng.choice(U64_EDGE)
        if rng.random() < 0.1:
            producer.user_provided_producer_name = rng.random() < 0.5
        self.ctx.producer_ids.add(producer.producer_id)
        return T(type=T.PRODUCER, producer=producer), None, "producer"

    def subscribe(self) -> tuple[BaseCommand, bytes | None, str]:
        rng = self.rng
        world = self.ctx.world
        topic = self.topic(bystander_ok=True)
        bystander = topic == world.bystander_topic
        names = [f"fz-{self.ctx.n}-{rng.randrange(3)}", f"fz{self.ctx.n}", "", *STR_EDGE]
        if bystander:
            names.append(world.bystander_sub)
        subscribe = pb.CommandSubscribe(
            topic=topic,
            subscription=rng.choice(names),
            subType=rng.choice(list(pb.CommandSubscribe.SubType.values())),
            consumer_id=self.consumer_id() if rng.random() < 0.3 else rng.randrange(3, 9),
            request_id=self.rid(),
        )
        if rng.random() < 0.4:
            subscribe.durable = rng.random() < 0.5
        if rng.random() < 0.4:
            subscribe.initialPosition = rng.choice(
                list(pb.CommandSubscribe.InitialPosition.values())
            )
        if rng.random() < 0.2:
            subscribe.start_message_id.CopyFrom(self.message_id())
        if rng.random() < 0.2:
            subscribe.priority_level = rng.choice(I32_EDGE)
        if rng.random() < 0.2:
            meta = subscribe.keySharedMeta
            meta.keySharedMode = rng.choice(list(pb.KeySharedMode.values()))
            for _ in range(rng.randrange(4)):
                meta.hashRanges.add(
                    start=rng.choice([*I32_EDGE, 100, 65535]), end=rng.choice([*I32_EDGE, 65536])
                )
        if rng.random() < 0.15 and not bystander:
            subscribe.schema.CopyFrom(self.schema())
        if rng.random() < 0.15:
            subscribe.consumer_epoch = rng.choice(U64_EDGE)
        if rng.random() < 0.2:
            subscribe.force_topic_creation = rng.random() < 0.5
        if rng.random() < 0.1:
            subscribe.consumer_name = rng.choice(STR_EDGE)
        if rng.random() < 0.05:
            subscribe.read_compacted = True
        if rng.random() < 0.05:
            subscribe.start_message_rollback_duration_sec = rng.choice(U64_EDGE)
        self.ctx.consumer_ids.append(subscribe.consumer_id)
        return T(type=T.SUBSCRIBE, subscribe=subscribe), None, "subscribe"

    def flow(self) -> tuple[BaseCommand, bytes | None, str]:
        permits = self.rng.choice(U32_EDGE)
        flow = pb.CommandFlow(consumer_id=self.consumer_id(), messagePermits=permits)
        return T(type=T.FLOW, flow=flow), None, "flow"

    def redeliver(self) -> tuple[BaseCommand, bytes | None, str]:
        rng = self.rng
        request = pb.CommandRedeliverUnacknowledgedMessages(consumer_id=self.consumer_id())
        request.message_ids.extend(self.message_id() for _ in range(rng.choice([0, 1, 3])))
        if rng.random() < 0.3:
            request.consumer_epoch = rng.choice(U64_EDGE)
        return (
            T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=request),
            None,
            "redeliver",
        )

    def seek(self) -> tuple[BaseCommand, bytes | None, str]:
        rng = self.rng
        seek = pb.CommandSeek(consumer_id=self.consumer_id(), request_id=self.rid())
        r = rng.random()
        if r < 0.55:
            seek.message_id.CopyFrom(self.message_id())
        elif r < 0.9:
            seek.message_publish_time = rng.choice([*U64_EDGE, int(time.time() * 1000)])
        return T(type=T.SEEK, seek=seek), None, "seek"

    def lookup(self) -> tuple[BaseCommand, bytes | None, str]:
        lookup = pb.CommandLookupTopic(topic=self.topic(True), request_id=self.rid())
        if self.rng.random() < 0.3:
            lookup.authoritative = True
        if self.rng.random() < 0.1:
            lookup.advertised_listener_name = self.rng.choice(STR_EDGE)
        return T(type=T.LOOKUP, lookupTopic=lookup), None, "lookup"

    def partitioned_metadata(self) -> tuple[BaseCommand, bytes | None, str]:
        request = pb.CommandPartitionedTopicMetadata(topic=self.topic(True), request_id=self.rid())
        if self.rng.random() < 0.5:
            request.metadata_auto_creation_enabled = self.rng.random() < 0.5
        return T(type=T.PARTITIONED_METADATA, partitionMetadata=request), None, "partitioned"

    def get_schema(self) -> tuple[BaseCommand, bytes | None, str]:
        rng = self.rng
        request = pb.CommandGetSchema(topic=self.topic(True), request_id=self.rid())
        if rng.random() < 0.5:
            request.schema_version = rng.choice(
                [b"", b"\x00" * 8, b"\xff" * 8, struct.pack(">q", 0), rng.randbytes(3)]
            )
        return T(type=T.GET_SCHEMA, getSchema=request), None, "get_schema"

    def get_or_create_schema(self) -> tuple[BaseCommand, bytes | None, str]:
        request = pb.CommandGetOrCreateSchema(
            topic=self.topic(), request_id=self.rid(), schema=self.schema()
        )
        return T(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=request), None, "get_or_create"

    def get_topics(self) -> tuple[BaseCommand, bytes | None, str]:
        rng = self.rng
        request = pb.CommandGetTopicsOfNamespace(
            namespace=rng.choice(NAMESPACES), request_id=self.rid()
        )
        if rng.random() < 0.5:
            request.mode = rng.choice(list(pb.CommandGetTopicsOfNamespace.Mode.values()))
        if rng.random() < 0.2:
            request.topics_pattern = rng.choice(["", ".*", "(", "[a-"])
        return T(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=request), None, "topics"

    def by_consumer(self) -> tuple[BaseCommand, bytes | None, str]:
        rng = self.rng
        kind = rng.choice(["last", "stats", "close", "unsubscribe"])
        cid = self.consumer_id()
        if kind == "last":
            request = pb.CommandGetLastMessageId(consumer_id=cid, request_id=self.rid())
            return T(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=request), None, "last_id"
        if kind == "stats":
            stats = pb.CommandConsumerStats(consumer_id=cid, request_id=self.rid())
            return T(type=T.CONSUMER_STATS, consumerStats=stats), None, "stats"
        if kind == "close":
            close = pb.CommandCloseConsumer(consumer_id=cid, request_id=self.rid())
            return T(type=T.CLOSE_CONSUMER, close_consumer=close), None, "close_consumer"
        unsubscribe = pb.CommandUnsubscribe(consumer_id=cid, request_id=self.rid())
        if rng.random() < 0.5:
            unsubscribe.force = rng.random() < 0.5
        return T(type=T.UNSUBSCRIBE, unsubscribe=unsubscribe), None, "unsubscribe"

    def close_producer(self) -> tuple[BaseCommand, bytes | None, str]:
        close = pb.CommandCloseProducer(producer_id=self.producer_id(), request_id=self.rid())
        return T(type=T.CLOSE_PRODUCER, close_producer=close), None, "close_producer"

    def connect(self) -> tuple[BaseCommand, bytes | None, str]:
        rng = self.rng
        connect = pb.CommandConnect(
            client_version=rng.choice(
                ["fuzz", "Pulsar-CPP-v3.5", "Pulsar-CPP-v99999999999.1", *STR_EDGE]
            ),
            protocol_version=rng.choice([*I32_EDGE, 21, 9]),
        )
        if rng.random() < 0.3:
            connect.auth_method_name = rng.choice(STR_EDGE)
            connect.auth_data = rng.randbytes(8)
        if rng.random() < 0.3:
            connect.feature_flags.supports_request_reply = rng.random() < 0.5
        if rng.random() < 0.1:
            connect.proxy_to_broker_url = rng.choice(STR_EDGE)
        return T(type=T.CONNECT, connect=connect), None, "connect"

    def ping(self) -> tuple[BaseCommand, bytes | None, str]:
        if self.rng.random() < 0.5:
            return T(type=T.PONG, pong=pb.CommandPong()), None, "pong"
        return T(type=T.PING, ping=pb.CommandPing()), None, "ping"

    def broker_bound(self) -> tuple[BaseCommand, bytes | None, str]:
        """Commands only a broker sends, sent to the broker."""
        rng = self.rng
        mid = self.message_id()
        choices: list[tuple[BaseCommand, bytes | None]] = [
            (T(type=T.CONNECTED, connected=pb.CommandConnected(server_version="x")), None),
            (
                T(
                    type=T.SEND_RECEIPT,
                    send_receipt=pb.CommandSendReceipt(producer_id=1, sequence_id=0),
                ),
                None,
            ),
            (
                T(type=T.MESSAGE, message=pb.CommandMessage(consumer_id=1, message_id=mid)),
                build_entry(metadata(self.ctx, 0).SerializePartialToString(), b"m"),
            ),
            (T(type=T.SUCCESS, success=pb.CommandSuccess(request_id=1)), None),
            (
                T(
                    type=T.ERROR,
                    error=pb.CommandError(request_id=1, error=pb.UnknownError, message="e"),
                ),
                None,
            ),
            (
                T(
                    type=T.REACHED_END_OF_TOPIC,
                    reachedEndOfTopic=pb.CommandReachedEndOfTopic(consumer_id=1),
                ),
                None,
            ),
            (T(type=T.ACK_RESPONSE, ackResponse=pb.CommandAckResponse(consumer_id=1)), None),
            (T(type=T.AUTH_CHALLENGE, authChallenge=pb.CommandAuthChallenge()), None),
            (T(type=T.AUTH_RESPONSE, authResponse=pb.CommandAuthResponse()), None),
            (
                T(
                    type=T.REQUEST_RECEIPT,
                    requestReceipt=pb.CommandRequestReceipt(reply_to_producer_id=1),
                ),
                b"reply",
            ),
            (
                T(
                    type=T.ACTIVE_CONSUMER_CHANGE,
                    active_consumer_change=pb.CommandActiveConsumerChange(consumer_id=1),
                ),
                None,
            ),
        ]
        command, body = rng.choice(choices)
        return command, body, "broker-bound"

    def unknown_type(self) -> bytes:
        rng = self.rng
        kind = rng.choice([1, 41, 50, 55, 67, 70, 200, 1000, 2**31 - 1])
        extra = b""
        if rng.random() < 0.5:  # an unknown length-delimited field
            payload = rng.randbytes(rng.randrange(6))
            extra = varint((rng.randrange(100, 1000) << 3) | 2) + varint(len(payload)) + payload
        return reframe(b"\x08" + varint(kind) + extra, rng.randbytes(rng.choice([0, 0, 5])))

    def garbage(self) -> bytes:
        rng = self.rng
        return rng.choice(
            [
                b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + rng.randbytes(20),
                b"\x00\x00\x00\x00",
                b"\x00\x00\x00\x03abc",
                b"\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00",
                rng.randbytes(rng.randrange(1, 64)),
            ]
        )


GENERATORS: list[tuple[str, int]] = [
    ("send", 14),
    ("ack", 12),
    ("producer", 8),
    ("subscribe", 8),
    ("flow", 5),
    ("redeliver", 4),
    ("seek", 5),
    ("lookup", 4),
    ("partitioned_metadata", 4),
    ("get_schema", 3),
    ("get_or_create_schema", 3),
    ("get_topics", 2),
    ("by_consumer", 9),
    ("close_producer", 3),
    ("connect", 2),
    ("ping", 2),
    ("broker_bound", 3),
    ("unknown_type", 3),
    ("garbage", 1),
]


def mutate_fields(rng: random.Random, command: BaseCommand) -> str:
    """Put edge values in one or two scalar fields of the command's own message."""
    subs = [f for f in command.DESCRIPTOR.fields if f.message_type and command.HasField(f.name)]
    if not subs:
        return "none"
    sub = getattr(command, rng.choice(subs).name)
    scalars = [f for f in sub.DESCRIPTOR.fields if f.message_type is None and not f.is_repeated]
    changed = []
    for fd in rng.sample(scalars, min(len(scalars), rng.choice([1, 1, 2]))):
        value = edge_value(rng, fd)
        if value is None:
            continue
        if rng.random() < 0.04 and fd.is_required:
            sub.ClearField(fd.name)
            changed.append(f"-{fd.name}")
            continue
        setattr(sub, fd.name, value)
        changed.append(fd.name)
    return ",".join(changed)


def edge_value(rng: random.Random, fd: FieldDescriptor) -> object:
    kind = fd.type
    if kind in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return rng.choice(U64_EDGE)
    if kind in (
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SFIXED64,
    ):
        return rng.choice(I64_EDGE)
    if kind in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return rng.choice(U32_EDGE)
    if kind in (
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SFIXED32,
    ):
        return rng.choice(I32_EDGE)
    if kind == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if kind == FieldDescriptor.TYPE_STRING:
        return rng.choice(STR_EDGE + INVALID_TOPICS[:6])
    if kind == FieldDescriptor.TYPE_BYTES:
        return rng.randbytes(rng.choice([0, 1, 8, 33]))
    if kind == FieldDescriptor.TYPE_ENUM:
        return rng.choice(fd.enum_type.values).number
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return rng.choice([0.0, -1.0, float("inf"), float("nan"), 1e300])
    return None


def mutate_command_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """Garble the serialized command of one frame (the frame sizes are made right after)."""
    out = bytearray(data)
    how = rng.choice(["flip", "flip", "truncate", "append", "insert", "duplicate", "zero"])
    if how == "flip":
        for _ in range(rng.randrange(1, 4)):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    elif how == "truncate":
        del out[rng.randrange(1, len(out)) :]
    elif how == "append":
        out += rng.randbytes(rng.randrange(1, 12))
    elif how == "insert":
        at = rng.randrange(len(out))
        out[at:at] = rng.randbytes(rng.randrange(1, 6))
    elif how == "duplicate":  # repeated fields: protobuf merges, the later value wins
        at = rng.randrange(2, len(out)) if len(out) > 2 else len(out)
        out += out[2:at]
    else:
        out[rng.randrange(len(out))] = 0
    return bytes(out), how


def mutate_stream(rng: random.Random, pieces: list[bytes]) -> tuple[bytes, str]:
    """Break the framing: header sizes, cut frames, inserted or flipped bytes."""
    starts = []
    pos = 0
    for piece in pieces:
        starts.append(pos)
        pos += len(piece)
    data = bytearray(b"".join(pieces))
    which = rng.randrange(len(pieces))
    start = starts[which]
    how = rng.choice(
        ["total-size", "total-size", "command-size", "cut", "insert", "flip", "drop-head"]
    )
    if how == "total-size" and len(pieces[which]) >= 8:
        size = rng.choice([0, 1, 3, 4, 5, 2**31, 2**32 - 1, FRAME_LIMIT + 1, FRAME_LIMIT])
        if rng.random() < 0.5:
            size = max(0, len(pieces[which]) - 4 + rng.choice([-3, -1, 1, 2, 50]))
        data[start : start + 4] = struct.pack(">I", size)
    elif how == "command-size" and len(pieces[which]) >= 8:
        (total,) = struct.unpack_from(">I", data, start)
        size = rng.choice([0, 1, total - 4 + 1, total, 2**32 - 1, max(1, total // 2)])
        data[start + 4 : start + 8] = struct.pack(">I", size % 2**32)
    elif how == "cut":
        end = start + rng.randrange(1, max(2, len(pieces[which])))
        del data[end : start + len(pieces[which])]
    elif how == "insert":
        at = rng.choice([*starts, len(data)])
        data[at:at] = rng.randbytes(rng.randrange(1, 9))
    elif how == "flip":
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    else:
        del data[start : start + rng.randrange(1, 8)]
    return bytes(data), how


# ---------------------------------------------------------------- running sessions


def setup(peer: Peer, ctx: Ctx) -> None:
    """A valid start: CONNECT, a producer, a consumer, two stored messages."""
    rng = ctx.rng
    world = ctx.world
    connect = pb.CommandConnect(
        client_version=f"fuzz-{ctx.n}",
        protocol_version=rng.choice([21, 21, 19, 9, 2]),
        feature_flags=pb.FeatureFlags(supports_request_reply=rng.random() < 0.7),
    )
    answer = peer.request(T(type=T.CONNECT, connect=connect), {T.CONNECTED}, None)
    assert answer.command.type == T.CONNECTED, describe(answer)
    ctx.connected = True
    # The previous session's connection may not be released yet (an exclusive producer).
    for attempt in range(100):
        request_id = 1 + attempt
        producer = pb.CommandProducer(topic=ctx.topic, producer_id=1, request_id=request_id)
        answer = peer.request(
            T(type=T.PRODUCER, producer=producer), {T.PRODUCER_SUCCESS}, request_id
        )
        if answer.command.type == T.PRODUCER_SUCCESS:
            break
        assert answer.command.error.error in (pb.ProducerBusy, pb.ProducerFenced), describe(answer)
        time.sleep(0.02)
    else:
        raise AssertionError(f"session {ctx.n}: no producer on {ctx.topic}: {describe(answer)}")
    ctx.producer_name = answer.command.producer_success.producer_name
    ctx.producer_ids.add(1)
    subscribe = pb.CommandSubscribe(
        topic=ctx.topic,
        subscription=f"fz{ctx.n}",
        subType=rng.choice(list(pb.CommandSubscribe.SubType.values())),
        consumer_id=1,
        request_id=500,
        durable=rng.random() < 0.7,
        initialPosition=pb.CommandSubscribe.Latest,
    )
    answer = peer.request(T(type=T.SUBSCRIBE, subscribe=subscribe), {T.SUCCESS}, 500)
    assert answer.command.type == T.SUCCESS, describe(answer)
    ctx.consumer_ids.append(1)
    peer.send(frame_bytes(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=5))))
    for seq in (0, 1):
        md = pb.MessageMetadata(
            producer_name=ctx.producer_name, sequence_id=seq, publish_time=int(time.time() * 1000)
        ).SerializeToString()
        body = build_entry(md, f"setup-{ctx.n}-{seq}".encode())
        send = T(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=seq))
        start = len(peer.received)
        peer.send(encode_command_with_body(send, body))
        receipt = peer.await_answer({T.SEND_RECEIPT, T.SEND_ERROR}, (1, seq), start, "SEND")
        assert receipt.command.type == T.SEND_RECEIPT, describe(receipt)
        mid = receipt.command.send_receipt.message_id
        ctx.ledger_id = mid.ledgerId
        ctx.real_ids.append((mid.ledgerId, mid.entryId))
        world.remember(ctx.topic, mid.ledgerId, mid.entryId, body)
    if rng.random() < 0.2:
        # A consumer on the bystander's topic (a subscription of its own), for acks
        # whose PIP-371 reply names the bystander's producer.
        subscribe = pb.CommandSubscribe(
            topic=world.bystander_topic,
            subscription=f"fz-by-{ctx.n}",
            subType=pb.CommandSubscribe.Shared,
            consumer_id=2,
            request_id=501,
            durable=False,
            initialPosition=pb.CommandSubscribe.Earliest,
        )
        answer = peer.request(T(type=T.SUBSCRIBE, subscribe=subscribe), {T.SUCCESS}, 501)
        assert answer.command.type == T.SUCCESS, describe(answer)
        ctx.consumer_ids.append(2)
        flow = T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=2, messagePermits=2))
        peer.send(frame_bytes(flow))

        def got_message() -> bool:
            return any(
                f.command.type == T.MESSAGE and f.command.message.consumer_id == 2
                for f in peer.received
            )

        peer.wait_for(got_message, time.monotonic() + 2)
        for f in peer.received:
            if f.command.type == T.MESSAGE and f.command.message.consumer_id == 2:
                mid = f.command.message.message_id
                ctx.bystander_ids.append((mid.ledgerId, mid.entryId))


def fuzz_pieces(ctx: Ctx) -> tuple[list[bytes], list[str]]:
    rng = ctx.rng
    gen = Gen(ctx)
    names = [name for name, _ in GENERATORS]
    weights = [weight for _, weight in GENERATORS]
    pieces: list[bytes] = []
    labels: list[str] = []
    if not ctx.connected and rng.random() < 0.6:
        command, body, label = gen.connect()
        if rng.random() < 0.3:
            label += f"[{mutate_fields(rng, command)}]"
        pieces.append(frame_bytes(command, body))
        labels.append(label)
    for _ in range(rng.randint(1, 6)):
        name = rng.choices(names, weights)[0]
        produced = getattr(gen, name)()
        if isinstance(produced, bytes):
            pieces.append(produced)
            labels.append(name)
            continue
        command, body, label = produced
        if rng.random() < 0.25:
            label += f"[{mutate_fields(rng, command)}]"
        data = command.SerializePartialToString(deterministic=True)
        if rng.random() < 0.07:
            data, how = mutate_command_bytes(rng, data)
            label += f"<{how}>"
            pieces.append(reframe(data, body or b""))
        elif body is not None and rng.random() < 0.05:
            flipped = bytearray(body or b"\x00")
            flipped[rng.randrange(len(flipped))] ^= 0x10
            label += "<body-flip>"
            pieces.append(reframe(data, bytes(flipped)))
        else:
            pieces.append(reframe(data, body or b""))
        labels.append(label)
    return pieces, labels


def run_session(world: World, n: int) -> None:
    rng = random.Random(f"{SEED}:{n}")
    ctx = Ctx(n=n, rng=rng, world=world, topic=rng.choice(world.fuzz_topics))
    peer = Peer(world.port)
    try:
        if rng.random() < 0.94:
            setup(peer, ctx)
        else:
            world.stats["session/no-connect"] += 1
        fuzz_phase(peer, ctx)
    finally:
        peer.close()


def fuzz_phase(peer: Peer, ctx: Ctx) -> None:
    rng = ctx.rng
    world = ctx.world
    sentinel = frame_bytes(T(type=T.PING, ping=pb.CommandPing()))
    in_use = set(ctx.consumer_ids)
    pieces, labels = fuzz_pieces(ctx)
    how = ""
    if rng.random() < 0.1:
        data, how = mutate_stream(rng, pieces)
    else:
        data = b"".join(pieces)
    data += sentinel
    prediction = predict(data, ctx.connected, in_use)
    for label in labels:
        world.stats[f"action/{label.split('[')[0].split('<')[0]}"] += 1
        if "[" in label:
            world.stats["mutation/fields"] += 1
        if "<" in label:
            world.stats["mutation/command-bytes"] += 1
    if how:
        world.stats[f"mutation/stream-{how}"] += 1
    plan = " | ".join(labels) + (f" ~stream:{how}" if how else "")
    start = len(peer.received)

    # Send in one to three writes, so frames are cut at odd places.
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(3))))
    for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
        if not peer.send(data[a:b]):
            break

    must_close = bool(prediction.close_reasons)
    deadline = time.monotonic() + SESSION_DEADLINE

    def answers() -> list[Frame]:
        return peer.received[start:]

    def all_answered() -> bool:
        return not match(prediction.expects, answers())

    where = f"session {ctx.n} (seed {SEED}): {plan}"
    if must_close:
        peer.wait_for(lambda: False, deadline)
        assert peer.eof, f"{where}: the broker should have closed the connection (hang)"
        reasons = [e for f in answers() if (e := error_text(f)) is not None]
        assert any(r in e for e in reasons for r in prediction.close_reasons), (
            f"{where}: closed without saying {prediction.close_reasons}; it said {reasons}"
        )
        # Nothing after the offending bytes was acted on (the sentinel PING, say).
        pings = sum(1 for f in prediction.handled if f.command.type == T.PING)
        pongs = sum(1 for f in answers() if f.command.type == T.PONG)
        assert pongs <= pings, f"{where}: the broker went on reading after the bad input"
        world.stats["outcome/closed"] += 1
    else:
        answered = peer.wait_for(all_answered, deadline)
        missing = match(prediction.expects, answers())
        if not answered:
            got = [describe(f) for f in answers()]
            detail = [f"{e.label} key={e.key} {e.texts} {e.code}" for e in missing]
            state = "closed the connection" if peer.eof else "gave no (or a wrong) answer"
            sent = [describe(f) for f in prediction.frames]
            raise AssertionError(
                f"{where}: the broker {state}; missing {detail}; got {got}; sent {sent}"
            )
        if prediction.leftover:
            # The sentinel PING is inside an incomplete frame: the broker waits for
            # the rest. Hang up; it must let go of the connection.
            with contextlib.suppress(OSError):
                peer.sock.shutdown(socket.SHUT_WR)
            peer.wait_for(lambda: False, time.monotonic() + SESSION_DEADLINE)
            assert peer.eof, f"{where}: the broker kept a half-closed connection"
            world.stats["outcome/incomplete-frame"] += 1
        else:
            world.stats["outcome/answered"] += 1

    for frame in answers():
        text = error_text(frame)
        if text is None:
            continue
        world.stats["answers/errors"] += 1
        assert text.strip(), f"{where}: an error without words: {describe(frame)}"
        assert "internal error" not in text, f"{where}: {describe(frame)}"
    # What got a receipt is stored: remember it to read it back at the end.
    receipts = {
        answer_key(f): f.command.send_receipt.message_id
        for f in answers()
        if f.command.type == T.SEND_RECEIPT
    }
    world.stats["answers/receipts"] += len(receipts)
    reuses_id_1 = any(
        f.unknown_type is None
        and (
            (f.command.type == T.PRODUCER and f.command.producer.producer_id == 1)
            or (f.command.type == T.CLOSE_PRODUCER and f.command.close_producer.producer_id == 1)
        )
        for f in prediction.frames
    )
    if not reuses_id_1 and ctx.connected:
        sends = [
            f for f in prediction.frames if f.unknown_type is None and f.command.type == T.SEND
        ]
        keys = Counter((f.command.send.producer_id, f.command.send.sequence_id) for f in sends)
        for frame in sends:
            key = (frame.command.send.producer_id, frame.command.send.sequence_id)
            mid = receipts.get(key)
            if key[0] == 1 and keys[key] == 1 and mid is not None:
                world.remember(ctx.topic, mid.ledgerId, mid.entryId, frame.body)


# ---------------------------------------------------------------- health checks


def check_broker_accepts(port: int) -> None:
    peer = RawPeer(port)
    peer.send(T(type=T.PING, ping=pb.CommandPing()))
    peer.expect(T.PONG)
    peer.close()


class RawBystander:
    """One connection, opened before the fuzzing, that must stay up throughout: the
    official client would reconnect behind our back, a raw socket cannot."""

    def __init__(self, port: int, topic: str) -> None:
        self.peer = RawPeer(port, request_reply=False)
        self.name = self.peer.producer(topic, 1)
        self.peer.subscribe(topic, "raw-bystander", consumer_id=1, permits=1000)
        self.seq = 0

    def round_trip(self, payload: bytes) -> None:
        peer = self.peer
        self.seq += 1
        send = T(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=self.seq))
        md = pb.MessageMetadata(producer_name=self.name, sequence_id=self.seq, publish_time=1)
        peer.sock.sendall(
            encode_command_with_body(send, build_entry(md.SerializeToString(), payload))
        )
        receipt = delivered = False
        while not (receipt and delivered):
            frame = peer.next_frame(5)  # raises if the broker dropped the connection
            kind = frame.command.type
            if kind == T.SEND_RECEIPT and frame.command.send_receipt.sequence_id == self.seq:
                receipt = True
            elif kind == T.MESSAGE:
                assert frame.body.endswith(payload), f"raw bystander got {frame.body[-40:]!r}"
                delivered = True
            else:
                raise AssertionError(f"raw bystander was told: {describe(frame)}")


def read_back(port: int, topic: str, want: dict[int, tuple[int, bytes]]) -> None:
    """Every entry that got a receipt is delivered, byte for byte, from the earliest."""
    peer = RawPeer(port)
    subscribe = pb.CommandSubscribe(
        topic=topic,
        subscription=f"verify-{uuid.uuid4().hex[:8]}",
        subType=pb.CommandSubscribe.Exclusive,
        consumer_id=1,
        request_id=1,
        durable=False,
        initialPosition=pb.CommandSubscribe.Earliest,
    )
    peer.send(T(type=T.SUBSCRIBE, subscribe=subscribe))
    peer.expect(T.SUCCESS)
    flow = T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=2**32 - 1))
    peer.send(flow)
    got: dict[int, tuple[int, bytes]] = {}
    deadline = time.monotonic() + 20
    while not want.keys() <= got.keys() and time.monotonic() < deadline:
        try:
            frame = peer.next_frame(0.2)
        except TimeoutError:
            peer.send(flow)  # entries that claim huge message counts eat permits
            continue
        if frame.command.type == T.MESSAGE:
            mid = frame.command.message.message_id
            got[mid.entryId] = (mid.ledgerId, frame.body)
            if len(got) % 100 == 0:
                peer.send(flow)
    peer.close()
    missing = sorted(want.keys() - got.keys())
    assert not missing, f"{topic}: entries with receipts not delivered: {missing[:10]}"
    changed = [e for e, v in want.items() if got[e] != v]
    assert not changed, f"{topic}: entries that changed since their receipt: {changed[:10]}"


# ---------------------------------------------------------------- the test


def test_fuzzed_sessions_harm_nobody(
    fuzz_broker: EmbeddedBroker,
    client_factory: Callable[..., pulsar.Client],
    broker_errors: ErrorRecords,
) -> None:
    run = uuid.uuid4().hex[:8]
    client = client_factory(fuzz_broker.service_url)
    bystander_topic = f"persistent://public/default/bystander-{run}"
    producer = client.create_producer(bystander_topic)
    consumer = client.subscribe(
        bystander_topic,
        "bystander",
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    published = [f"before-{i}".encode() for i in range(20)]
    for i, value in enumerate(published):
        producer.send(value, properties={"i": str(i)}, partition_key=f"k{i % 3}")
    for value in published:
        msg = consumer.receive(5000)
        assert msg.data() == value
        consumer.acknowledge(msg)

    raw_bystander = RawBystander(fuzz_broker.port, f"persistent://public/default/raw-{run}")
    raw_bystander.round_trip(b"raw-before")

    world = World(
        port=fuzz_broker.port,
        bystander_topic=bystander_topic,
        bystander_sub="bystander",
        bystander_producer=producer.producer_name(),
        fuzz_topics=[f"persistent://public/default/fz-{run}-{k}" for k in range(6)],
        extra_topics=[
            *(f"persistent://public/default/fz-new-{run}-{k}" for k in range(4)),
            f"non-persistent://public/default/fz-np-{run}",
            f"fz-short-{run}",
            f"public/default/fz-3part-{run}",
            f"persistent://public/default/fz-{run}-0-partition-3",
            f"persistent://public/default/ünï-{run}",
            "persistent://public/default/.",
            "persistent://public/default/..",
            "persistent://public/default/%2F..%2F",
        ],
    )
    started = time.monotonic()
    per_batch = SESSIONS // BATCHES
    for batch in range(BATCHES):
        for n in range(batch * per_batch, (batch + 1) * per_batch):
            run_session(world, n)
        # Others are fine: new connections, the bystander, and nothing went wrong inside.
        check_broker_accepts(fuzz_broker.port)
        probe = f"probe-{batch}".encode()
        producer.send(probe)
        msg = consumer.receive(5000)
        assert msg.data() == probe, f"bystander after batch {batch}: got {msg.data()!r}"
        consumer.acknowledge(msg)
        published.append(probe)
        raw_bystander.round_trip(probe)
        assert not broker_errors.records, (
            f"the broker logged errors during batch {batch}:\n{broker_errors.report()}"
        )
    elapsed = time.monotonic() - started

    # Nothing the bystander stored was harmed, nothing foreign slipped into its topic.
    reader = client.create_reader(bystander_topic, pulsar.MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in published] == published
    with pytest.raises(pulsar.Timeout):
        reader.read_next(300)
    fresh = client.subscribe(
        bystander_topic, f"after-{run}", initial_position=pulsar.InitialPosition.Earliest
    )
    first = fresh.receive(5000)
    assert first.data() == published[0]
    assert first.properties() == {"i": "0"} and first.partition_key() == "k0"
    assert [fresh.receive(5000).data() for _ in published[1:]] == published[1:]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(200)

    # Everything a fuzzed session got a receipt for reads back unchanged.
    for topic, entries in world.stored.items():
        read_back(fuzz_broker.port, topic, entries)
    assert not broker_errors.records, broker_errors.report()

    stats = world.stats
    print(f"\n{SESSIONS} sessions in {elapsed:.1f}s (seed {SEED})")
    for key in sorted(stats):
        print(f"  {key}: {stats[key]}")
    # The fuzzer did reach the places it means to reach.
    assert stats["outcome/closed"] >= 20
    assert stats["outcome/answered"] >= 100
    assert stats["answers/receipts"] >= 50
    assert stats["answers/errors"] >= 100
    assert sum(len(e) for e in world.stored.values()) >= 2 * SESSIONS * 0.9


# ---------------------------------------------------------------- what the fuzzer found
#
# Each was a bug (an internal error, or another client harmed); each test states the
# behaviour the promise asks for.


def answer_to(peer: RawPeer, request_id: int) -> Frame:
    """The first frame answering ``request_id``, or the first ERROR, whichever comes."""
    while True:
        frame = peer.next_frame(5)
        if answer_key(frame) == request_id or frame.command.type == T.ERROR:
            return frame


def assert_no_internal_error(answer: Frame, errors: ErrorRecords) -> None:
    assert "internal error" not in (error_text(answer) or ""), describe(answer)
    assert not errors.records, errors.report()


def publish(
    peer: RawPeer, name: str, seq: int, payload: bytes, wait: float = 5
) -> tuple[pb.MessageIdData, bytes | None]:
    """Send one message on producer 1: its receipt's message id, and the body of the
    MESSAGE consumer 1 gets for it within ``wait`` seconds (None if none comes). The
    MESSAGE may come before the SEND_RECEIPT: the broker dispatches before its fsync."""
    send = T(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=seq))
    md = pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1)
    peer.sock.sendall(encode_command_with_body(send, build_entry(md.SerializeToString(), payload)))
    receipt: pb.MessageIdData | None = None
    delivered = None
    deadline = time.monotonic() + wait
    while receipt is None or delivered is None:
        try:
            frame = peer.next_frame(max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            break
        if frame.command.type == T.SEND_RECEIPT:
            receipt = frame.command.send_receipt.message_id
        elif frame.command.type == T.MESSAGE and frame.body.endswith(payload):
            delivered = frame.body
    assert receipt is not None, "no SEND_RECEIPT"
    return receipt, delivered


def unique_topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def exclusive_subscribe(peer: RawPeer, topic: str, request_id: int) -> None:
    subscribe = pb.CommandSubscribe(
        topic=topic,
        subscription="sub",
        subType=pb.CommandSubscribe.Exclusive,
        consumer_id=1,
        request_id=request_id,
        initialPosition=pb.CommandSubscribe.Earliest,
    )
    peer.send(T(type=T.SUBSCRIBE, subscribe=subscribe))
    assert answer_to(peer, request_id).command.type == T.SUCCESS
    peer.send(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=100)))


def test_partitioned_metadata_of_a_dotted_namespace_is_refused_cleanly(
    fuzz_broker: EmbeddedBroker, broker_errors: ErrorRecords
) -> None:
    peer = RawPeer(fuzz_broker.port)
    request = pb.CommandPartitionedTopicMetadata(topic="persistent://../../x", request_id=7)
    peer.send(T(type=T.PARTITIONED_METADATA, partitionMetadata=request))
    answer = answer_to(peer, 7)
    peer.close()
    assert answer.command.type == T.PARTITIONED_METADATA_RESPONSE, describe(answer)
    assert_no_internal_error(answer, broker_errors)


def test_producer_id_reuse_with_a_bad_topic_is_refused_cleanly(
    fuzz_broker: EmbeddedBroker, broker_errors: ErrorRecords
) -> None:
    peer = RawPeer(fuzz_broker.port)
    peer.producer(unique_topic("reuse"), 1)
    request = pb.CommandProducer(topic="ftp://public/default/x", producer_id=1, request_id=8)
    peer.send(T(type=T.PRODUCER, producer=request))
    answer = answer_to(peer, 8)
    peer.close()
    assert answer.command.type == T.ERROR
    assert answer.command.error.error in (pb.InvalidTopicName, pb.NotAllowedError)
    assert_no_internal_error(answer, broker_errors)


def test_cumulative_ack_without_message_id_gets_an_ack_response(
    fuzz_broker: EmbeddedBroker, broker_errors: ErrorRecords
) -> None:
    peer = RawPeer(fuzz_broker.port)
    exclusive_subscribe(peer, unique_topic("cumulative"), 1)
    ack = pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Cumulative, request_id=9)
    peer.send(T(type=T.ACK, ack=ack))
    answer = answer_to(peer, 9)
    peer.close()
    assert answer.command.type == T.ACK_RESPONSE, describe(answer)
    assert_no_internal_error(answer, broker_errors)


def test_overlong_names_are_refused_without_paths(
    fuzz_broker: EmbeddedBroker, broker_errors: ErrorRecords
) -> None:
    peer = RawPeer(fuzz_broker.port)
    long_topic = "persistent://public/default/" + "L" * 300
    producer = pb.CommandProducer(topic=long_topic, producer_id=1, request_id=11)
    peer.send(T(type=T.PRODUCER, producer=producer))
    answers = [answer_to(peer, 11)]
    subscribe = pb.CommandSubscribe(
        topic=unique_topic("long-sub"),
        subscription="s" * 300,
        subType=pb.CommandSubscribe.Shared,
        consumer_id=1,
        request_id=12,
    )
    peer.send(T(type=T.SUBSCRIBE, subscribe=subscribe))
    answers.append(answer_to(peer, 12))
    peer.close()
    for answer in answers:
        assert answer.command.type == T.ERROR
        assert str(fuzz_broker.data_dir) not in answer.command.error.message, describe(answer)
        assert_no_internal_error(answer, broker_errors)


def test_text_that_is_not_utf8_is_refused(
    fuzz_broker: EmbeddedBroker, broker_errors: ErrorRecords
) -> None:
    peer = RawPeer(fuzz_broker.port)
    lookup = pb.CommandLookupTopic(topic="persistent://public/default/ab", request_id=7)
    data = T(type=T.LOOKUP, lookupTopic=lookup).SerializeToString().replace(b"/ab", b"/a\xff")
    peer.sock.sendall(reframe(data))
    answer = answer_to(peer, 7)
    peer.close()
    assert_no_internal_error(answer, broker_errors)


def test_a_non_utf8_schema_name_does_not_poison_the_topic(fuzz_broker: EmbeddedBroker) -> None:
    topic = unique_topic("poisoned")
    offender = RawPeer(fuzz_broker.port)
    schema = pb.Schema(name="NAMEX", schema_data=b"", type=pb.Schema.String)
    request = pb.CommandGetOrCreateSchema(topic=topic, request_id=3, schema=schema)
    data = T(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=request).SerializeToString()
    offender.sock.sendall(reframe(data.replace(b"NAMEX", b"NAM\xffX")))
    answer_to(offender, 3)  # refused, one way or another
    offender.close()
    innocent = RawPeer(fuzz_broker.port)
    producer = pb.CommandProducer(
        topic=topic, producer_id=1, request_id=1, producer_access_mode=pb.Exclusive
    )
    innocent.send(T(type=T.PRODUCER, producer=producer))
    answer = answer_to(innocent, 1)
    innocent.close()
    assert answer.command.type == T.PRODUCER_SUCCESS, describe(answer)


def test_a_command_without_its_body_is_refused(fuzz_broker: EmbeddedBroker) -> None:
    peer = RawPeer(fuzz_broker.port)
    # Type SUBSCRIBE, but the only body is an UNSUBSCRIBE's (a flipped bit does this).
    odd = T(type=T.SUBSCRIBE, unsubscribe=pb.CommandUnsubscribe(consumer_id=1, request_id=101))
    peer.sock.sendall(reframe(odd.SerializeToString()))
    peer.send(T(type=T.PING, ping=pb.CommandPing()))
    frames = []
    with contextlib.suppress(ConnectionError):
        while not frames or frames[-1].command.type != T.PONG:
            frames.append(peer.next_frame(5))
    peer.close()
    assert any(f.command.type == T.ERROR for f in frames), [describe(f) for f in frames]
    assert all(answer_key(f) != 101 for f in frames), [describe(f) for f in frames]


@pytest.mark.parametrize("how", ["individual-later-ledger", "cumulative-far-entry"])
def test_an_ack_past_the_end_swallows_nothing(fuzz_broker: EmbeddedBroker, how: str) -> None:
    topic = unique_topic("ack-ahead")
    peer = RawPeer(fuzz_broker.port)
    name = peer.producer(topic, 1)
    exclusive_subscribe(peer, topic, 2)
    first, delivered = publish(peer, name, 0, b"m0")
    assert delivered is not None
    if how == "individual-later-ledger":
        bogus = pb.MessageIdData(ledgerId=first.ledgerId + 1, entryId=0)
        ack_type = pb.CommandAck.Individual
    else:
        bogus = pb.MessageIdData(ledgerId=first.ledgerId, entryId=first.entryId + 1000)
        ack_type = pb.CommandAck.Cumulative
    ack = pb.CommandAck(consumer_id=1, ack_type=ack_type, message_id=[bogus], request_id=3)
    peer.send(T(type=T.ACK, ack=ack))
    answer_to(peer, 3)
    _, delivered = publish(peer, name, 1, b"m1", wait=1.5)
    peer.close()
    assert delivered is not None, "m1 was stored and never delivered"


def test_a_seek_past_the_end_swallows_nothing(fuzz_broker: EmbeddedBroker) -> None:
    topic = unique_topic("seek-ahead")
    peer = RawPeer(fuzz_broker.port)
    name = peer.producer(topic, 1)
    exclusive_subscribe(peer, topic, 2)
    first, delivered = publish(peer, name, 0, b"m0")
    assert delivered is not None
    beyond = pb.MessageIdData(ledgerId=first.ledgerId, entryId=first.entryId + 100)
    peer.send(T(type=T.SEEK, seek=pb.CommandSeek(consumer_id=1, request_id=4, message_id=beyond)))
    assert answer_to(peer, 4).command.type == T.SUCCESS
    exclusive_subscribe(peer, topic, 5)  # a seek disconnects the consumers, as in Pulsar
    _, delivered = publish(peer, name, 1, b"m1", wait=1.5)
    peer.close()
    assert delivered is not None, "m1 was stored and never delivered"


def test_a_lying_num_messages_starves_nobody(
    fuzz_broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]
) -> None:
    topic = unique_topic("num-messages")
    client = client_factory(fuzz_broker.service_url)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    liar = RawPeer(fuzz_broker.port)
    name = liar.producer(topic, 1)
    send = pb.CommandSend(producer_id=1, sequence_id=0, num_messages=1_000_000)
    md = pb.MessageMetadata(producer_name=name, sequence_id=0, publish_time=1)
    liar.sock.sendall(
        encode_command_with_body(
            T(type=T.SEND, send=send), build_entry(md.SerializeToString(), b"liar")
        )
    )
    liar.expect(T.SEND_RECEIPT)
    client.create_producer(topic).send(b"honest")
    got = []
    for _ in range(2):
        msg = consumer.receive(1500)
        got.append(msg.data())
        consumer.acknowledge(msg)
    liar.close()
    assert got == [b"liar", b"honest"]
