"""Look-ups that several handler families share: topic names and topics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.handlers.errors import CommandError
from magnetar.broker.topic import TopicUnavailable
from magnetar.broker.topic_name import InvalidTopicName, TopicName
from magnetar.protocol.pb import pb

if TYPE_CHECKING:
    from magnetar.broker.connection import ServerCnx
    from magnetar.broker.topic import Topic


def topic_name(name: str) -> TopicName:
    try:
        return TopicName.parse(name)
    except InvalidTopicName as exc:
        raise CommandError(pb.InvalidTopicName, str(exc)) from None


def get_topic(cnx: ServerCnx, name: TopicName, create: bool) -> Topic:
    try:
        return cnx.service.get_topic(name, create=create)
    except TopicUnavailable as exc:
        error = pb.PersistenceError if exc.storage_error else pb.ServiceNotReady
        raise CommandError(error, str(exc)) from None
    except LookupError as exc:
        raise CommandError(pb.TopicNotFound, str(exc)) from None
    except ValueError as exc:
        raise CommandError(pb.NotAllowedError, str(exc)) from None
