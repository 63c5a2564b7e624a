"""Binary-protocol lookups: which broker serves a topic, partition counts, namespace
topics, a topic's schema."""

from __future__ import annotations

from magnetar.client.errors import ConnectError, LookupFailed, error_for_code
from magnetar.client.schema import SchemaInfo
from magnetar.client.transport.connection import Connection
from magnetar.client.transport.pool import ConnectionPool, parse_service_url
from magnetar.protocol.pb import BaseCommand, pb

T = BaseCommand.Type
_Lookup = pb.CommandLookupTopicResponse
_Partitions = pb.CommandPartitionedTopicMetadataResponse


class LookupService:
    """Asks the brokers of the service URL, following redirects to the owner."""

    def __init__(
        self,
        pool: ConnectionPool,
        service_url: str,
        *,
        max_redirects: int = 20,
        listener_name: str | None = None,
    ) -> None:
        hosts, tls = parse_service_url(service_url)
        scheme = "pulsar+ssl" if tls else "pulsar"
        self._urls = [f"{scheme}://{host}:{port}" for host, port in hosts]
        self._tls = tls
        self._next = 0
        self._pool = pool
        self._max_redirects = max_redirects
        self._listener_name = listener_name

    @property
    def service_url(self) -> str:
        return self._urls[self._next % len(self._urls)]

    async def service_connection(self) -> Connection:
        """A connection to one of the service URL's hosts (the next one after a failure)."""
        last: Exception | None = None
        for _ in range(len(self._urls)):
            url = self._urls[self._next % len(self._urls)]
            try:
                return await self._pool.get(url)
            except ConnectError as exc:
                last = exc
                self._next += 1
        assert last is not None
        raise last

    async def get_broker(self, topic: str) -> tuple[str, str]:
        """(logical url, physical url) of the broker that serves ``topic``."""
        conn = await self.service_connection()
        authoritative = False
        for _ in range(self._max_redirects):
            request_id = conn.new_request_id()
            cmd = BaseCommand(type=T.LOOKUP)
            lookup = cmd.lookupTopic
            lookup.topic = topic
            lookup.request_id = request_id
            lookup.authoritative = authoritative
            if self._listener_name:
                lookup.advertised_listener_name = self._listener_name
            response = (await conn.request(cmd, request_id)).lookupTopicResponse
            if response.response == _Lookup.Failed:
                raise error_for_code(response.error, response.message)
            url = self._pick_url(response)
            if not url:
                # A broker that answers without an address means "me".
                url = conn.logical_url
            if response.response == _Lookup.Connect:
                if response.proxy_through_service_url:
                    return url, self.service_url
                return url, url
            # Redirect: ask the broker it points at, honoring its authoritative flag.
            authoritative = response.authoritative
            if response.proxy_through_service_url:
                conn = await self._pool.get(url, self.service_url)
            else:
                conn = await self._pool.get(url)
        raise LookupFailed(f"lookup of {topic} redirected more than {self._max_redirects} times")

    def _pick_url(self, response: pb.CommandLookupTopicResponse) -> str:
        if self._tls and response.brokerServiceUrlTls:
            return response.brokerServiceUrlTls
        return response.brokerServiceUrl

    async def get_partition_count(self, topic: str) -> int:
        """Number of partitions of ``topic``; 0 for a non-partitioned topic."""
        conn = await self.service_connection()
        request_id = conn.new_request_id()
        cmd = BaseCommand(type=T.PARTITIONED_METADATA)
        cmd.partitionMetadata.topic = topic
        cmd.partitionMetadata.request_id = request_id
        response = (await conn.request(cmd, request_id)).partitionMetadataResponse
        if response.response == _Partitions.Failed:
            raise error_for_code(response.error, response.message)
        return response.partitions

    async def get_topics_of_namespace(self, namespace: str, mode: str = "persistent") -> list[str]:
        conn = await self.service_connection()
        request_id = conn.new_request_id()
        cmd = BaseCommand(type=T.GET_TOPICS_OF_NAMESPACE)
        req = cmd.getTopicsOfNamespace
        req.request_id = request_id
        req.namespace = namespace
        req.mode = {
            "persistent": pb.CommandGetTopicsOfNamespace.PERSISTENT,
            "non-persistent": pb.CommandGetTopicsOfNamespace.NON_PERSISTENT,
            "all": pb.CommandGetTopicsOfNamespace.ALL,
        }[mode]
        response = (await conn.request(cmd, request_id)).getTopicsOfNamespaceResponse
        return list(response.topics)

    async def get_schema(
        self, topic: str, version: bytes | None = None
    ) -> tuple[SchemaInfo, bytes] | None:
        """``topic``'s schema (its latest, or the one of ``version``) and its version,
        by GET_SCHEMA; None when the topic has none, or does not exist (the broker's
        TopicNotFound, which the official clients take as "no schema" too)."""
        conn = await self.service_connection()
        request_id = conn.new_request_id()
        cmd = BaseCommand(type=T.GET_SCHEMA)
        cmd.getSchema.topic = topic
        cmd.getSchema.request_id = request_id
        if version is not None:
            cmd.getSchema.schema_version = version
        response = (await conn.request(cmd, request_id)).getSchemaResponse
        if response.HasField("error_code"):
            if response.error_code == pb.TopicNotFound:
                return None
            raise error_for_code(response.error_code, response.error_message)
        if not response.HasField("schema"):
            return None
        return SchemaInfo.from_pb(response.schema), response.schema_version
