"""The error a command handler raises, and the request id an ERROR answers."""

from __future__ import annotations

from magnetar.protocol.command_checks import command_body
from magnetar.protocol.pb import BaseCommand


class CommandError(Exception):
    """Raised by a handler: answered with ERROR for the request that caused it."""

    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error


def request_id_of(command: BaseCommand) -> int:
    """The request id of the command's own body (0 if its type has none)."""
    body = command_body(command)
    return int(getattr(body, "request_id", 0))
