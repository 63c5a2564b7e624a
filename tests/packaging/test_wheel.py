"""The wheel as someone else's project gets it: built from the files the sdist and the
Docker image take (pyproject.toml, README.md, LICENSE, src/), installed into a bare
venv with its runtime dependencies from the package index (through pip's cache), then
`magnetar serve` from that venv accepts magnetar's own client, and the pytest plugin's
fixture serves a tiny test project.

Slow by nature (an install): one venv for the module, bytecode not compiled.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from magnetar.testing.embedded import free_port

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
# What only the extras bring: none of it may come with the wheel alone.
EXTRAS_ONLY = {"pytest", "pulsar-client", "pyspark", "pyarrow", "mypy", "ruff", "grpcio-tools",
               "kafka-python", "trustme", "build", "pyyaml", "pulsar-lite", "nats-py"}


def bare_env() -> dict[str, str]:
    """The environment without this checkout: PYTHONPATH would let src/ shadow the
    installed wheel."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def run(args: list[str | Path], cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=bare_env(), timeout=timeout,
                          capture_output=True, text=True)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def pip_install(venv: Path, *what: str | Path) -> None:
    # The test venv's pip installs into the bare one (--python): no ensurepip there.
    run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install",
         "--quiet", "--no-compile", *what], cwd=venv.parent)


@dataclass
class Installed:
    venv: Path
    wheel: Path
    distributions: dict[str, str]  # name (normalized) -> version, right after the install

    @property
    def bin(self) -> Path:
        return self.venv / "bin"


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("packaging")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    # Built with this venv's setuptools (the test extra has it; isolation would install
    # it again: +10 s).
    run([sys.executable, "-m", "build", "--wheel", "--no-isolation",
         "--outdir", work / "dist", source], cwd=work)
    (wheel,) = (work / "dist").glob("magnetar-*-py3-none-any.whl")
    venv = work / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=work)
    pip_install(venv, wheel)
    listed = run([venv / "bin" / "python", "-c",
                  "import importlib.metadata as m, json; print(json.dumps("
                  "{d.metadata['Name']: d.version for d in m.distributions()}))"], cwd=work)
    distributions = {normalized(k): v for k, v in json.loads(listed).items()}
    yield Installed(venv, wheel, distributions)


def test_the_wheel_brings_the_runtime_dependencies_only(installed: Installed) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert installed.distributions["magnetar"] == project["version"]
    for requirement in project["dependencies"]:
        name, _, marker = requirement.partition(";")
        name = normalized(re.split(r"[<>=!~\[ ]", name.strip())[0])
        if "python_version >= '3.13'" in marker and sys.version_info < (3, 13):
            continue
        assert name in installed.distributions, f"{name} is a dependency but not installed"
    assert not EXTRAS_ONLY & set(installed.distributions)
    extras = project["optional-dependencies"]
    assert set(extras) == {"test", "spark", "bench"}
    # The CLI and the plugin are registered; the typing marker ships.
    version = run([installed.bin / "magnetar", "--version"], cwd=installed.venv)
    assert version.strip() == f"magnetar {project['version']}"
    plugins = run([installed.bin / "python", "-c",
                   "import importlib.metadata as m; "
                   "print([e.value for e in m.entry_points(group='pytest11')])"],
                  cwd=installed.venv)
    assert "magnetar.testing.pytest_plugin" in plugins
    files = run([installed.bin / "python", "-c",
                 "import magnetar, pathlib; p = pathlib.Path(magnetar.__file__).parent; "
                 "print(p); print((p / 'py.typed').exists())"], cwd=installed.venv)
    where, typed = files.split()
    assert Path(where).is_relative_to(installed.venv) and typed == "True"


CLIENT = """
import asyncio, sys
import magnetar
from magnetar.client import Client

async def main(url):
    async with Client(url) as client:
        consumer = await client.subscribe("wheel-t", "s", initial_position="earliest")
        producer = await client.create_producer("wheel-t")
        await producer.send(b"from the wheel")
        msg = await consumer.receive(timeout=30)
        await consumer.acknowledge(msg)
        print(msg.value.decode(), magnetar.__file__)

asyncio.run(main(sys.argv[1]))
"""


def test_magnetar_serve_from_the_wheel_serves_its_client(installed: Installed,
                                                          tmp_path: Path) -> None:
    port, admin_port = free_port(), free_port()
    broker = subprocess.Popen(
        [installed.bin / "magnetar", "serve", "--port", str(port), "--admin-port",
         str(admin_port), "--data-dir", tmp_path / "data", "--log-format", "text"],
        cwd=tmp_path, env=bare_env(), stderr=subprocess.PIPE, text=True)
    try:
        assert broker.stderr is not None
        lines = []
        for line in broker.stderr:  # the ready line, or its exit on an error
            lines.append(line)
            if " ready on " in line:
                break
        assert f"ready on pulsar://127.0.0.1:{port}" in lines[-1], "".join(lines)
        out = run([installed.bin / "python", "-c", CLIENT, f"pulsar://127.0.0.1:{port}"],
                  cwd=tmp_path, timeout=120)
        text, module = out.rsplit(" ", 1)
        assert text == "from the wheel"
        assert Path(module).is_relative_to(installed.venv)  # not this checkout's src/
    finally:
        broker.terminate()
        assert broker.wait(60) == 0


PROJECT_TEST = """
import asyncio
from magnetar.client import Client

def test_roundtrip(magnetar_broker):
    async def roundtrip():
        async with Client(magnetar_broker.service_url) as client:
            consumer = await client.subscribe("t", "s")
            await (await client.create_producer("t")).send(b"x")
            return (await consumer.receive(timeout=30)).value
    assert asyncio.run(roundtrip()) == b"x"
"""


def test_the_pytest_plugin_serves_a_project(installed: Installed, tmp_path: Path) -> None:
    pip_install(installed.venv, "pytest")
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_it.py").write_text(textwrap.dedent(PROJECT_TEST))
    out = run([installed.bin / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
              cwd=project, timeout=300)
    assert re.search(r"\b1 passed\b", out), out
