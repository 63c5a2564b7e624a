"""GET_SCHEMA and GET_OR_CREATE_SCHEMA."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.handlers.common import get_topic, topic_name
from magnetar.broker.handlers.errors import CommandError
from magnetar.broker.schemas import IncompatibleSchema, SchemaRegistry, version_bytes
from magnetar.protocol.pb import BaseCommand, pb

if TYPE_CHECKING:
    from magnetar.broker.connection import ServerCnx
    from magnetar.broker.topic import Topic
    from magnetar.protocol.frames import Frame

T = BaseCommand.Type


def handle_get_schema(cnx: ServerCnx, command: BaseCommand, frame: Frame) -> None:
    request = command.getSchema
    response = pb.CommandGetSchemaResponse(request_id=request.request_id)
    name = topic_name(request.topic)
    try:  # a topic still loading raises TopicLoading: asked again once it is loaded
        topic: Topic | None = get_topic(cnx, name, create=False)
    except CommandError as exc:
        if exc.error not in (pb.TopicNotFound, pb.NotAllowedError):
            raise  # ServiceNotReady (unloading) or a storage failure: an ERROR, retried
        topic = None
    version = None
    if request.HasField("schema_version") and len(request.schema_version) == 8:
        version = int.from_bytes(request.schema_version, "big", signed=True)
    entry = topic.schemas.get(version) if topic is not None else None
    if entry is None:
        response.error_code = pb.TopicNotFound
        response.error_message = f"no schema found for topic {name}"
    else:
        response.schema.CopyFrom(SchemaRegistry.to_pb(entry))
        response.schema_version = version_bytes(entry.version)
    cnx.write_command(BaseCommand(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=response))


def handle_get_or_create_schema(cnx: ServerCnx, command: BaseCommand, frame: Frame) -> None:
    request = command.getOrCreateSchema
    response = pb.CommandGetOrCreateSchemaResponse(request_id=request.request_id)
    topic = get_topic(cnx, topic_name(request.topic), create=True)
    try:
        version = topic.schemas.add_or_get(request.schema)
    except IncompatibleSchema as exc:
        response.error_code = pb.IncompatibleSchema
        response.error_message = str(exc)
    else:
        if version is not None:
            response.schema_version = version_bytes(version)
    cnx.write_command(
        BaseCommand(type=T.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=response)
    )
