"""Admin REST route for PIP-96 ingest: POST an entry whose payload the broker never reads.

::

    POST /admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}/entries
         ?num_messages=3&property=entry.format=kafka&key=k
    (body: the payload, any content type)

answers ``200 {"ledgerId": ..., "entryId": ..., "partitionIndex": ...}`` once the entry
is durable (see :mod:`magnetar.broker.features.raw_entries`). The metadata fields come as query
parameters or, the same names, as headers: ``num_messages`` (X-Magnetar-Num-Messages),
``key`` (X-Magnetar-Key), ``ordering_key`` (X-Magnetar-Ordering-Key, its UTF-8 bytes),
``event_time`` in ms (X-Magnetar-Event-Time), ``producer_name``
(X-Magnetar-Producer-Name), ``sequence_id`` (X-Magnetar-Sequence-Id) and ``property``,
repeatable, ``name=value`` (X-Magnetar-Property). A query parameter wins over its
header; headers carry ASCII only, so other text goes in the query.

Refusals: 400 a bad field (``num_messages`` outside 1..``max_messages_per_batch``,
``sequence_id`` or ``event_time`` outside 0..2**64-1), 404 no such topic (where the
broker does not create topics on use), 409 a partitioned topic (post to a partition)
or a terminated one, 412 an invalid topic name, 413 a payload over
``max_message_size`` or an entry whose properties and other fields take its frame to
consumers past the frame limit (``max_message_size`` + 10 KiB), 500 a storage
failure, 503 a topic being unloaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.broker.features.raw_entries import EntryTooLarge, RawEntryRefused, append_raw_entry
from magnetar.protocol.pb import pb
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

PATH = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/entries"
_CHUNK = 64 * 1024
_INTEGER_FIELDS = ("num_messages", "event_time", "sequence_id")
_TEXT_FIELDS = ("key", "ordering_key", "producer_name")


def add_raw_entry_routes(app: web.Application, service: BrokerService) -> None:
    app.add_routes([web.post(PATH, RawEntryRoute(service).post)])


def _header_name(field: str) -> str:
    return "X-Magnetar-" + "-".join(part.capitalize() for part in field.split("_"))


class RawEntryRoute:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    async def post(self, request: web.Request) -> web.Response:
        info = request.match_info
        try:
            name = TopicName.parse(
                f"{info['domain']}://{info['tenant']}/{info['namespace']}/{info['topic']}"
            )
        except InvalidTopicName as exc:
            raise web.HTTPPreconditionFailed(reason=str(exc)) from None
        if name.partition_index < 0 and self.service.store.get_partitions(str(name)):
            raise web.HTTPConflict(
                reason=f"topic {name} is partitioned: post its entries to one of its partitions"
            )
        fields = _fields(request)
        payload = await self._read_payload(request)
        try:
            message_id = await append_raw_entry(self.service, name, payload, **fields)
        except EntryTooLarge as exc:
            raise web.HTTPRequestEntityTooLarge(
                max_size=self.service.config.max_message_size, actual_size=len(payload),
                reason=str(exc)) from None
        except RawEntryRefused as exc:
            if exc.error == pb.TopicTerminatedError:
                raise web.HTTPConflict(reason=str(exc)) from None
            if exc.error == pb.ServiceNotReady:
                raise web.HTTPServiceUnavailable(reason=str(exc)) from None
            raise web.HTTPInternalServerError(reason=str(exc)) from None
        except LookupError as exc:
            raise web.HTTPNotFound(reason=str(exc)) from None
        except ValueError as exc:
            raise web.HTTPBadRequest(reason=str(exc)) from None
        return web.json_response({
            "ledgerId": message_id.ledger_id,
            "entryId": message_id.entry_id,
            "partitionIndex": message_id.partition,
        })

    async def _read_payload(self, request: web.Request) -> bytes:
        """The body, read up to the broker's message size limit (aiohttp's own limit on
        ``request.read()`` is 1 MiB, below Pulsar's 5 MiB default)."""
        limit = self.service.config.max_message_size
        declared = request.content_length
        if declared is not None and declared > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=declared)
        data = bytearray()
        async for chunk in request.content.iter_chunked(_CHUNK):
            data += chunk
            if len(data) > limit:
                raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=len(data))
        return bytes(data)


def _fields(request: web.Request) -> dict[str, Any]:
    """The metadata fields of the request, query parameters over headers."""
    query = request.query
    headers = request.headers

    def text(field: str) -> str | None:
        value = query.get(field)
        return headers.get(_header_name(field)) if value is None else value

    fields: dict[str, Any] = {}
    for field in _INTEGER_FIELDS:
        value = text(field)
        if value is not None:
            try:
                fields[field] = int(value)
            except ValueError:
                raise web.HTTPBadRequest(
                    reason=f"{field} must be an integer, not {value!r}") from None
    for field in _TEXT_FIELDS:
        value = text(field)
        if value is not None:
            fields[field] = value.encode() if field == "ordering_key" else value
    pairs = query.getall("property", []) or headers.getall(_header_name("property"), [])
    properties: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise web.HTTPBadRequest(reason=f"a property is name=value, not {pair!r}")
        properties[key] = value
    if properties:
        fields["properties"] = properties
    return fields
