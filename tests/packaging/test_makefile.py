"""The Makefile's install plan, run by make itself with stand-ins for python and the
venv's tools that only log what they are asked: `make run` installs the runtime only,
`make test` the extras on top, neither installs again what the other installed (one
venv, two stamps), a changed pyproject.toml installs again, and `make run` passes its
PORT, ADMIN_PORT and DATA_DIR to `magnetar serve`."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = '#!/bin/sh\necho "$(basename "$0") $*" >> "$MAKE_LOG"\n'
# Python that makes a venv of stand-ins when asked for one.
PYTHON = TOOL + (
    'if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin" && cp "$FAKES"/* "$3/bin/"; fi\n'
)


class Checkout:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.log = path / "make.log"
        fakes = path / "fakes"
        fakes.mkdir()
        for name in ("python", "magnetar", "ruff", "mypy"):
            (fakes / name).write_text(PYTHON if name == "python" else TOOL)
            (fakes / name).chmod(0o755)
        for name in ("Makefile", "pyproject.toml"):
            shutil.copy(ROOT / name, path / name)

    def make(self, *args: str) -> list[str]:
        """What `make ARGS` ran, as logged by the stand-ins."""
        self.log.write_text("")
        env = {**os.environ, "MAKE_LOG": str(self.log), "FAKES": str(self.path / "fakes")}
        done = subprocess.run(["make", "--no-print-directory", *args,
                               f"PYTHON={self.path / 'fakes' / 'python'}"],
                              cwd=self.path, env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        return self.log.read_text().splitlines()

    def age(self, name: str, seconds_ago: float) -> None:
        then = time.time() - seconds_ago
        os.utime(self.path / name, (then, then))


def installs(ran: list[str]) -> list[str]:
    return [line for line in ran if " pip install " in line and "--upgrade pip" not in line]


@pytest.fixture
def checkout(tmp_path: Path) -> Checkout:
    return Checkout(tmp_path)


def test_run_installs_the_runtime_only_and_test_adds_the_extras(checkout: Checkout) -> None:
    ran = checkout.make("run")
    assert ran[0].startswith("python -m venv ")
    assert installs(ran) == ["python -m pip install --quiet -e ."]
    assert ran[-1] == "magnetar serve --port 6650 --admin-port 8080 --data-dir ./data"
    assert installs(checkout.make("run")) == []
    ran = checkout.make("test")
    assert installs(ran) == ["python -m pip install --quiet -e .[test,spark]"]
    assert [line.split()[0] for line in ran[1:]] == ["ruff", "mypy", "python"]
    assert ran[-1].startswith("python -m pytest ")
    assert installs(checkout.make("run")) == []
    assert installs(checkout.make("test")) == []


def test_run_after_test_installs_nothing(checkout: Checkout) -> None:
    assert installs(checkout.make("test")) == ["python -m pip install --quiet -e .[test,spark]"]
    ran = checkout.make("run")
    assert installs(ran) == [] and ran[-1].startswith("magnetar serve ")


def test_a_changed_pyproject_installs_again(checkout: Checkout) -> None:
    checkout.make("test")
    for stamp in (".venv/.installed-runtime", ".venv/.installed-test"):
        checkout.age(stamp, 100)
    checkout.age("pyproject.toml", 50)
    assert installs(checkout.make("run")) == ["python -m pip install --quiet -e ."]
    assert installs(checkout.make("test")) == ["python -m pip install --quiet -e .[test,spark]"]


def test_run_takes_port_admin_port_and_data_dir(checkout: Checkout) -> None:
    ran = checkout.make("run", "PORT=6651", "ADMIN_PORT=8081", "DATA_DIR=/tmp/m")
    assert ran[-1] == "magnetar serve --port 6651 --admin-port 8081 --data-dir /tmp/m"


def test_dist_builds_sdist_and_wheel(checkout: Checkout) -> None:
    ran = checkout.make("dist")
    assert "python -m pip install --quiet build" in ran
    assert ran[-1] == "python -m build --quiet --outdir dist ."
