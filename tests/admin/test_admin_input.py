"""Admin input the broker cannot take is refused with 400 before any route runs (issue
23, item 6): JSON nested deeper than 64 levels, a lone surrogate, a body that is not
UTF-8, on every route that takes a body; names (tenant, namespace, topic, subscription)
with a control character or too long for a file name, by the rule the binary protocol
applies too. No answer names a path of the broker's, a 500 included."""

from __future__ import annotations

import re
import shutil
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import Reply, http
from official_client import quiet_logger

from magnetar.protocol.frames import FrameDecoder, encode_command
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

NS = "/admin/v2/persistent/public/default"
MAX_JSON_DEPTH = 64  # the bound (magnetar.admin.inputs)


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True) as broker:
        yield broker


@pytest.fixture(scope="module")
def topic(broker: EmbeddedBroker) -> str:
    """A topic with a subscription ``s``, for the routes' path parameters."""
    local = f"input-{uuid.uuid4().hex[:8]}"
    quiet = quiet_logger()
    client = pulsar.Client(broker.service_url, logger=quiet)
    try:
        client.subscribe(f"persistent://public/default/{local}", "s").close()
    finally:
        client.close()
    return local


def body_routes(broker: EmbeddedBroker, topic: str) -> list[tuple[str, str]]:
    """(method, path) of every admin route that takes a body, its parameters filled
    with names that exist, but the raw-ingest route (its body is bytes)."""
    assert http(broker, "GET", "/admin/v2/clusters").status == 200  # the app is loaded
    assert broker.server is not None and broker.server.admin is not None
    app = broker.server.admin.server
    assert app is not None
    values = {
        "domain": "persistent", "tenant": "public", "namespace": "default", "topic": topic,
        "sub": "s", "role": "someone", "cluster": "standalone", "version": "0",
        "timestamp": "0", "count": "1", "seconds": "1", "position": "1",
    }
    routes = []
    for route in app.app.router.routes():
        canonical = route.resource.canonical if route.resource is not None else ""
        if route.method not in ("POST", "PUT") or canonical.endswith("/entries"):
            continue
        routes.append((route.method, re.sub(r"{(\w+)}", lambda m: values[m.group(1)], canonical)))
    assert len(routes) > 20
    return routes


def binary_subscribe(port: int, topic: str, subscription: str) -> pb.CommandError:
    """CONNECT and SUBSCRIBE on the binary protocol; the ERROR that answers it."""
    subscribe = pb.CommandSubscribe(
        topic=topic, subscription=subscription, subType=pb.CommandSubscribe.Shared,
        consumer_id=1, request_id=1,
    )
    connect = pb.CommandConnect(client_version="input-test", protocol_version=21)
    decoder = FrameDecoder()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(encode_command(BaseCommand(type=BaseCommand.CONNECT, connect=connect)))
        sock.sendall(encode_command(BaseCommand(type=BaseCommand.SUBSCRIBE, subscribe=subscribe)))
        while True:
            data = sock.recv(65536)
            assert data, "the broker closed the connection"
            for frame in decoder.feed(data):
                if frame.command.type == BaseCommand.ERROR:
                    return frame.command.error
                assert frame.command.type == BaseCommand.CONNECTED, frame.command


def refused(reply: Reply, words: str) -> bool:
    return reply.status == 400 and words in reply.json()["reason"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("[" * 100_000 + "]" * 100_000, f"nests deeper than {MAX_JSON_DEPTH} levels"),
        ('{"a": ' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1), "nests deeper"),
        ('{"adminRoles": ["\\ud800"], "allowedClusters": ["standalone"]}', "lone surrogate"),
        ('"\\udc00"', "lone surrogate"),
        (b'{"a": "\xff\xfe"}', "not UTF-8"),
    ],
    ids=["nested 100000", "nested 65", "high surrogate", "low surrogate", "not UTF-8"],
)
def test_a_body_the_broker_cannot_take_is_400_on_every_route(
    broker: EmbeddedBroker, topic: str, body: str | bytes, words: str
) -> None:
    for method, path in body_routes(broker, topic):
        reply = http(broker, method, path, body)
        assert refused(reply, words), (method, path, reply)
    # Nothing was changed: the topic and its subscription are still there.
    assert http(broker, "GET", f"{NS}/{topic}/subscriptions").json() == ["s"]


def test_json_within_the_bound_reaches_the_route(broker: EmbeddedBroker) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    deep = '{"adminRoles": [], "allowedClusters": ["standalone"], "x": ' + (
        "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1) + "}"
    )
    assert http(broker, "PUT", f"/admin/v2/tenants/{tenant}", deep).status == 204
    paired = '{"adminRoles": ["\\ud83d\\udca5"], "allowedClusters": ["standalone"]}'
    assert http(broker, "PUT", f"/admin/v2/tenants/{tenant}x", paired).status == 204
    assert http(broker, "GET", f"/admin/v2/tenants/{tenant}x").json()["adminRoles"] == ["💥"]


def test_a_long_subscription_name_is_400_as_on_the_binary_protocol(
    broker: EmbeddedBroker, topic: str
) -> None:
    name = "s" * 250
    reply = http(broker, "PUT", f"{NS}/{topic}/subscription/{name}")
    assert reply.status == 400
    reason = reply.json()["reason"]
    assert "at most 200" in reason and "250 bytes" in reason
    assert str(broker.data_dir) not in reply.body.decode()
    # The binary protocol refuses the same name with the same words.
    error = binary_subscribe(broker.port, f"persistent://public/default/{topic}", name)
    assert (error.error, error.message) == (pb.NotAllowedError, reason)
    assert http(broker, "GET", f"{NS}/{topic}/subscriptions").json() == ["s"]


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("PUT", "/admin/v2/namespaces/public/a%00b", "namespace"),
        ("GET", "/admin/v2/persistent/public/a%00b", "namespace"),
        ("PUT", "/admin/v2/tenants/a%00b", "tenant"),
        ("PUT", f"{NS}/a%00b", "topic"),
        ("PUT", f"{NS}/TOPIC/subscription/a%00b", "subscription"),
        ("PUT", "/admin/v2/namespaces/public/" + "n" * 201, "namespace"),
        ("PUT", f"{NS}/" + "t" * 201, "topic"),
    ],
)
def test_names_with_a_control_character_or_too_long_are_400(
    broker: EmbeddedBroker, topic: str, method: str, path: str, kind: str
) -> None:
    reply = http(broker, method, path.replace("TOPIC", topic))
    assert reply.status == 400, reply
    reason = reply.json()["reason"]
    assert reason.startswith(f"{kind} name ")
    assert "control character ('\\x00' at 1)" in reason or "at most 200" in reason
    assert "\x00" not in reply.reason  # the status line stays one printable line


def test_a_storage_failure_names_no_path(broker: EmbeddedBroker) -> None:
    """A 500 says what failed (the errno's words), never where."""
    local = f"broken-{uuid.uuid4().hex[:8]}"
    assert http(broker, "PUT", f"{NS}/{local}").status == 204
    cursors = Path(broker.data_dir, "persistent", "public", "default", local, "cursors")
    shutil.rmtree(cursors, ignore_errors=True)
    cursors.write_text("not a directory")  # where subscription positions go
    reply = http(broker, "PUT", f"{NS}/{local}/subscription/s")
    assert reply.status == 500
    assert "Not a directory" in reply.json()["reason"]
    assert str(broker.data_dir) not in reply.body.decode()
    assert "/" not in reply.json()["reason"]
