"""GET_SCHEMA and GET_OR_CREATE_SCHEMA.

Authorized as Pulsar authorizes them: reading a schema takes what a lookup takes
(produce or consume on the topic), adding one takes produce. Neither creates a topic:
as Pulsar's ``getTopicIfExists``, a topic that does not exist is TopicNotFound, so these
commands cannot put a topic in a namespace a PRODUCER could not. Errors are answered in
the command's own response (as Pulsar does), which is what a client waits for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.auth.authorization import PRODUCE
from magnetar.broker.auth.checks import lookup_refusal, refusal
from magnetar.broker.features.schemas import IncompatibleSchema, SchemaRegistry, version_bytes
from magnetar.broker.session import outgoing
from magnetar.broker.session.handlers.common import get_topic, topic_name
from magnetar.broker.session.handlers.errors import CommandError
from magnetar.protocol.pb import BaseCommand, pb

if TYPE_CHECKING:
    from magnetar.broker.session.context import Session
    from magnetar.broker.topics.topic import Topic
    from magnetar.protocol.frames import Frame


def handle_get_schema(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    request = command.getSchema
    response = pb.CommandGetSchemaResponse(request_id=request.request_id)
    try:
        topic = _existing_topic(cnx, request.topic, "Get Schema")
    except CommandError as exc:
        response.error_code = exc.error  # type: ignore[assignment]
        response.error_message = str(exc)
    else:
        version = None
        if request.HasField("schema_version") and len(request.schema_version) == 8:
            version = int.from_bytes(request.schema_version, "big", signed=True)
        entry = topic.schemas.get(version)
        if entry is None:
            response.error_code = pb.TopicNotFound
            response.error_message = f"no schema found for topic {topic.name}"
        else:
            response.schema.CopyFrom(SchemaRegistry.to_pb(entry))
            response.schema_version = version_bytes(entry.version)
    cnx.write_command(outgoing.schema_response(response))


def handle_get_or_create_schema(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    request = command.getOrCreateSchema
    response = pb.CommandGetOrCreateSchemaResponse(request_id=request.request_id)
    try:
        topic = _existing_topic(cnx, request.topic, "Get Or Create Schema", PRODUCE)
        version = topic.schemas.add_or_get(request.schema)
    except CommandError as exc:
        response.error_code = exc.error  # type: ignore[assignment]
        response.error_message = str(exc)
    except IncompatibleSchema as exc:
        response.error_code = pb.IncompatibleSchema
        response.error_message = str(exc)
    else:
        if version is not None:
            response.schema_version = version_bytes(version)
    cnx.write_command(outgoing.get_or_create_schema_response(response))


def _existing_topic(cnx: Session, topic: str, what: str, action: str | None = None) -> Topic:
    """The topic named ``topic`` if the role may do ``what`` on it (``action``, or a
    lookup's permission for None) and it exists; CommandError says why not.
    TopicLoading (not caught here) has the command handled again once it is loaded."""
    name = topic_name(topic)
    why = (
        lookup_refusal(cnx, str(name), what)
        if action is None
        else refusal(cnx, name, action, what)
    )
    if why is not None:
        raise CommandError(pb.AuthorizationError, why)
    if name.partition_index < 0 and cnx.service.store.get_partitions(str(name)):
        # A partitioned topic's schema is kept by each partition (the admin routes
        # change them all): partition 0 answers for it. Adding one goes through a
        # partition's producer, as Pulsar's getTopicIfExists finds no base topic.
        if action is not None:
            raise CommandError(pb.TopicNotFound, f"topic {name} is partitioned; use a partition")
        name = name.partition(0)
    return get_topic(cnx, name, create=False)
