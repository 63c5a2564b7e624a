"""The Docker image without a Docker engine: the Dockerfile's paths and user are linted,
its entry command runs as a subprocess with the image's environment and serves, its
HEALTHCHECK command passes against that broker, and the compose file's Prometheus and
Grafana pieces point at things that exist. test_healthcheck.py follows the admin port
however it is given; test_compose.py checks the compose file's listeners."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.healthcheck import HEALTH
from magnetar.testing import EmbeddedBroker
from magnetar.testing.embedded import free_port

from .image import (
    DOCKER,
    ROOT,
    compose,
    healthcheck_command,
    image_env,
    instructions,
    run_healthcheck,
    start_entrypoint,
    stop,
    wait_healthy,
)


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_copy_sources_exist_and_are_not_ignored() -> None:
    copies = [rest for word, rest in instructions() if word == "COPY"]
    assert copies
    for rest in copies:
        *sources, _ = shlex.split(rest)
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the build context"
            for pattern in dockerignore():
                assert not fnmatch.fnmatch(source, pattern.removeprefix("**/")), (
                    f"COPY {source} is excluded by .dockerignore ({pattern})"
                )


def test_dockerignore_keeps_local_state_out() -> None:
    patterns = dockerignore()
    for needed in (".venv", "data", "*.egg-info"):
        assert needed in patterns


def test_runs_as_a_user_created_before_user() -> None:
    steps = instructions()
    users = [i for i, (word, _) in enumerate(steps) if word == "USER"]
    assert len(users) == 1
    name = steps[users[0]][1]
    assert name not in ("root", "0")
    created = [i for i, (word, rest) in enumerate(steps)
               if word == "RUN" and re.search(rf"useradd\b.*\b{name}\s*(&&|$)", rest)]
    assert created and created[0] < users[0]
    assert steps.index(("ENTRYPOINT", '["magnetar", "serve"]')) > users[0]


def test_healthcheck_is_magnetar_healthcheck_asking_a_real_route(broker: EmbeddedBroker) -> None:
    assert healthcheck_command() == ["magnetar", "healthcheck"]
    with urllib.request.urlopen(broker.admin_url + HEALTH, timeout=10) as answer:
        assert answer.status == 200


@pytest.fixture
def image_broker(tmp_path: Path) -> Iterator[tuple[dict[str, str], subprocess.Popen[bytes]]]:
    """The image's entry command with its environment (the data directory, ports and
    advertised address set as a `docker run -e` would)."""
    env = image_env(MAGNETAR_DATA_DIR=str(tmp_path / "data"), MAGNETAR_PORT=str(free_port()),
                    MAGNETAR_ADMIN_PORT=str(free_port()),
                    MAGNETAR_READY_FILE=str(tmp_path / "ready"),
                    MAGNETAR_ADVERTISED_ADDRESS="localhost")  # a name, resolvable here
    process = start_entrypoint(env)
    try:
        yield env, process
    finally:
        stop(process)


def test_entry_command_serves_with_the_image_environment(
    image_broker: tuple[dict[str, str], subprocess.Popen[bytes]],
) -> None:
    env, process = image_broker
    assert env["MAGNETAR_HOST"] == "0.0.0.0"
    port, admin_port = env["MAGNETAR_PORT"], env["MAGNETAR_ADMIN_PORT"]
    admin_url = f"http://127.0.0.1:{admin_port}"
    wait_healthy(admin_url, process)
    # Both listen on every address, not loopback only.
    listening = subprocess.run(["ss", "-ltn"], capture_output=True, text=True).stdout
    assert re.search(rf"(0\.0\.0\.0|\*|\[::\]):{port}\b", listening)
    assert re.search(rf"(0\.0\.0\.0|\*|\[::\]):{admin_port}\b", listening)
    # Lookups tell clients the advertised address.
    url = f"{admin_url}/lookup/v2/topic/persistent/public/default/docker-t"
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert json.load(answer)["brokerUrl"] == f"pulsar://localhost:{port}"
    # The data path works, the client following the lookup to the advertised name.
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}",
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
                           operation_timeout_seconds=30)
    try:
        client.create_producer("docker-t").send(b"hello")
    finally:
        client.close()
    assert list(Path(env["MAGNETAR_DATA_DIR"]).rglob("*.seg"))
    # The HEALTHCHECK command passes.
    check = run_healthcheck(env)
    assert check.returncode == 0, check.stderr


def test_compose_mounts_exist_and_prometheus_scrapes_the_broker() -> None:
    services = compose()["services"]
    assert set(services) == {"magnetar", "prometheus", "grafana"}
    assert services["magnetar"]["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}
    for service in services.values():
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if source.startswith("./"):
                assert (DOCKER / source).exists(), mount
    prometheus = (DOCKER / "prometheus.yml").read_text()
    assert 'targets: ["magnetar:8080"]' in prometheus
    assert "metrics_path: /metrics" in prometheus


def test_dashboard_charts_series_the_broker_exports(broker: EmbeddedBroker,
                                                    client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "dash")
    client.create_producer(topic).send(b"x")
    consumer.receive(timeout_millis=10_000)
    with urllib.request.urlopen(broker.admin_url + "/metrics", timeout=30) as answer:
        exported = answer.read().decode()
    dashboard = json.loads((DOCKER / "grafana" / "dashboards" / "magnetar.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    charted = {name for expr in exprs
               for name in re.findall(r"\b((?:pulsar|magnetar)_\w+)", expr)}
    wanted = {"pulsar_subscription_back_log", "pulsar_subscription_unacked_messages",
              "pulsar_subscription_msg_rate_out", "pulsar_rate_in", "pulsar_rate_out",
              "pulsar_throughput_in", "pulsar_throughput_out", "pulsar_out_bytes_total",
              "pulsar_storage_backlog_size", "magnetar_storage_write_latency_seconds_bucket"}
    assert wanted <= charted
    for name in charted:
        assert re.search(rf"^{name}[{{ ]", exported, re.M), f"{name} is not exported"
