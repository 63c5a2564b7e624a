"""The image's HEALTHCHECK follows the admin port the broker was given, by a flag after
the image name, a MAGNETAR_ variable or a configuration file: the entry command runs
as a subprocess with the image's environment and those, and the HEALTHCHECK command
runs as Docker runs it (the image's environment, none of the broker's flags). It fails
once the broker stopped, and where no broker ever ran."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from magnetar.testing.embedded import free_port

from .image import env_of_image, image_env, run_healthcheck, start_entrypoint, stop, wait_healthy


def test_the_image_names_a_ready_file_its_user_may_write() -> None:
    ready = env_of_image()["MAGNETAR_READY_FILE"]
    assert os.path.isabs(ready) and ready.startswith("/tmp/")


@pytest.mark.parametrize("given", ["flag", "variable", "config file"])
def test_healthcheck_follows_the_admin_port_however_given(tmp_path: Path, given: str) -> None:
    admin_port = free_port()
    env = image_env(MAGNETAR_DATA_DIR=str(tmp_path / "data"), MAGNETAR_PORT=str(free_port()),
                    MAGNETAR_READY_FILE=str(tmp_path / "ready"))
    env.pop("MAGNETAR_ADMIN_PORT", None)
    args: list[str] = []
    if given == "flag":  # docker run magnetar --admin-port N
        args = ["--admin-port", str(admin_port)]
    elif given == "variable":  # docker run -e MAGNETAR_ADMIN_PORT=N magnetar
        env["MAGNETAR_ADMIN_PORT"] = str(admin_port)
    else:  # docker run -v ./m.toml:/etc/m.toml magnetar --config /etc/m.toml
        (tmp_path / "m.toml").write_text(f"[broker]\nadmin_port = {admin_port}\n")
        args = ["--config", str(tmp_path / "m.toml")]
    process = start_entrypoint(env, *args)
    try:
        wait_healthy(f"http://127.0.0.1:{admin_port}", process)
        check = run_healthcheck(env)
        assert check.returncode == 0, check.stderr
        ready = json.loads((tmp_path / "ready").read_text())
        assert ready["admin_url"] == f"http://127.0.0.1:{admin_port}"
        assert ready["pid"] == process.pid
    finally:
        stop(process)
    assert not (tmp_path / "ready").exists()  # a clean stop takes it away
    check = run_healthcheck(env)
    assert check.returncode == 1
    assert "the broker is not serving" in check.stderr


def test_healthcheck_fails_where_the_ready_file_names_a_dead_broker(tmp_path: Path) -> None:
    # What a broker killed with SIGKILL leaves: its ports, nobody answering.
    (tmp_path / "ready").write_text(json.dumps(
        {"pid": 1, "service_url": f"pulsar://127.0.0.1:{free_port()}",
         "admin_url": f"http://127.0.0.1:{free_port()}"}))
    check = run_healthcheck(image_env(MAGNETAR_READY_FILE=str(tmp_path / "ready"),
                                      MAGNETAR_DATA_DIR=str(tmp_path / "data")))
    assert check.returncode == 1
    assert check.stderr.startswith("magnetar healthcheck: unhealthy: ")
    assert "cannot reach" in check.stderr and len(check.stderr.splitlines()) == 1


def test_healthcheck_without_a_ready_file_reads_the_admin_port_setting(tmp_path: Path) -> None:
    env = image_env(MAGNETAR_DATA_DIR=str(tmp_path / "data"), MAGNETAR_PORT=str(free_port()),
                    MAGNETAR_ADMIN_PORT=str(free_port()))
    env.pop("MAGNETAR_READY_FILE")
    check = run_healthcheck(env)
    assert check.returncode == 1 and "cannot reach" in check.stderr
    process = start_entrypoint(env)
    try:
        wait_healthy(f"http://127.0.0.1:{env['MAGNETAR_ADMIN_PORT']}", process)
        check = run_healthcheck(env)
        assert check.returncode == 0, check.stderr
    finally:
        stop(process)
