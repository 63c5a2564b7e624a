"""Look-ups that several handler families share: topic names and topics."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from magnetar.broker.session.handlers.errors import CommandError
from magnetar.broker.topics.topic import TopicUnavailable
from magnetar.protocol.pb import pb
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.session.context import Session
    from magnetar.broker.topics.topic import Topic


def topic_name(name: str) -> TopicName:
    try:
        return TopicName.parse(name)
    except InvalidTopicName as exc:
        raise CommandError(pb.InvalidTopicName, str(exc)) from None


class TopicLoading(Exception):
    """The topic is being loaded in a worker thread: the connection handles the same
    command again once ``future`` is done (the client just waits for its answer)."""

    def __init__(self, future: asyncio.Future[Topic]) -> None:
        super().__init__("topic loading")
        self.future = future


def get_topic(cnx: Session, name: TopicName, create: bool) -> Topic:
    """The loaded topic; raises TopicLoading while it loads, CommandError if it cannot."""
    topic = cnx.service.topics.get(str(name))
    if topic is not None:
        return topic
    try:
        future = cnx.service.load_topic(name, create=create)
    except Exception as exc:
        raise command_error(exc) from None
    if future.done() and future.exception() is None:
        return future.result()
    raise TopicLoading(future)


def command_error(exc: BaseException) -> BaseException:
    """The CommandError that answers a failure to get a topic (others stay as they are)."""
    if isinstance(exc, TopicUnavailable):
        error = pb.PersistenceError if exc.storage_error else pb.ServiceNotReady
        return CommandError(error, str(exc))
    if isinstance(exc, LookupError):
        return CommandError(pb.TopicNotFound, str(exc))
    if isinstance(exc, ValueError):
        return CommandError(pb.NotAllowedError, str(exc))
    return exc
