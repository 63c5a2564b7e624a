"""Configuration layering and the ``magnetar`` command line."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.broker.config import load_config
from magnetar.testing.embedded import free_port, wait_until_listening


def test_defaults_file_env_flags_layer_in_order(tmp_path: Path) -> None:
    config_file = tmp_path / "magnetar.toml"
    config_file.write_text('[broker]\nport = 7000\nsync_policy = "interval"\nadmin_port = 9000\n')
    config = load_config(
        config_file,
        env={"MAGNETAR_PORT": "7001", "MAGNETAR_DEFAULT_PARTITIONS": "4"},
        overrides={"port": 7002},
    )
    assert config.port == 7002
    assert config.default_partitions == 4
    assert config.sync_policy == "interval"
    assert config.admin_port == 9000
    assert load_config(None, env={"MAGNETAR_ADMIN_PORT": "off"}).admin_port is None


def test_bad_settings_are_named(tmp_path: Path) -> None:
    config_file = tmp_path / "bad.toml"
    config_file.write_text("no_such_setting = 1\n")
    with pytest.raises(ValueError, match="no_such_setting"):
        load_config(config_file, env={})
    with pytest.raises(ValueError, match="sync_policy"):
        load_config(None, env={"MAGNETAR_SYNC_POLICY": "sometimes"})


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar", *args], capture_output=True, text=True, timeout=60
    )


def test_latency_settings_come_from_env_and_flags() -> None:
    config = load_config(
        None,
        env={"MAGNETAR_INLINE_SYNC_MAX_SECONDS": "0.002", "MAGNETAR_IDLE_POLL_US": "50"},
        overrides={"idle_poll_us": 300},
    )
    assert config.idle_poll_us == 300
    assert config.inline_sync_max_seconds == 0.002
    assert load_config(None, env={}).idle_poll_us == 200
    with pytest.raises(ValueError, match="idle_poll_us"):
        load_config(None, env={"MAGNETAR_IDLE_POLL_US": "-1"})


def test_default_partitions_must_fit_under_the_cap() -> None:
    assert load_config(None, env={}).max_partitions_per_topic == 1000
    with pytest.raises(ValueError, match="max_partitions_per_topic"):
        load_config(
            None,
            env={"MAGNETAR_DEFAULT_PARTITIONS": "8", "MAGNETAR_MAX_PARTITIONS_PER_TOPIC": "4"},
        )
    unlimited = load_config(None, env={"MAGNETAR_MAX_PARTITIONS_PER_TOPIC": "0"})
    assert unlimited.max_partitions_per_topic == 0


def test_help_everywhere() -> None:
    top = run_cli("--help")
    assert top.returncode == 0 and "serve" in top.stdout
    serve = run_cli("serve", "--help")
    assert serve.returncode == 0
    flags = ("--port", "--data-dir", "--sync-policy", "--config", "--admin-port", "--idle-poll-us")
    for flag in flags:
        assert flag in serve.stdout


def test_bad_config_exits_with_a_message(tmp_path: Path) -> None:
    result = run_cli("serve", "--config", str(tmp_path / "missing.toml"))
    assert result.returncode == 2
    assert "bad configuration" in result.stderr


def test_serve_logs_json_and_shuts_down_cleanly_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "magnetar",
            "serve",
            "--port",
            str(port),
            "--admin-port",
            "off",
            "--data-dir",
            str(tmp_path),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_listening(port, process, 20)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    assert '"msg": "magnetar broker listening on pulsar://127.0.0.1:' in stderr
    assert '"msg": "magnetar broker stopped"' in stderr
