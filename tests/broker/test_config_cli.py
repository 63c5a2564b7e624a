"""Configuration layering and the ``magnetar`` command line."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from dataclasses import MISSING, fields
from pathlib import Path

import pulsar
import pytest
from official_client import quiet_logger

from magnetar.broker.config import MINUS_ONE_IS_NO_LIMIT, BrokerConfig, ConfigError, load_config
from magnetar.broker.service import BrokerService
from magnetar.storage.dir_lock import DataDirLock
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


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


def assert_refused(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit code 2 and one line on stderr holding ``words``; returns the line."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0]
    return lines[0]


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


def test_serve_help_lists_every_setting_with_its_default() -> None:
    text = run_cli("serve", "--help").stdout
    entries = re.split(r"\n  (?=-)", text)[1:]  # each option's entry, wrapped lines included
    by_flag = {entry.split()[0].rstrip(","): " ".join(entry.split()) for entry in entries}
    for f in fields(BrokerConfig):
        flag = "--" + f.name.replace("_", "-")
        assert flag in by_flag, f"{flag} is missing from serve --help"
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        if default is None:
            shown = "none"
        elif isinstance(default, bool):
            shown = str(default).lower()
        else:
            shown = str(default)
        assert f"(default: {shown})" in by_flag[flag], by_flag[flag]
    # and every flag is taken, by its setting
    config = load_config(
        None,
        env={},
        overrides={"rpc_max_held_replies": "7", "allow_auto_topic_creation": "off"},
    )
    assert config.rpc_max_held_replies == 7 and config.allow_auto_topic_creation is False


def test_booleans_take_the_usual_words_and_nothing_else(tmp_path: Path) -> None:
    key = "MAGNETAR_DISPATCH_BEFORE_SYNC"
    for word in ("true", "True", "1", "yes", "YES", "on", " On "):
        assert load_config(None, env={key: word}).dispatch_before_sync is True
    for word in ("false", "FALSE", "0", "no", "No", "off"):
        assert load_config(None, env={key: word}).dispatch_before_sync is False
    with pytest.raises(ConfigError) as refused:
        load_config(None, env={key: "flase"})
    assert refused.value.setting == "dispatch_before_sync"
    assert refused.value.value == "flase"
    assert key in str(refused.value)
    config_file = tmp_path / "magnetar.toml"
    config_file.write_text("allow_auto_topic_creation = false\n")
    assert load_config(config_file, env={}).allow_auto_topic_creation is False
    config_file.write_text('allow_auto_topic_creation = "flase"\n')
    with pytest.raises(ConfigError, match="allow_auto_topic_creation = 'flase'"):
        load_config(config_file, env={})


def test_port_zero_means_any_free_port_from_python_only() -> None:
    BrokerConfig(port=0, admin_port=0).validate()  # EmbeddedBroker and tests may use it
    with pytest.raises(ConfigError, match="port = 0"):
        load_config(None, env={"MAGNETAR_PORT": "0"})
    with pytest.raises(ConfigError, match="admin_port = 0"):
        load_config(None, env={"MAGNETAR_ADMIN_PORT": "0"})
    with pytest.raises(ConfigError, match="port = 65536"):
        BrokerConfig(port=65536).validate()


def test_every_number_setting_refuses_a_negative_value() -> None:
    """A new number setting needs its range checked in BrokerConfig.validate()."""
    numbers = [f.name for f in fields(BrokerConfig) if str(f.type) in ("int", "float")]
    assert "port" in numbers and "sync_interval" in numbers
    for name in numbers:
        value = "-2" if name in MINUS_ONE_IS_NO_LIMIT else "-1"  # -1 is Pulsar's "no limit"
        with pytest.raises(ConfigError) as refused:
            load_config(None, env={f"MAGNETAR_{name.upper()}": value})
        assert refused.value.setting == name


BAD_SETTINGS = [
    # (flags, environment, TOML file, what the one line must name)
    (["--port", "99999"], {}, None, "port = 99999"),
    (["--port", "0"], {}, None, "port = 0"),
    (["--port", "six"], {}, None, "port = 'six'"),
    (["--admin-port", "http"], {}, None, "admin_port = 'http'"),
    (["--admin-port", "70000"], {}, None, "admin_port = 70000"),
    ([], {"MAGNETAR_ADMIN_PORT": "eighty"}, None, "admin_port = 'eighty'"),
    (["--log-level", "LOUD"], {}, None, "log_level = 'LOUD'"),
    ([], {"MAGNETAR_DISPATCH_BEFORE_SYNC": "flase"}, None, "dispatch_before_sync = 'flase'"),
    ([], {}, 'dispatch_before_sync = "flase"', "dispatch_before_sync = 'flase'"),
    (["--allow-auto-topic-creation", "maybe"], {}, None, "allow_auto_topic_creation = 'maybe'"),
    (["--sync-policy", "sometimes"], {}, None, "sync_policy = 'sometimes'"),
]


@pytest.mark.parametrize(("flags", "env", "toml", "named"), BAD_SETTINGS)
def test_serve_refuses_a_bad_setting_in_one_line(
    tmp_path: Path, flags: list[str], env: dict[str, str], toml: str | None, named: str
) -> None:
    args = ["serve", *flags]
    if toml is not None:
        (tmp_path / "magnetar.toml").write_text(toml + "\n")
        args += ["--config", str(tmp_path / "magnetar.toml")]
    result = run_cli(*args, env=env, cwd=tmp_path)  # a default ./data would go in tmp_path
    assert_refused(result, "magnetar: bad configuration: ", named)


def test_serve_refuses_a_data_dir_that_is_a_file_or_cannot_be_made(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    cases = [
        (a_file, "is a file"),
        (a_file / "data", f"{a_file} is a file"),
        # Not even root may create a directory here (a test can make no place that
        # root cannot write to otherwise).
        (Path("/proc/magnetar-test-data"), ""),
    ]
    for data_dir, reason in cases:
        result = run_cli("serve", "--admin-port", "off", "--port", str(free_port()),
                         "--data-dir", str(data_dir))
        assert_refused(result, f"data_dir = {data_dir}", reason)


@pytest.mark.parametrize("setting", ["port", "admin_port"])
def test_serve_refuses_a_port_in_use(tmp_path: Path, setting: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        ports = {"port": str(free_port()), "admin_port": str(free_port()), setting: str(taken)}
        result = run_cli("serve", "--port", ports["port"], "--admin-port", ports["admin_port"],
                         "--data-dir", str(tmp_path))
    line = assert_refused(result, f"{setting} = {taken}", f"127.0.0.1:{taken}")
    assert line.startswith(f"magnetar: cannot start: {setting} = ")


async def test_a_failed_start_leaves_the_data_dir_unlocked(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        service = BrokerService(BrokerConfig(
            port=busy.getsockname()[1], admin_port=None, data_dir=tmp_path, idle_poll_us=0))
        with pytest.raises(ConfigError, match="port"):
            await service.start()
    lock = DataDirLock(tmp_path)
    lock.acquire()  # nothing left it held
    lock.release()


def serve_process(port: int, data_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "magnetar", "serve", "--port", str(port), "--admin-port", "off",
         "--data-dir", str(data_dir), "--log-format", "text"],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def stop_process(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        _, stderr = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
    return stderr


def test_a_second_broker_on_a_data_dir_in_use_is_refused_and_the_first_serves_on(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    first = serve_process(port, data_dir)
    try:
        wait_until_listening(port, first, 30)
        second = run_cli("serve", "--port", str(free_port()), "--admin-port", "off",
                         "--data-dir", str(data_dir))
        assert_refused(
            second,
            f"data directory {data_dir} is in use by another broker (pid {first.pid})",
        )
        topic = f"persistent://public/default/lock-{uuid.uuid4().hex[:8]}"
        client = pulsar.Client(
            f"pulsar://127.0.0.1:{port}", logger=quiet_logger()
        )
        try:
            consumer = client.subscribe(topic, "s")
            client.create_producer(topic).send(b"still serving")
            assert consumer.receive(10000).data() == b"still serving"
        finally:
            client.close()
        stop_process(first)
        assert first.returncode == 0
        # The lock goes with the broker that held it.
        third = serve_process(port, data_dir)
        try:
            wait_until_listening(port, third, 30)
        finally:
            stop_process(third)
        assert third.returncode == 0
    finally:
        stop_process(first)


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


def test_the_broker_knows_no_http() -> None:
    """magnetar.server puts the broker and the admin HTTP server together; the broker
    package itself imports neither the admin server nor aiohttp."""
    code = (
        "import sys, magnetar.broker.service\n"
        "print(sorted(m for m in sys.modules if m.startswith(('aiohttp', 'magnetar.admin'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"
