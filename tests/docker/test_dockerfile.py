"""The Docker image without a Docker engine: the Dockerfile's paths and user are linted,
its entry command runs as a subprocess with the image's environment and serves, its
HEALTHCHECK command passes against that broker and fails without one, and the
compose file's Prometheus and Grafana pieces point at things that exist."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.commands.admin import GROUPS
from magnetar.testing import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
BIN = Path(sys.executable).parent  # the venv's magnetar script, as on the image's PATH


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of docker/Dockerfile, continuation lines joined."""
    text = (DOCKER / "Dockerfile").read_text()
    joined = re.sub(r"\\\n", " ", text)
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def env_of_image() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in instructions():
        if word == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


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


def healthcheck_command() -> str:
    (rest,) = [rest for word, rest in instructions() if word == "HEALTHCHECK"]
    return rest.split(" CMD ", 1)[1]


def test_healthcheck_calls_a_real_route(broker: EmbeddedBroker) -> None:
    command = healthcheck_command()
    group, action = re.search(r"admin .* (\w+) (\w+) >", command).groups()  # type: ignore[union-attr]
    (spec,) = [c for c in GROUPS[group][1] if c.name == action]
    method, path, _, _ = spec.call(None)  # type: ignore[arg-type]
    assert (method, path) == ("GET", "/admin/v2/brokers/health")
    with urllib.request.urlopen(broker.admin_url + path, timeout=10) as answer:
        assert answer.status == 200


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def image_broker(tmp_path: Path) -> Iterator[tuple[dict[str, str], subprocess.Popen[bytes]]]:
    """The image's entry command with its environment (the data directory, ports and
    advertised address set as a `docker run -e` would)."""
    (entrypoint,) = [json.loads(rest) for word, rest in instructions() if word == "ENTRYPOINT"]
    env = {**os.environ, **env_of_image(), "PATH": f"{BIN}:{os.environ['PATH']}"}
    env.update(MAGNETAR_DATA_DIR=str(tmp_path / "data"), MAGNETAR_PORT=str(free_port()),
               MAGNETAR_ADMIN_PORT=str(free_port()),
               MAGNETAR_ADVERTISED_ADDRESS="localhost")  # a name, resolvable here
    process = subprocess.Popen(entrypoint, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    try:
        yield env, process
    finally:
        process.terminate()
        assert process.wait(60) == 0  # SIGTERM: a clean stop


def wait_healthy(admin_url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        try:
            with urllib.request.urlopen(admin_url + "/admin/v2/brokers/health", timeout=5):
                return
        except OSError:
            assert time.monotonic() < deadline, "the broker did not come up"
            time.sleep(0.2)


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
    # The HEALTHCHECK command, run by a shell as Docker does, passes.
    check = subprocess.run(["/bin/sh", "-c", healthcheck_command()], env=env, timeout=60)
    assert check.returncode == 0


def test_healthcheck_fails_without_a_broker() -> None:
    env = {**os.environ, **env_of_image(), "PATH": f"{BIN}:{os.environ['PATH']}",
           "MAGNETAR_ADMIN_PORT": str(free_port())}
    check = subprocess.run(["/bin/sh", "-c", healthcheck_command()], env=env, timeout=60,
                           capture_output=True)
    assert check.returncode == 1


def test_compose_wires_broker_prometheus_and_grafana() -> None:
    compose = (DOCKER / "compose.yaml").read_text()
    for service in ("magnetar", "prometheus", "grafana"):
        assert re.search(rf"^  {service}:$", compose, re.M)
    assert "dockerfile: docker/Dockerfile" in compose and "context: .." in compose
    assert "MAGNETAR_ADVERTISED_ADDRESS: magnetar" in compose
    mounts = re.findall(r"- \./([\w./-]+):", compose)
    for mount in mounts:
        assert (DOCKER / mount).exists(), mount
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
    charted = {name for expr in exprs for name in re.findall(r"\b(pulsar_\w+)", expr)}
    wanted = {"pulsar_subscription_back_log", "pulsar_subscription_unacked_messages",
              "pulsar_subscription_msg_rate_out", "pulsar_rate_in", "pulsar_rate_out",
              "pulsar_throughput_in", "pulsar_throughput_out", "pulsar_out_bytes_total",
              "pulsar_storage_backlog_size", "pulsar_storage_write_latency_bucket"}
    assert wanted <= charted
    for name in charted:
        assert re.search(rf"^{name}[{{ ]", exported, re.M), f"{name} is not exported"
