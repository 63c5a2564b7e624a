"""Admin REST routes for schemas, as Pulsar's SchemasResource and its
schemaCompatibilityStrategy policies answer them::

    GET    /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema            latest
    GET    /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema/{version}
    GET    /admin/v2/schemas/{tenant}/{namespace}/{topic}/schemas           every live version
    POST   /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema            register
    DELETE /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema[?force=true]
    POST   /admin/v2/schemas/{tenant}/{namespace}/{topic}/compatibility     check only
    POST   /admin/v2/schemas/{tenant}/{namespace}/{topic}/version           version of a definition
    GET|PUT /admin/v2/namespaces/{tenant}/{namespace}/schemaCompatibilityStrategy
    GET|PUT|DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}/schemaCompatibilityStrategy

The bodies are Pulsar's JSON: ``{"type": "AVRO", "schema": "...", "properties": {}}`` in,
``{"version": N, "type": ..., "timestamp": ..., "data": ..., "properties": ...}`` out, a
strategy as a JSON string (``"BACKWARD"``). Schema topics are persistent ones; a
partitioned topic's schema is kept by each partition and changed on all of them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, NoReturn

from aiohttp import web

from magnetar.broker.features.schema_compat import (
    IncompatibleSchema,
    InvalidSchema,
    SchemaData,
    Strategy,
)
from magnetar.broker.features.schemas import (
    namespace_strategy,
    set_namespace_strategy,
    set_topic_strategy,
    topic_strategy,
)
from magnetar.broker.topics.topic import TopicUnavailable
from magnetar.protocol.schema_types import WIRE_TYPES, type_name
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.topic import Topic
    from magnetar.storage import SchemaEntry

SCHEMA_BASE = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
NAMESPACE_PATH = "/admin/v2/namespaces/{tenant}/{namespace}/schemaCompatibilityStrategy"
TOPIC_PATH = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/schemaCompatibilityStrategy"
_NOT_UPLOADED = ("BYTES", "NONE")


def add_schema_routes(app: web.Application, service: BrokerService) -> None:
    """Register the schema routes (before routes whose patterns would also match)."""
    routes = SchemaRoutes(service)
    app.add_routes(
        [
            web.get(SCHEMA_BASE + "/schema", routes.get_latest),
            web.get(SCHEMA_BASE + "/schema/{version}", routes.get_version),
            web.get(SCHEMA_BASE + "/schemas", routes.get_all),
            web.post(SCHEMA_BASE + "/schema", routes.post),
            web.delete(SCHEMA_BASE + "/schema", routes.delete),
            web.post(SCHEMA_BASE + "/compatibility", routes.compatibility),
            web.post(SCHEMA_BASE + "/version", routes.version_of),
            web.get(NAMESPACE_PATH, routes.get_namespace_strategy),
            web.put(NAMESPACE_PATH, routes.set_namespace_strategy),
            web.get(TOPIC_PATH, routes.get_topic_strategy),
            web.put(TOPIC_PATH, routes.set_topic_strategy),
            web.delete(TOPIC_PATH, routes.remove_topic_strategy),
        ]
    )


class SchemaRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    # ------------------------------------------------------------ schemas

    async def get_latest(self, request: web.Request) -> web.Response:
        entry = self._topics(request)[0].schemas.latest()
        if entry is None:
            _fail(web.HTTPNotFound, "Schema not found")
        return web.json_response(_entry_json(entry))

    async def get_version(self, request: web.Request) -> web.Response:
        text = request.match_info["version"]
        try:
            version = int(text)
        except ValueError:
            _fail(web.HTTPBadRequest, f"the schema version must be a number, not {text!r}")
        entry = self._topics(request)[0].schemas.get(version)
        if entry is None:
            _fail(web.HTTPNotFound, "Schema not found")
        return web.json_response(_entry_json(entry))

    async def get_all(self, request: web.Request) -> web.Response:
        live = self._topics(request)[0].schemas.live()
        return web.json_response({"getSchemaResponses": [_entry_json(e) for e in live]})

    async def post(self, request: web.Request) -> web.Response:
        schema, properties = await _payload(request)
        topics = self._topics(request, create=True)
        version = -1
        for topic in reversed(topics):  # partition 0 last: its version is the answer
            try:
                version = topic.schemas.put(schema, _schema_name(topic), properties)
            except InvalidSchema as exc:
                _fail(web.HTTPUnprocessableEntity, str(exc))
            except IncompatibleSchema as exc:
                _fail(web.HTTPConflict, str(exc))
        # PostSchemaResponse carries a LongSchemaVersion, itself {"version": N}.
        return web.json_response({"version": {"version": version}})

    async def delete(self, request: web.Request) -> web.Response:
        force = request.query.get("force", "false").lower() == "true"
        version = -1
        for topic in reversed(self._topics(request)):
            version = topic.schemas.delete(force=force)
        return web.json_response({"version": version})

    async def compatibility(self, request: web.Request) -> web.Response:
        schema, _ = await _payload(request)
        registry = self._topics(request)[0].schemas
        strategy = registry.strategy()
        try:
            registry.check(schema, strategy)
            compatible = True
        except InvalidSchema as exc:
            _fail(web.HTTPUnprocessableEntity, str(exc))
        except IncompatibleSchema:
            compatible = False
        # Pulsar's IsCompatibilityResponse: its field isCompatibility is written by
        # Jackson as "compatibility" (a Lombok boolean getter); both spellings are given.
        body = {
            "isCompatibility": compatible,
            "compatibility": compatible,
            "schemaCompatibilityStrategy": strategy.value,
        }
        return web.json_response(body, status=202)

    async def version_of(self, request: web.Request) -> web.Response:
        schema, _ = await _payload(request)
        entry = self._topics(request)[0].schemas.find(schema)
        return web.json_response({"version": entry.version if entry is not None else -1})

    # ------------------------------------------------------------ strategies

    async def get_namespace_strategy(self, request: web.Request) -> web.Response:
        tenant, namespace = _namespace(request)
        data_dir = self.service.config.data_dir
        return web.json_response(namespace_strategy(data_dir, tenant, namespace).value)

    async def set_namespace_strategy(self, request: web.Request) -> web.Response:
        tenant, namespace = _namespace(request)
        strategy = await _strategy_body(request)
        set_namespace_strategy(self.service.config.data_dir, tenant, namespace, strategy)
        # The file is shared with the redelivery backoff's policies, which keep a copy
        # of it: drop that copy, or their next write would put this key back as it was.
        self.service.backoff_policies._namespaces.pop(f"{tenant}/{namespace}", None)
        return web.Response(status=204)

    async def get_topic_strategy(self, request: web.Request) -> web.Response:
        topic = self._topics(request, any_domain=True)[0]
        if request.query.get("applied", "false").lower() == "true":
            return web.json_response(topic.schemas.strategy().value)
        own = topic_strategy(topic.metadata)
        if own is Strategy.UNDEFINED:
            return web.Response(status=204)  # as Pulsar answers an unset topic policy
        return web.json_response(own.value)

    async def set_topic_strategy(self, request: web.Request) -> web.Response:
        topics = self._topics(request, any_domain=True)
        strategy = await _strategy_body(request)
        for topic in topics:
            set_topic_strategy(topic.metadata, strategy)
        return web.Response(status=204)

    async def remove_topic_strategy(self, request: web.Request) -> web.Response:
        for topic in self._topics(request, any_domain=True):
            set_topic_strategy(topic.metadata, Strategy.UNDEFINED)
        return web.Response(status=204)

    # ------------------------------------------------------------ topics

    def _topics(
        self, request: web.Request, *, create: bool = False, any_domain: bool = False
    ) -> list[Topic]:
        """The topic the path names, or every partition of a partitioned one: loaded
        if it is not, created if ``create`` (a schema may be posted before any
        client), else 404 when it does not exist."""
        name = _topic_name(request, any_domain)
        count = self.service.store.get_partitions(str(name))
        names = [name.partition(i) for i in range(count)] if count else [name]
        topics = []
        for each in names:
            try:
                if create:
                    topic: Topic | None = self.service.get_topic(each, create=True, explicit=True)
                else:
                    topic = self.service.find_topic(each)
            except TopicUnavailable as exc:
                _fail(web.HTTPServiceUnavailable, str(exc))
            except (LookupError, ValueError) as exc:
                _fail(web.HTTPNotFound, str(exc))
            if topic is None:
                _fail(web.HTTPNotFound, f"Topic {each} not found")
            topics.append(topic)
        return topics


def _entry_json(entry: SchemaEntry) -> dict[str, Any]:
    return {
        "version": entry.version,
        "type": type_name(entry.type),
        "timestamp": entry.timestamp,
        "data": entry.data.decode("utf-8", errors="replace"),
        "properties": entry.properties,
    }


def _schema_name(topic: Topic) -> str:
    # A posted schema has no name of its own; a client's is the topic's local name.
    return topic.topic_name.partitioned_base.local


async def _payload(request: web.Request) -> tuple[SchemaData, dict[str, str]]:
    """A PostSchemaPayload: ``{"type": ..., "schema": ..., "properties": {...}}``."""
    doc = _json(await request.text())
    if not isinstance(doc, dict):
        _fail(
            web.HTTPBadRequest, 'the body must be {"type": ..., "schema": ..., "properties": ...}'
        )
    kind = doc.get("type")
    if not isinstance(kind, str) or kind.upper() not in (*WIRE_TYPES, "BYTES"):
        _fail(web.HTTPBadRequest, f"unknown schema type {kind!r}")
    kind = kind.upper()
    if kind in _NOT_UPLOADED:
        _fail(
            web.HTTPNotAcceptable,
            "Do not upload a BYTES schema, because it's the default schema type",
        )
    if kind == "KEY_VALUE":
        _fail(web.HTTPUnprocessableEntity, "KEY_VALUE schemas cannot be uploaded here")
    definition = doc.get("schema") or ""
    properties = doc.get("properties") or {}
    if not isinstance(definition, str) or not isinstance(properties, dict):
        _fail(web.HTTPBadRequest, '"schema" must be a string and "properties" an object')
    props = {str(k): str(v) for k, v in properties.items()}
    return SchemaData(WIRE_TYPES[kind], definition.encode("utf-8")), props


async def _strategy_body(request: web.Request) -> Strategy:
    """A strategy as Pulsar's admin client sends it (a JSON string), or bare."""
    text = (await request.text()).strip()
    value = _json(text) if text.startswith('"') else text
    if not isinstance(value, str) or not value:
        _fail(web.HTTPBadRequest, 'the body must be a strategy name, e.g. "BACKWARD"')
    try:
        return Strategy.parse(value)
    except ValueError as exc:
        _fail(web.HTTPBadRequest, str(exc))


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        _fail(web.HTTPBadRequest, f"the body is not JSON: {text[:80]!r}")


def _namespace(request: web.Request) -> tuple[str, str]:
    tenant = request.match_info["tenant"]
    namespace = request.match_info["namespace"]
    try:  # the same rules as a topic name's tenant and namespace
        TopicName.parse(f"persistent://{tenant}/{namespace}/x")
    except InvalidTopicName as exc:
        _fail(web.HTTPPreconditionFailed, str(exc))
    return tenant, namespace


def _topic_name(request: web.Request, any_domain: bool) -> TopicName:
    info = request.match_info
    domain = info["domain"] if any_domain else "persistent"
    if domain not in ("persistent", "non-persistent"):
        _fail(
            web.HTTPPreconditionFailed,
            f"invalid topic domain {domain!r}: expected persistent or non-persistent",
        )
    try:
        return TopicName.parse(f"{domain}://{info['tenant']}/{info['namespace']}/{info['topic']}")
    except InvalidTopicName as exc:
        _fail(web.HTTPPreconditionFailed, str(exc))


def _fail(error: type[web.HTTPException], message: str) -> NoReturn:
    """Raise ``error`` with Pulsar's error body ``{"reason": message}``."""
    reason = " ".join(message.split())[:300]  # a status line holds one short line
    raise error(
        reason=reason,
        text=json.dumps({"reason": message}),
        content_type="application/json",
    )
