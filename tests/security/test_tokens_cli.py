"""``magnetar tokens`` like ``pulsar tokens``, and the README's three-command recipe
run as a user would: make a key, make a token, start ``magnetar serve`` with
authentication on, and connect with the token."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pulsar
import pytest
from official_client import quiet_logger

from magnetar.cli import main
from magnetar.testing.embedded import free_port, wait_until_listening


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["tokens", *argv])
    out = capsys.readouterr()
    return code, out.out.strip(), out.err.strip()


def test_secret_key_token_show_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "secret.key"
    assert run(capsys, "create-secret-key", "--output", str(key))[0] == 0
    assert len(key.read_bytes()) == 32
    assert key.stat().st_mode & 0o077 == 0  # not readable by others
    code, printed, _ = run(capsys, "create-secret-key", "--base64")
    assert code == 0 and len(base64.b64decode(printed)) == 32

    code, token, _ = run(capsys, "create", "--secret-key", f"file://{key}", "--subject", "alice",
                         "--expiry-time", "1h")
    assert code == 0 and token.count(".") == 2
    code, shown, _ = run(capsys, "show", "-i", token)
    header, claims = (json.loads(part) for part in shown.split("---"))
    assert header["alg"] == "HS256" and claims["sub"] == "alice" and "exp" in claims
    assert run(capsys, "validate", "-i", token, "-sk", f"file://{key}")[0] == 0
    other = tmp_path / "other.key"
    run(capsys, "create-secret-key", "-o", str(other))
    code, _, err = run(capsys, "validate", "-i", token, "-sk", f"file://{other}")
    assert code == 1 and "Signature verification failed" in err


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_key_pair_tokens(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                         algorithm: str) -> None:
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    assert run(capsys, "create-key-pair", "-a", algorithm, "--output-private-key", str(private),
               "--output-public-key", str(public))[0] == 0
    code, token, _ = run(capsys, "create", "-pk", f"file://{private}", "-s", "bob")
    assert code == 0
    assert json.loads(run(capsys, "show", "-i", token)[1].split("---")[0])["alg"] == algorithm
    data_url = "data:;base64," + base64.b64encode(public.read_bytes()).decode()
    assert run(capsys, "validate", "-i", token, "-pk", data_url)[0] == 0


def test_mistakes_are_one_line_and_exit_2(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "create", "-sk", f"file://{tmp_path}/missing.key", "-s", "a")
    assert code == 2 and "cannot read" in err
    code, _, err = run(capsys, "create", "-sk", "data:;base64,AAAA", "-s", "a", "-e", "soon")
    assert code == 2 and "not a duration" in err
    code, _, err = run(capsys, "show", "-i", "nope")
    assert code == 2 and "not a JWT" in err


def test_the_readme_recipe(tmp_path: Path) -> None:
    """magnetar tokens create-secret-key; magnetar tokens create; magnetar serve."""
    magnetar = [sys.executable, "-m", "magnetar"]
    key = tmp_path / "my-secret.key"
    subprocess.run([*magnetar, "tokens", "create-secret-key", "--output", str(key)], check=True)
    token = subprocess.run(
        [*magnetar, "tokens", "create", "--secret-key", f"file://{key}", "--subject", "alice"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    port = free_port()
    env = {**os.environ, "MAGNETAR_LOG_LEVEL": "WARNING"}
    server = subprocess.Popen(
        [*magnetar, "serve", "--port", str(port), "--admin-port", "off",
         "--data-dir", str(tmp_path / "data"), "--authentication-enabled", "true",
         "--token-secret-key", f"file://{key}"],
        env=env, stdin=subprocess.DEVNULL,
    )
    try:
        wait_until_listening(port, server, 30)
        good = pulsar.Client(f"pulsar://127.0.0.1:{port}", logger=quiet_logger(),
                             authentication=pulsar.AuthenticationToken(token))
        bad = pulsar.Client(f"pulsar://127.0.0.1:{port}", logger=quiet_logger(),
                            operation_timeout_seconds=3)
        try:
            good.create_producer("recipe").send(b"hello")
            with pytest.raises(pulsar.PulsarException):
                bad.create_producer("recipe")
        finally:
            good.close()
            bad.close()
    finally:
        server.terminate()
        server.wait(30)


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["tokens", "--help"], ["tokens", "create", "--help"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "create-secret-key" in out and "--subject" in out and "--expiry-time" in out
