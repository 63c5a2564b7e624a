"""Sans-IO Pulsar protocol: frames in, command objects out, and back.

Nothing here performs I/O, reads a clock or touches asyncio; the broker and the
client both drive it with the bytes they read from their sockets.
"""

from magnetar.protocol.errors import (
    ChecksumMismatch,
    FrameTooLarge,
    MalformedFrame,
    ProtocolError,
)
from magnetar.protocol.frames import Frame, FrameDecoder
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import pb

__all__ = [
    "ChecksumMismatch",
    "Frame",
    "FrameDecoder",
    "FrameTooLarge",
    "MalformedFrame",
    "MessageId",
    "ProtocolError",
    "pb",
]
