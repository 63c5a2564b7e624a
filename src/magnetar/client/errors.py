"""Exceptions raised by magnetar's client.

Every error is a :class:`PulsarError`.  Errors that the broker reports carry the
broker's own message and its ``ServerError`` code; :func:`error_for_code` maps a
code to the class users catch.  Client-side conditions (timeouts, connection
failures, closed objects, a full producer queue) have their own classes.
"""

from __future__ import annotations

import builtins

from magnetar.protocol.pb import pb


class PulsarError(Exception):
    """Base of every client error. ``message`` is the broker's (or client's) text."""

    code: int | None = None

    def __init__(self, message: str = "", *, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


# ------------------------------------------------------------------ broker errors


class UnknownError(PulsarError):
    code = pb.UnknownError


class MetadataError(PulsarError):
    code = pb.MetadataError


class PersistenceError(PulsarError):
    code = pb.PersistenceError


class AuthenticationError(PulsarError):
    code = pb.AuthenticationError


class AuthorizationError(PulsarError):
    code = pb.AuthorizationError


class ConsumerBusy(PulsarError):
    code = pb.ConsumerBusy


class ServiceNotReady(PulsarError):
    code = pb.ServiceNotReady


class ProducerBlockedQuotaExceeded(PulsarError):
    code = pb.ProducerBlockedQuotaExceededError


class ChecksumError(PulsarError):
    code = pb.ChecksumError


class UnsupportedVersionError(PulsarError):
    code = pb.UnsupportedVersionError


class TopicNotFound(PulsarError):
    code = pb.TopicNotFound


class SubscriptionNotFound(PulsarError):
    code = pb.SubscriptionNotFound


class ConsumerNotFound(PulsarError):
    code = pb.ConsumerNotFound


class TooManyRequests(PulsarError):
    code = pb.TooManyRequests


class TopicTerminated(PulsarError):
    code = pb.TopicTerminatedError


class ProducerBusy(PulsarError):
    code = pb.ProducerBusy


class InvalidTopicName(PulsarError):
    code = pb.InvalidTopicName


class IncompatibleSchema(PulsarError):
    code = pb.IncompatibleSchema


class ConsumerAssignError(PulsarError):
    code = pb.ConsumerAssignError


class TransactionError(PulsarError):
    """Transaction errors (magnetar does not implement transactions)."""


class NotAllowed(PulsarError):
    code = pb.NotAllowedError


class ProducerFenced(PulsarError):
    code = pb.ProducerFenced


# ------------------------------------------------------------------ client-side errors


class TimeoutError(PulsarError, builtins.TimeoutError):
    """An operation did not complete within its timeout."""


class RequestTimeout(TimeoutError):
    """A PIP-371 request got no reply within its timeout."""


class ConnectError(PulsarError):
    """The client could not connect to (or lost its connection with) a broker."""


class AlreadyClosed(PulsarError):
    """The client, producer, consumer or reader is closed."""


class ProducerQueueIsFull(PulsarError):
    """The producer's pending-message limit is reached and it does not block."""


class MessageTooBig(PulsarError):
    """A message is larger than the broker's ``max_message_size``."""


class LookupFailed(PulsarError):
    """A topic lookup did not end on a broker (too many redirects, or a failure)."""


class ProtocolViolation(PulsarError):
    """The broker sent something the protocol does not allow."""


_BY_CODE: dict[int, type[PulsarError]] = {
    cls.code: cls
    for cls in (
        UnknownError,
        MetadataError,
        PersistenceError,
        AuthenticationError,
        AuthorizationError,
        ConsumerBusy,
        ServiceNotReady,
        ProducerBlockedQuotaExceeded,
        ChecksumError,
        UnsupportedVersionError,
        TopicNotFound,
        SubscriptionNotFound,
        ConsumerNotFound,
        TooManyRequests,
        TopicTerminated,
        ProducerBusy,
        InvalidTopicName,
        IncompatibleSchema,
        ConsumerAssignError,
        NotAllowed,
        ProducerFenced,
    )
    if cls.code is not None
}
_BY_CODE[pb.ProducerBlockedQuotaExceededException] = ProducerBlockedQuotaExceeded
for _code in (
    pb.TransactionCoordinatorNotFound,
    pb.InvalidTxnStatus,
    pb.TransactionConflict,
    pb.TransactionNotFound,
):
    _BY_CODE[_code] = TransactionError


def error_class(code: int) -> type[PulsarError]:
    """The exception class for a ``ServerError`` code (``UnknownError`` if unknown)."""
    return _BY_CODE.get(code, UnknownError)


def error_for_code(code: int, message: str = "") -> PulsarError:
    """An exception instance for a broker error, carrying the broker's message."""
    try:
        name = pb.ServerError.Name(code)
    except ValueError:
        name = f"ServerError({code})"
    return error_class(code)(message or name, code=code)


# Errors after which retrying the same operation may succeed.
_RETRIABLE = (
    ServiceNotReady,
    TooManyRequests,
    ConnectError,
    TimeoutError,
    MetadataError,
    PersistenceError,
    LookupFailed,
)


def is_retriable(exc: BaseException) -> bool:
    return isinstance(exc, _RETRIABLE)
