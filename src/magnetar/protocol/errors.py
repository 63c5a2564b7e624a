"""Exceptions raised by the codec when the bytes on the wire are not a Pulsar frame."""


class ProtocolError(Exception):
    """The peer sent bytes that cannot be a valid Pulsar frame; the connection is unusable."""


class FrameTooLarge(ProtocolError):
    """A frame declared a size above the negotiated limit (rejected before buffering it)."""


class MalformedFrame(ProtocolError):
    """A frame's sizes are inconsistent or its command does not parse."""


class ChecksumMismatch(ProtocolError):
    """A payload's CRC32C does not match the checksum in its frame."""


class UnknownCommand(ProtocolError):
    """A well-formed frame whose command type this codec does not know."""

    def __init__(self, command_type: int) -> None:
        super().__init__(f"unknown or unsupported command type {command_type}")
        self.command_type = command_type
