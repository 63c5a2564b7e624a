"""Kafka's record batch format (magic 2), read and written; no I/O.

A v2 record batch is a 61-byte header (base offset, batch length, partition leader
epoch, magic, CRC-32C of everything after it, attributes, last offset delta, base and
max timestamp, producer id and epoch, base sequence, record count) followed by the
records, compressed as a whole by the codec in the attributes' low three bits (none,
gzip, snappy, lz4, zstd). Each record is varint-framed: attributes, timestamp and
offset deltas, key, value and headers, every integer a zigzag varint. An entry a
protocol handler stores may hold several batches back to back.

Codecs follow Kafka's Java client: gzip streams, snappy in xerial's framing (raw
snappy is read too), LZ4 frames, zstd frames.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import crc32c as _crc32c
import lz4.frame
import snappy
import zstandard

__all__ = [
    "CODECS",
    "KafkaFormatError",
    "KafkaRecord",
    "KafkaRecordBatch",
    "encode_record_batch",
    "read_record_batches",
    "records_of",
]

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_CODEC_NAMES = {code: name for name, code in CODECS.items()}

# base offset, batch length, partition leader epoch, magic, crc, attributes, last
# offset delta, base timestamp, max timestamp, producer id, producer epoch, base
# sequence, record count
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
_CRC_START = 21  # the CRC covers the batch from its attributes on
_LOG_OVERHEAD = 12  # base offset and batch length, outside the batch length
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, minimum compatible version
_XERIAL_BLOCK = 32 * 1024
_U32 = struct.Struct(">i")

ATTR_CODEC = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
NO_TIMESTAMP = -1


class KafkaFormatError(ValueError):
    """Bytes that are not a well-formed Kafka v2 record batch."""


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    """One record; ``offset`` is absolute (base offset plus the record's delta) and
    ``timestamp`` in ms since the epoch (``-1``: none). Header values may be ``None``."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class KafkaRecordBatch:
    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: tuple[KafkaRecord, ...]

    @property
    def compression(self) -> str:
        return _CODEC_NAMES.get(self.attributes & ATTR_CODEC, "unknown")

    @property
    def log_append_time(self) -> bool:
        """The broker's append time (``max_timestamp``) replaces the records' own."""
        return bool(self.attributes & ATTR_LOG_APPEND_TIME)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        """A batch of transaction markers, not of data records."""
        return bool(self.attributes & ATTR_CONTROL)


# ---------------------------------------------------------------- reading


def read_record_batches(
    data: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> list[KafkaRecordBatch]:
    """The record batches in ``data``, in order; raises :class:`KafkaFormatError`."""
    view = memoryview(data)
    end = len(view)
    pos = 0
    batches = []
    if not end:
        raise KafkaFormatError("no record batch: the payload is empty")
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise KafkaFormatError(
                f"record batch header at byte {pos} is cut short ({end - pos} of "
                f"{HEADER_SIZE} bytes)"
            )
        (base_offset, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
         producer_id, producer_epoch, base_sequence, count) = _HEADER.unpack_from(view, pos)
        if magic != 2:
            raise KafkaFormatError(f"record batch at byte {pos} has magic {magic}; only "
                                   "v2 (magic 2) batches are read")
        batch_end = pos + _LOG_OVERHEAD + length
        if length < HEADER_SIZE - _LOG_OVERHEAD or batch_end > end:
            raise KafkaFormatError(f"record batch at byte {pos} declares {length} bytes; "
                                   f"{end - pos - _LOG_OVERHEAD} are there")
        if verify_crc:
            actual = _crc32c.crc32c(view[pos + _CRC_START:batch_end])
            if actual != crc:
                raise KafkaFormatError(f"record batch at byte {pos} fails its CRC-32C "
                                       f"(stored {crc:#010x}, computed {actual:#010x})")
        if count < 0:
            raise KafkaFormatError(f"record batch at byte {pos} has {count} records")
        body: bytes | memoryview = view[pos + HEADER_SIZE:batch_end]
        codec = attributes & ATTR_CODEC
        if codec:
            body = _decompress(codec, body)
        records = _read_records(body, count, base_offset, base_ts)
        batches.append(KafkaRecordBatch(
            base_offset, epoch, attributes, last_delta, base_ts, max_ts, producer_id,
            producer_epoch, base_sequence, records))
        pos = batch_end
    return batches


def _read_records(
    buf: bytes | memoryview, count: int, base_offset: int, base_ts: int
) -> tuple[KafkaRecord, ...]:
    records = []
    end_of_records = len(buf)
    pos = 0
    try:
        for _ in range(count):
            length, pos = _varint(buf, pos)
            end = pos + length
            if length < 0 or end > end_of_records:
                raise KafkaFormatError(f"record of {length} bytes runs past its batch")
            pos += 1  # record attributes: unused by the format so far
            ts_delta, pos = _varint(buf, pos)
            offset_delta, pos = _varint(buf, pos)
            key, pos = _bytes_field(buf, pos)
            value, pos = _bytes_field(buf, pos)
            header_count, pos = _varint(buf, pos)
            if header_count < 0:
                raise KafkaFormatError(f"record has {header_count} headers")
            headers = []
            for _ in range(header_count):
                name, pos = _bytes_field(buf, pos)
                if name is None:
                    raise KafkaFormatError("a record header has no key")
                header_value, pos = _bytes_field(buf, pos)
                headers.append((name.decode("utf-8"), header_value))
            if pos != end:
                raise KafkaFormatError(
                    f"record declares {length} bytes, holds {length + pos - end}")
            records.append(KafkaRecord(base_offset + offset_delta, base_ts + ts_delta, key, value,
                                       tuple(headers)))
    except IndexError:
        raise KafkaFormatError("the records are cut short") from None
    except UnicodeDecodeError as exc:
        raise KafkaFormatError(f"a header key is not UTF-8: {exc}") from None
    if pos != end_of_records:
        raise KafkaFormatError(f"{end_of_records - pos} bytes follow the batch's {count} records")
    return tuple(records)


def _varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's varint and varlong) at ``pos``; (value, next position)."""
    byte = buf[pos]
    if byte < 0x80:  # most lengths and deltas fit one byte
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result = byte & 0x7F
    shift = 7
    while True:
        pos += 1
        byte = buf[pos]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos + 1
        shift += 7
        if shift > 63:
            raise KafkaFormatError("a varint runs over ten bytes")


def _bytes_field(buf: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    size, pos = _varint(buf, pos)
    if size < 0:
        return None, pos
    end = pos + size
    if end > len(buf):
        raise KafkaFormatError(f"a field of {size} bytes runs past its record")
    return bytes(buf[pos:end]), end


def _decompress(codec: int, data: bytes | memoryview) -> bytes:
    try:
        if codec == CODECS["gzip"]:
            return gzip.decompress(data)
        if codec == CODECS["snappy"]:
            return _snappy_decompress(bytes(data))
        if codec == CODECS["lz4"]:
            return bytes(lz4.frame.decompress(data))
        if codec == CODECS["zstd"]:
            return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(data))
    except KafkaFormatError:
        raise
    except Exception as exc:  # each codec raises its own error type
        name = _CODEC_NAMES.get(codec, codec)
        raise KafkaFormatError(f"the records do not decompress with {name}: {exc}") from None
    raise KafkaFormatError(f"unknown compression codec {codec} in the batch attributes")


def _snappy_decompress(data: bytes) -> bytes:
    """Xerial-framed snappy (what Kafka's clients write), or a raw snappy block."""
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(snappy.decompress(data))
    pos = _XERIAL_HEADER.size
    blocks = []
    while pos < len(data):
        if len(data) - pos < 4:
            raise KafkaFormatError("a xerial snappy block size is cut short")
        (size,) = _U32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise KafkaFormatError(f"a xerial snappy block of {size} bytes runs past the data")
        blocks.append(bytes(snappy.decompress(data[pos:pos + size])))
        pos += size
    return b"".join(blocks)


# ---------------------------------------------------------------- writing


def encode_record_batch(
    records: Sequence[KafkaRecord],
    *,
    compression: str = "none",
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    log_append_time: bool = False,
    snappy_framing: str = "xerial",
) -> bytes:
    """One v2 record batch of ``records`` (at least one; its base offset and base
    timestamp are the first record's). ``snappy_framing``: ``"xerial"`` as Kafka's
    clients write it, or ``"raw"``."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    try:
        codec = CODECS[compression]
    except KeyError:
        raise ValueError(
            f"compression must be one of {sorted(CODECS)}, not {compression!r}") from None
    base_offset = records[0].offset
    base_ts = records[0].timestamp
    body = b"".join(_encode_record(r, base_offset, base_ts) for r in records)
    if codec:
        body = _compress(codec, body, snappy_framing)
    attributes = codec
    if log_append_time:
        attributes |= ATTR_LOG_APPEND_TIME
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    max_ts = max(r.timestamp for r in records)
    last_delta = records[-1].offset - base_offset
    length = HEADER_SIZE - _LOG_OVERHEAD + len(body)
    header = bytearray(_HEADER.pack(
        base_offset, length, partition_leader_epoch, 2, 0, attributes, last_delta, base_ts,
        max_ts, producer_id, producer_epoch, base_sequence, len(records)))
    crc = _crc32c.crc32c(bytes(header[_CRC_START:]) + body)
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + body


def _encode_record(record: KafkaRecord, base_offset: int, base_ts: int) -> bytes:
    parts = [b"\x00", _zigzag(record.timestamp - base_ts), _zigzag(record.offset - base_offset),
             _bytes(record.key), _bytes(record.value), _zigzag(len(record.headers))]
    for name, value in record.headers:
        parts.append(_bytes(name.encode("utf-8")))
        parts.append(_bytes(value))
    body = b"".join(parts)
    return _zigzag(len(body)) + body


def _bytes(data: bytes | None) -> bytes:
    return b"\x01" if data is None else _zigzag(len(data)) + data


def _zigzag(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while encoded >= 0x80:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


def _compress(codec: int, data: bytes, snappy_framing: str) -> bytes:
    if codec == CODECS["gzip"]:
        return gzip.compress(data)
    if codec == CODECS["snappy"]:
        if snappy_framing == "raw":
            return bytes(snappy.compress(data))
        if snappy_framing != "xerial":
            raise ValueError(f"snappy_framing must be 'xerial' or 'raw', not {snappy_framing!r}")
        blocks = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
        for start in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(snappy.compress(data[start:start + _XERIAL_BLOCK]))
            blocks.append(_U32.pack(len(block)) + block)
        return b"".join(blocks)
    if codec == CODECS["lz4"]:
        return bytes(lz4.frame.compress(data))
    if codec == CODECS["zstd"]:
        return bytes(zstandard.ZstdCompressor().compress(data))
    raise ValueError(f"unknown compression codec {codec}")


def records_of(batches: Iterable[KafkaRecordBatch]) -> list[KafkaRecord]:
    """The data records of ``batches`` in order (control batches' markers left out)."""
    return [record for batch in batches if not batch.is_control for record in batch.records]

