"""Connections: keepalive, lookup redirects, connection errors, client lifecycle.

Some tests put a tiny scripted server in front of (or instead of) the real broker
to make it do what a healthy broker will not: redirect lookups, or stop
answering PINGs.
"""

from __future__ import annotations

import asyncio

import pytest
from scripted_broker import T, lookup_answer, serve

from magnetar.client import Client, ConnectError
from magnetar.client.errors import AlreadyClosed, TopicNotFound
from magnetar.protocol.frames import encode_command
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker


async def test_connect_announces_protocol_and_request_reply(broker: EmbeddedBroker) -> None:
    client = Client(broker.service_url)
    try:
        await client.get_topic_partitions("anything")
        (conn,) = client._pool.connections()
        assert conn.protocol_version >= 1
        assert conn.supports_request_reply  # magnetar's broker echoes PIP-371 support
        assert conn.server_version
    finally:
        await client.close()


async def test_lookup_follows_redirects_with_authoritative_flag(broker: EmbeddedBroker) -> None:
    def second(cmd: BaseCommand, transport: asyncio.Transport) -> None:
        if cmd.type == T.LOOKUP:
            transport.write(lookup_answer(cmd, broker.service_url,
                                          pb.CommandLookupTopicResponse.Connect, True))

    server_b, url_b, log_b = await serve(second)

    def first(cmd: BaseCommand, transport: asyncio.Transport) -> None:
        if cmd.type == T.LOOKUP:
            transport.write(lookup_answer(cmd, url_b, pb.CommandLookupTopicResponse.Redirect,
                                          True))
        elif cmd.type == T.PARTITIONED_METADATA:
            reply = BaseCommand(type=T.PARTITIONED_METADATA_RESPONSE)
            reply.partitionMetadataResponse.request_id = cmd.partitionMetadata.request_id
            reply.partitionMetadataResponse.partitions = 0
            transport.write(encode_command(reply))

    server_a, url_a, log_a = await serve(first)
    client = Client(url_a)
    try:
        producer = await client.create_producer("redirected")
        await producer.send(b"went to the real broker")
        lookups_a = [c.lookupTopic for c in log_a if c.type == T.LOOKUP]
        lookups_b = [c.lookupTopic for c in log_b if c.type == T.LOOKUP]
        assert lookups_a[0].topic == "persistent://public/default/redirected"
        assert not lookups_a[0].authoritative
        assert lookups_b and lookups_b[0].authoritative  # the redirect's flag is honored
        connect = next(c.connect for c in log_a if c.type == T.CONNECT)
        assert connect.protocol_version == 21
        assert connect.feature_flags.supports_request_reply
    finally:
        await client.close()
        server_a.close()
        server_b.close()


async def test_lookup_failure_maps_to_error() -> None:
    def refuse(cmd: BaseCommand, transport: asyncio.Transport) -> None:
        if cmd.type == T.PARTITIONED_METADATA:
            reply = BaseCommand(type=T.PARTITIONED_METADATA_RESPONSE)
            resp = reply.partitionMetadataResponse
            resp.request_id = cmd.partitionMetadata.request_id
            resp.response = pb.CommandPartitionedTopicMetadataResponse.Failed
            resp.error = pb.TopicNotFound
            resp.message = "no such topic here"
            transport.write(encode_command(reply))

    server, url, _ = await serve(refuse)
    client = Client(url)
    try:
        with pytest.raises(TopicNotFound, match="no such topic here"):
            await client.create_producer("missing")
    finally:
        await client.close()
        server.close()


async def test_client_closes_connection_when_pongs_stop() -> None:
    server, url, log = await serve(lambda cmd, transport: None)  # never answers PING
    client = Client(url, keep_alive_interval=0.1)
    try:
        conn = await client._lookup.service_connection()
        await asyncio.sleep(0.5)
        assert any(c.type == T.PING for c in log)
        assert conn.closed
        assert "PING" in str(conn.close_reason)
    finally:
        await client.close()
        server.close()


async def test_keepalive_keeps_an_idle_connection_open() -> None:
    with EmbeddedBroker(keepalive_interval=0.1) as broker:
        client = Client(broker.service_url, keep_alive_interval=0.1)
        try:
            producer = await client.create_producer("idle")
            (conn,) = client._pool.connections()
            await asyncio.sleep(0.8)  # several broker PINGs answered, several of ours sent
            assert not conn.closed
            await producer.send(b"still here")
            assert client._pool.connections() == [conn]
        finally:
            await client.close()


async def test_connect_error_when_nothing_listens() -> None:
    from magnetar.testing.embedded import free_port

    client = Client(f"pulsar://127.0.0.1:{free_port()}", operation_timeout=0.5,
                    connection_timeout=0.5)
    try:
        with pytest.raises(ConnectError):
            await client.create_producer("nowhere")
    finally:
        await client.close()


async def test_closed_client_refuses_work(broker: EmbeddedBroker) -> None:
    async with Client(broker.service_url) as client:
        producer = await client.create_producer("lifecycle")
        consumer = await client.subscribe("lifecycle", "s")
    with pytest.raises(AlreadyClosed):
        await producer.send(b"x")
    with pytest.raises(AlreadyClosed):
        await consumer.receive(0.1)
    with pytest.raises(AlreadyClosed):
        await client.create_producer("lifecycle")


async def test_token_authentication_goes_into_connect() -> None:
    from magnetar.client import AuthenticationToken

    server, url, log = await serve(lambda cmd, transport: None)
    tokens = iter(["first-token", "second-token"])
    client = Client(url, auth=AuthenticationToken(lambda: next(tokens)))
    try:
        await client._lookup.service_connection()
        connect = next(c.connect for c in log if c.type == T.CONNECT)
        assert connect.auth_method_name == "token"
        assert connect.auth_data == b"first-token"
    finally:
        await client.close()
        server.close()
