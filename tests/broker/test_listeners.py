"""Advertised listeners (Pulsar's advertisedListeners) and the client's listener name.

A lookup answers the address of the listener the client names, or the internal one;
the official client's ``listener_name`` and magnetar's work end to end; an unknown
listener name is an error the official client reports at once (NotAllowedError, not
a Timeout after its 30 s operation timeout: Pulsar answers ServiceNotReady, which the
client retries until then). Settings the broker cannot use are refused by name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pulsar
import pytest
from official_client import quiet_logger

from magnetar.broker.config import BrokerConfig, ConfigError
from magnetar.broker.session.listeners import parse_listeners
from magnetar.client import Client
from magnetar.client.errors import NotAllowed
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker
from magnetar.testing.embedded import free_port

from .rawclient import RawPeer


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    port = free_port()
    listeners = (
        f"internal:pulsar://127.0.0.1:{port},"
        f"external:pulsar://localhost:{port},external:pulsar+ssl://localhost:6651,"
        "faraway:pulsar://broker.example.com:16650"
    )
    with EmbeddedBroker(port=port, admin=True, advertised_listeners=listeners) as b:
        yield b


def lookup(broker: EmbeddedBroker, listener: str | None) -> pb.CommandLookupTopicResponse:
    peer = RawPeer(broker.port)
    try:
        request = pb.CommandLookupTopic(topic="persistent://public/default/t", request_id=1)
        if listener is not None:
            request.advertised_listener_name = listener
        peer.send(BaseCommand(type=BaseCommand.LOOKUP, lookupTopic=request))
        response: pb.CommandLookupTopicResponse = peer.expect(
            BaseCommand.LOOKUP_RESPONSE
        ).command.lookupTopicResponse
        return response
    finally:
        peer.close()


def test_a_lookup_answers_the_named_listener(broker: EmbeddedBroker) -> None:
    port = broker.port
    internal = lookup(broker, None)
    assert internal.response == pb.CommandLookupTopicResponse.Connect
    assert internal.brokerServiceUrl == f"pulsar://127.0.0.1:{port}"
    assert not internal.HasField("brokerServiceUrlTls")
    assert lookup(broker, "").brokerServiceUrl == internal.brokerServiceUrl  # blank: none
    assert lookup(broker, "internal").brokerServiceUrl == internal.brokerServiceUrl

    external = lookup(broker, "external")
    assert external.brokerServiceUrl == f"pulsar://localhost:{port}"
    assert external.brokerServiceUrlTls == "pulsar+ssl://localhost:6651"

    faraway = lookup(broker, "faraway")
    assert faraway.brokerServiceUrl == "pulsar://broker.example.com:16650"
    # A loopback address is reached through the service URL the client used (as a
    # Pulsar standalone does, so a broker in a container needs no setting); a real
    # name is connected to as it is.
    assert internal.proxy_through_service_url and external.proxy_through_service_url
    assert not faraway.proxy_through_service_url


def test_an_unknown_listener_is_refused(broker: EmbeddedBroker) -> None:
    refused = lookup(broker, "elsewhere")
    assert refused.response == pb.CommandLookupTopicResponse.Failed
    assert refused.error == pb.NotAllowedError
    assert refused.message == "the broker do not have elsewhere listener"  # Pulsar's words


@pytest.mark.parametrize("listener", [None, "internal", "external"])
def test_the_official_client_works_through_its_listener(
    broker: EmbeddedBroker, listener: str | None
) -> None:
    topic = f"persistent://public/default/listener-{listener}"
    kwargs = {"listener_name": listener} if listener else {}
    client = pulsar.Client(
        broker.service_url,
        logger=quiet_logger(),
        operation_timeout_seconds=30,
        **kwargs,
    )
    try:
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"through " + str(listener).encode())
        assert consumer.receive(10_000).data() == b"through " + str(listener).encode()
    finally:
        client.close()


def test_the_official_client_reports_an_unknown_listener_at_once(broker: EmbeddedBroker) -> None:
    client = pulsar.Client(
        broker.service_url,
        logger=quiet_logger(),
        operation_timeout_seconds=30,
        listener_name="elsewhere",
    )
    try:
        with pytest.raises(pulsar.NotAllowedError):  # not pulsar.Timeout, 30 s later
            client.create_producer("persistent://public/default/nowhere")
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe("persistent://public/default/nowhere", "s")
    finally:
        client.close()


def test_magnetars_client_names_its_listener(broker: EmbeddedBroker) -> None:
    async def run() -> None:
        async with Client(broker.service_url, listener_name="external") as client:
            consumer = await client.subscribe("persistent://public/default/mg-l", "s")
            producer = await client.create_producer("persistent://public/default/mg-l")
            await producer.send(b"external")
            assert (await consumer.receive()).value == b"external"
        async with Client(broker.service_url, listener_name="elsewhere") as client:
            with pytest.raises(NotAllowed, match="elsewhere listener"):
                await client.create_producer("persistent://public/default/mg-l")

    asyncio.run(asyncio.wait_for(run(), 60))


def test_without_listeners_a_named_listener_is_unknown() -> None:
    with EmbeddedBroker() as broker:
        assert lookup(broker, None).brokerServiceUrl == broker.service_url
        assert lookup(broker, "internal").error == pb.NotAllowedError


def test_advertised_address_is_what_lookups_answer() -> None:
    """The Docker/compose setting: clients elsewhere are told the broker's name."""
    with EmbeddedBroker(advertised_address="magnetar") as broker:
        answer = lookup(broker, None)
        assert answer.brokerServiceUrl == f"pulsar://magnetar:{broker.port}"
        assert not answer.proxy_through_service_url


def test_the_listener_settings_are_checked() -> None:
    listeners = parse_listeners(
        "a:pulsar://h1:1, a:pulsar+ssl://h1:2, b:pulsar://h2:3, b:http://h2:8080"
    )
    assert list(listeners) == ["a", "b"]
    assert listeners["a"].broker_url_tls == "pulsar+ssl://h1:2"
    assert listeners["b"].http_url == "http://h2:8080"
    BrokerConfig(advertised_listeners="a:pulsar://h:1,b:pulsar://g:2",
                 internal_listener_name="b").validate()
    for settings, setting, words in [
        ({"advertised_listeners": "pulsar://h:1"}, "advertised_listeners", "name:scheme"),
        ({"advertised_listeners": "a:kafka://h:1"}, "advertised_listeners", "scheme"),
        ({"advertised_listeners": "a:pulsar://h"}, "advertised_listeners", "host:port"),
        ({"advertised_listeners": "a:pulsar://h:1,a:pulsar://g:2"}, "advertised_listeners",
         "more than one"),
        ({"advertised_listeners": "a:http://h:1"}, "advertised_listeners", "no pulsar://"),
        ({"advertised_listeners": "a:pulsar://h:1", "advertised_address": "h"},
         "advertised_address", "not be set together"),
        ({"advertised_listeners": "a:pulsar://h:1", "internal_listener_name": "b"},
         "internal_listener_name", "not a listener"),
        ({"internal_listener_name": "a"}, "internal_listener_name", "needs advertised_listeners"),
    ]:
        with pytest.raises(ConfigError) as caught:
            BrokerConfig(**settings).validate()  # type: ignore[arg-type]
        assert caught.value.setting == setting and words in caught.value.reason, settings


def test_the_internal_listener_is_the_default_answer() -> None:
    port = free_port()
    with EmbeddedBroker(
        port=port,
        advertised_listeners=f"public:pulsar://localhost:{port},private:pulsar://127.0.0.1:{port}",
        internal_listener_name="private",
    ) as broker:
        assert lookup(broker, None).brokerServiceUrl == f"pulsar://127.0.0.1:{port}"
        assert lookup(broker, "public").brokerServiceUrl == f"pulsar://localhost:{port}"


def test_a_loopback_answer_is_reached_through_the_service_url() -> None:
    """The Docker case without settings: the broker answers a loopback address its
    clients cannot reach (here 127.0.0.2, where nothing listens); the official client
    goes through the address it used instead, as with a Pulsar standalone."""
    with EmbeddedBroker(advertised_address="127.0.0.2") as broker:
        assert lookup(broker, None).brokerServiceUrl == f"pulsar://127.0.0.2:{broker.port}"
        client = pulsar.Client(
            broker.service_url,  # pulsar://127.0.0.1:<port>
            logger=quiet_logger(),
            operation_timeout_seconds=30,
        )
        try:
            consumer = client.subscribe("persistent://public/default/proxied", "s")
            client.create_producer("persistent://public/default/proxied").send(b"via")
            assert consumer.receive(10_000).data() == b"via"
        finally:
            client.close()
