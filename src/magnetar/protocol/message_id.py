"""Message ids: (ledger, entry, batch index, partition), ordered as Pulsar orders them."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.protocol.pb import pb

_U64 = (1 << 64) - 1
_I64_MAX = (1 << 63) - 1


def _signed(value: int) -> int:
    return value - (1 << 64) if value > _I64_MAX else value


@dataclass(frozen=True, order=True, slots=True)
class MessageId:
    """Position of a message. Compares by ledger, entry, then batch index."""

    ledger_id: int
    entry_id: int
    batch_index: int = -1
    partition: int = -1
    batch_size: int = 0

    @classmethod
    def from_pb(cls, data: pb.MessageIdData, partition: int | None = None) -> MessageId:
        return cls(
            _signed(data.ledgerId),
            _signed(data.entryId),
            data.batch_index,
            data.partition if partition is None else partition,
            data.batch_size if data.HasField("batch_size") else 0,
        )

    def to_pb(self, out: pb.MessageIdData | None = None) -> pb.MessageIdData:
        data = pb.MessageIdData() if out is None else out
        data.ledgerId = self.ledger_id & _U64
        data.entryId = self.entry_id & _U64
        if self.partition >= 0:
            data.partition = self.partition
        if self.batch_index >= 0:
            data.batch_index = self.batch_index
        if self.batch_size > 0:
            data.batch_size = self.batch_size
        return data

    def serialize(self) -> bytes:
        """Bytes compatible with the official clients' ``MessageId.serialize()``."""
        return self.to_pb().SerializeToString()

    @classmethod
    def deserialize(cls, data: bytes) -> MessageId:
        parsed = pb.MessageIdData()
        parsed.ParseFromString(data)
        return cls.from_pb(parsed)

    @property
    def is_earliest(self) -> bool:
        return self.ledger_id == -1 and self.entry_id == -1

    @property
    def is_latest(self) -> bool:
        return self.ledger_id == _I64_MAX and self.entry_id == _I64_MAX

    def __str__(self) -> str:
        return f"({self.ledger_id},{self.entry_id},{self.partition},{self.batch_index})"


EARLIEST = MessageId(-1, -1, -1, -1)
LATEST = MessageId(_I64_MAX, _I64_MAX, -1, -1)
