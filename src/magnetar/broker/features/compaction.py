"""The compactor: Pulsar's TwoPhaseCompactor, run on a worker thread.

It reads the topic's compacted view as the last compaction left it (its compacted
ledger) followed by the log after that compaction's horizon, twice:

- phase one finds, for each key, the id (position, batch index) of its latest message;
  a message with an empty value (the client's tombstone: ``null_value``, or an empty
  payload, which Pulsar takes for one too) removes its key;
- phase two writes the entries that hold such latest messages to a new compacted
  ledger. An entry holding a batch keeps the batch's size: the messages not kept
  become ``compacted_out`` placeholders without payload (Pulsar's RawBatchConverter),
  so every kept message keeps its original batch index, and the bits of the kept ones
  are stored with it for dispatch.

Messages without a key leave the compacted view (Pulsar's default,
``topicCompactionRetainNullKey=false``), as do server markers; an entry whose batch
cannot be read stays whole, as Pulsar's compactor keeps it. Nothing here touches the
event loop or the ledger object: the sources are a snapshot of the log
(storage/log_snapshot.py) and a compacted ledger opened by this thread.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from magnetar.protocol.batch import build_batch, split_batch
from magnetar.protocol.compression import compress, decompress
from magnetar.protocol.errors import MalformedFrame
from magnetar.protocol.frames import build_entry, parse_payload
from magnetar.protocol.pb import pb
from magnetar.storage.compacted_ledger import CompactedLedger, CompactedLedgerWriter
from magnetar.storage.log_snapshot import LogSnapshot

_U32 = struct.Struct(">I")
# The worker gives the GIL up (sleep(0)) after each 0.5 ms of work: measured on a
# 50,000-message topic, a bystander's publish-and-receive round trip took 3.3-3.6 ms
# (p50) during the compaction instead of 21-22 ms, and the compaction 2.4 s, not 1.9 s.
PACE_EVERY = 0.0005
PACE_PAUSE = 0.0
MessageRef = tuple[int, int]  # (position, batch index; -1 for an entry that is no batch)


class Pacer:
    """Lets the event loop have the GIL often: the compactor is Python code that would
    otherwise keep it for a whole switch interval (5 ms) each time the loop asks, and
    a client's round trip needs the loop several times. Also where a cancelled
    compaction stops."""

    def __init__(self, cancelled: threading.Event, every: float = PACE_EVERY,
                 pause: float = PACE_PAUSE) -> None:
        self._cancelled = cancelled
        self._every = every
        self._pause = pause
        self._next = time.perf_counter() + every

    def __call__(self) -> None:
        if self._cancelled.is_set():
            raise CompactionCancelled
        now = time.perf_counter()
        if now >= self._next:
            time.sleep(self._pause)
            self._next = time.perf_counter() + self._every


class CompactionCancelled(Exception):
    """The broker is stopping: the compaction left nothing behind."""


@dataclass(slots=True)
class Message:
    index: int
    key: str | None
    tombstone: bool
    compacted_out: bool = False


@dataclass(slots=True)
class ParsedEntry:
    """An entry as the compactor sees it: its messages, and what is needed to write it
    again without some of them (``singles``: only for a readable batch)."""

    messages: list[Message]
    metadata: pb.MessageMetadata | None = None
    singles: list[tuple[pb.SingleMessageMetadata, bytes]] | None = None
    whole: bool = False  # a batch that cannot be read: kept as it is


@dataclass(slots=True)
class CompactionResult:
    ledger: CompactedLedger
    entries_read: int
    keys: int


def _no_pause() -> None:
    pass


def parse_entry(entry: bytes, pace: Callable[[], None] = _no_pause) -> ParsedEntry:
    """The messages of a stored entry (none for a server marker); ``pace`` is called
    between the steps of a big batch."""
    section = parse_payload(entry, verify_checksum=False)
    metadata = pb.MessageMetadata()
    metadata.MergeFromString(section.metadata)
    if metadata.HasField("marker_type"):
        return ParsedEntry([])
    if metadata.HasField("num_messages_in_batch") and not metadata.encryption_keys:
        try:
            raw = decompress(metadata.compression, section.payload, metadata.uncompressed_size)
            pace()
            singles = split_batch(raw, metadata.num_messages_in_batch)
            pace()
        except MalformedFrame:
            return ParsedEntry([], whole=True)  # Pulsar: "Whole batch will be included"
        messages = []
        for i, (single, payload) in enumerate(singles):
            key = single.partition_key if single.HasField("partition_key") else None
            messages.append(Message(i, key, single.null_value or not payload,
                                    single.compacted_out))
            if i & 127 == 127:
                pace()
        return ParsedEntry(messages, metadata, singles)
    key = metadata.partition_key if metadata.HasField("partition_key") else None
    size = (metadata.uncompressed_size if metadata.HasField("uncompressed_size")
            else len(section.payload))
    return ParsedEntry([Message(-1, key, metadata.null_value or size == 0)])


def phase_one(entries: Iterable[tuple[int, bytes]],
              cancelled: threading.Event) -> tuple[dict[str, MessageRef], int]:
    """The latest message of each key (tombstones remove keys); and the entries read."""
    latest: dict[str, MessageRef] = {}
    read = 0
    pace = Pacer(cancelled)
    for position, entry in entries:
        read += 1
        pace()
        for message in parse_entry(entry, pace).messages:
            if message.key is None or message.compacted_out:
                continue
            if message.tombstone:
                latest.pop(message.key, None)
            else:
                latest[message.key] = (position, message.index)
    return latest, read


def kept_part(position: int, entry: bytes, latest: dict[str, MessageRef],
              retain_null_key: bool,
              pace: Callable[[], None] = _no_pause) -> tuple[bytes, int | None] | None:
    """Phase two for one entry: what the compacted ledger keeps of it (the entry, and
    the bits of the kept batch messages when not all of them are), or None."""
    parsed = parse_entry(entry, pace)
    if parsed.whole:
        return entry, None

    def kept(message: Message) -> bool:
        if message.compacted_out:
            return False
        if message.key is None:
            return retain_null_key and not message.tombstone
        return latest.get(message.key) == (position, message.index)

    flags = [kept(message) for message in parsed.messages]
    if not any(flags):
        return None
    if parsed.singles is None:
        return entry, None
    mask = sum(1 << i for i, keep in enumerate(flags) if keep)
    live = sum(1 << m.index for m in parsed.messages if not m.compacted_out)
    if mask == live:
        # Nothing more to drop (a whole batch, or one compacted before): as it is.
        return entry, None if mask == (1 << len(flags)) - 1 else mask
    return _rebatch(entry, parsed, flags, pace), mask


def _rebatch(entry: bytes, parsed: ParsedEntry, flags: list[bool],
             pace: Callable[[], None]) -> bytes:
    """The batch again, with placeholders for the messages not kept."""
    assert parsed.metadata is not None and parsed.singles is not None
    singles = [
        (single, payload) if keep else (pb.SingleMessageMetadata(compacted_out=True), b"")
        for keep, (single, payload) in zip(flags, parsed.singles, strict=True)
    ]
    raw = build_batch(singles)
    pace()
    metadata = parsed.metadata
    metadata.uncompressed_size = len(raw)
    payload = compress(metadata.compression, raw)
    return _broker_entry_metadata(entry) + build_entry(metadata.SerializeToString(), payload)


def _broker_entry_metadata(entry: bytes) -> bytes:
    """The broker entry metadata section an entry starts with, if any (kept as it is)."""
    if entry[:2] != b"\x0e\x02" or len(entry) < 6:
        return b""
    return entry[: 6 + _U32.unpack_from(entry, 2)[0]]


def compact(
    sources: Callable[[], Iterator[tuple[int, bytes]]],
    target: Path,
    horizon: int,
    retain_null_key: bool,
    cancelled: threading.Event,
) -> CompactionResult:
    """Both phases over ``sources()`` (called once per phase); writes ``target`` and
    returns it opened. Any failure leaves no file behind."""
    latest, read = phase_one(sources(), cancelled)
    writer = CompactedLedgerWriter(target)
    pace = Pacer(cancelled)
    try:
        for position, entry in sources():
            pace()
            part = kept_part(position, entry, latest, retain_null_key, pace)
            if part is not None:
                writer.add(position, *part)
        ledger = writer.finish(horizon)
    except BaseException:
        writer.abort()
        raise
    return CompactionResult(ledger, read, len(latest))


def run_compaction(
    previous: Path | None,
    snapshot: LogSnapshot,
    target: Path,
    horizon: int,
    retain_null_key: bool,
    cancelled: threading.Event,
) -> CompactionResult:
    """The worker thread's job: the previous compacted ledger (if any) and then the
    log snapshot (the entries after its horizon) make the input."""
    old = CompactedLedger.open(previous) if previous is not None else None
    try:

        def sources() -> Iterator[tuple[int, bytes]]:
            if old is not None:
                yield from old.entries()
            yield from snapshot.entries()

        return compact(sources, target, horizon, retain_null_key, cancelled)
    finally:
        if old is not None:
            old.close()
