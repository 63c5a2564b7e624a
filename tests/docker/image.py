"""docker/Dockerfile and docker/compose.yaml read as Docker reads them, for tests that
have no Docker engine: the Dockerfile's instructions and environment, the compose file
as YAML, and the image's entry command run as a subprocess with that environment."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

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


def entrypoint() -> list[str]:
    (command,) = [json.loads(rest) for word, rest in instructions() if word == "ENTRYPOINT"]
    return list(command)


def healthcheck_command() -> list[str]:
    """The HEALTHCHECK's CMD as the argv Docker runs (exec form: no shell)."""
    (rest,) = [rest for word, rest in instructions() if word == "HEALTHCHECK"]
    command = json.loads(rest.split(" CMD ", 1)[1])
    assert isinstance(command, list)
    return [str(arg) for arg in command]


def compose() -> dict[str, Any]:
    import yaml

    doc = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


def image_env(**settings: str) -> dict[str, str]:
    """This process's environment, the image's ENV on top (as `docker run -e` on top of
    that), the venv's scripts first on PATH as the image's are."""
    env = {**os.environ, **env_of_image(), "PATH": f"{BIN}:{os.environ['PATH']}"}
    env.update(settings)
    return env


def start_entrypoint(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    """The image's entry command with ``args`` after it (`docker run magnetar ARGS`)."""
    return subprocess.Popen([*entrypoint(), *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def stop(process: subprocess.Popen[bytes]) -> None:
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


def run_healthcheck(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The HEALTHCHECK as Docker runs it: the image's environment, none of the entry
    command's flags."""
    return subprocess.run(healthcheck_command(), env=env, timeout=60, capture_output=True,
                          text=True)
