"""docker/compose.yaml read as YAML: what its header promises is published, and its
broker advertises two listeners (Pulsar's advertisedListeners) so that clients on the
host and in the other containers both work. Without a Docker engine, the broker runs
as the image's entry command with the compose environment, the service name
`magnetar` standing for this machine's host name and the ports for free ones; the
official client then works as from the host (localhost, no listener name) and as from
a container (the host name, listener "internal", pulsar:// and http:// service URLs)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.session.listeners import parse_listeners, select
from magnetar.testing.embedded import free_port

from .image import DOCKER, compose, env_of_image, image_env, start_entrypoint, stop, wait_healthy


def broker_service() -> dict[str, Any]:
    service = compose()["services"]["magnetar"]
    assert isinstance(service, dict)
    return service


def published() -> dict[int, int]:
    """host port -> container port, over every service."""
    ports: dict[int, int] = {}
    for service in compose()["services"].values():
        for mapping in service.get("ports", []):
            host, container = str(mapping).rsplit(":", 2)[-2:]
            ports[int(host)] = int(container)
    return ports


def test_the_header_promises_only_published_ports() -> None:
    header = (DOCKER / "compose.yaml").read_text().split("\nservices:")[0]
    promised = {int(port) for port in re.findall(r"//localhost:(\d+)", header)}
    assert promised == {6650, 8080, 9090, 3000}
    assert promised <= set(published())
    assert "pulsar://magnetar:6650" in header and 'listener name\n# "internal"' in header


def test_two_listeners_the_host_one_first() -> None:
    env = {str(k): str(v) for k, v in broker_service()["environment"].items()}
    assert "MAGNETAR_ADVERTISED_ADDRESS" not in env
    listeners = parse_listeners(env["MAGNETAR_ADVERTISED_LISTENERS"])
    assert set(listeners) == {"external", "internal"}
    ports = published()
    image = env_of_image()
    port, admin_port = int(image.get("MAGNETAR_PORT", 6650)), int(
        image.get("MAGNETAR_ADMIN_PORT", 8080))
    # External: localhost and the host's side of the published ports.
    host_port = next(h for h, c in ports.items() if c == port)
    host_admin = next(h for h, c in ports.items() if c == admin_port)
    assert listeners["external"].broker_url == f"pulsar://localhost:{host_port}"
    assert listeners["external"].http_url == f"http://localhost:{host_admin}"
    # Internal: the service name and the container's ports.
    assert listeners["internal"].broker_url == f"pulsar://magnetar:{port}"
    assert listeners["internal"].http_url == f"http://magnetar:{admin_port}"
    # A lookup naming no listener (a host client's) answers the external one.
    config = BrokerConfig(advertised_listeners=env["MAGNETAR_ADVERTISED_LISTENERS"],
                          internal_listener_name=env.get("MAGNETAR_INTERNAL_LISTENER_NAME"))
    assert select(config, None).name == "external"


def test_prometheus_waits_for_a_healthy_broker() -> None:
    services = compose()["services"]
    assert services["prometheus"]["depends_on"]["magnetar"]["condition"] == "service_healthy"
    # No override: the image's HEALTHCHECK (magnetar healthcheck) decides.
    assert "healthcheck" not in services["magnetar"]


@dataclass
class Running:
    hostname: str  # what the containers' `magnetar` stands for here
    port: int
    admin_port: int


@pytest.fixture
def compose_broker(tmp_path: Path) -> Iterator[Running]:
    hostname = socket.gethostname()
    socket.getaddrinfo(hostname, None)  # a name this machine resolves
    port, admin_port = free_port(), free_port()
    listeners = str(broker_service()["environment"]["MAGNETAR_ADVERTISED_LISTENERS"])
    listeners = (listeners.replace("//magnetar:", f"//{hostname}:")
                 .replace(":6650", f":{port}").replace(":8080", f":{admin_port}"))
    env = image_env(MAGNETAR_DATA_DIR=str(tmp_path / "data"), MAGNETAR_PORT=str(port),
                    MAGNETAR_ADMIN_PORT=str(admin_port),
                    MAGNETAR_READY_FILE=str(tmp_path / "ready"),
                    MAGNETAR_ADVERTISED_LISTENERS=listeners)
    process: subprocess.Popen[bytes] = start_entrypoint(env)
    try:
        wait_healthy(f"http://127.0.0.1:{admin_port}", process)
        yield Running(hostname, port, admin_port)
    finally:
        stop(process)


def http_lookup(admin_url: str, topic: str, listener: str | None = None) -> dict[str, str]:
    url = f"{admin_url}/lookup/v2/topic/persistent/public/default/{topic}"
    if listener:
        url += f"?listenerName={listener}"
    with urllib.request.urlopen(url, timeout=30) as answer:
        found = json.load(answer)
    assert isinstance(found, dict)
    return found


def roundtrip(service_url: str, topic: str, listener_name: str | None = None) -> bytes:
    kwargs = {"listener_name": listener_name} if listener_name else {}
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
                           operation_timeout_seconds=30, **kwargs)
    try:
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(service_url.encode())
        message = consumer.receive(timeout_millis=30_000)
        consumer.acknowledge(message)
        return bytes(message.data())
    finally:
        client.close()


def test_clients_on_the_host_and_in_containers_both_work(compose_broker: Running) -> None:
    b = compose_broker
    host_admin = f"http://localhost:{b.admin_port}"
    assert http_lookup(host_admin, "c1") == {
        "brokerUrl": f"pulsar://localhost:{b.port}", "httpUrl": host_admin,
        "nativeUrl": f"pulsar://localhost:{b.port}", "brokerUrlSsl": ""}
    inside = http_lookup(host_admin, "c1", "internal")
    assert inside["brokerUrl"] == f"pulsar://{b.hostname}:{b.port}"
    assert inside["httpUrl"] == f"http://{b.hostname}:{b.admin_port}"
    # From the host, as the header says: no listener name.
    for url in (f"pulsar://localhost:{b.port}", host_admin):
        assert roundtrip(url, f"host-{url[:4]}") == url.encode()
    # From a container: the service name, listener "internal"; pulsar:// without one too.
    for url, name in ((f"pulsar://{b.hostname}:{b.port}", "internal"),
                      (f"http://{b.hostname}:{b.admin_port}", "internal"),
                      (f"pulsar://{b.hostname}:{b.port}", None)):
        assert roundtrip(url, f"container-{url[:4]}-{name}", name) == url.encode()
